package cluster_test

import (
	"encoding/json"
	"strings"
	"testing"

	. "github.com/shardsplit/shardsplit/cluster"
)

// TestHealthOfAnInactivePrimary: a primary of a new shard that is only
// waiting to start is yellow; one the allocator could not place, one that
// failed, or one of a shard that was active before is red
// (ClusterShardHealth.getInactivePrimaryHealth).
func TestHealthOfAnInactivePrimary(t *testing.T) {
	created := mustApply(t, bootstrap(t, "n1", "n2"), createTask("i", 1, 0))
	p := primary(t, created, "i", 0)
	failed := mustApply(t, created, Task{ShardFailed: &ShardFailed{Index: "i", AllocationID: p.AllocationID, Reason: "disk"}})
	noNodes := mustApply(t, mustApply(t, mustApply(t, bootstrap(t, "n1"), Task{NodeLeft: &NodeLeft{Name: "n1"}}), createTask("i", 1, 0)), Task{Reroute: &Reroute{}})
	started := startAll(t, created)
	lost := mustApply(t, started, Task{NodeLeft: &NodeLeft{Name: primary(t, started, "i", 0).Node}})
	for _, tc := range []struct {
		name string
		s    *State
		want HealthStatus
	}{
		{"new primary initializing", created, Yellow},
		{"new primary failed once and retried", failed, Red},
		{"new primary with no node to go to", noNodes, Red},
		{"started", started, Green},
		{"primary of an active shard lost", lost, Red},
	} {
		if got := tc.s.Health(); got.Status != tc.want || got.Indices["i"].Status != tc.want {
			t.Errorf("%s: health %s (index %s), want %s", tc.name, got.Status, got.Indices["i"].Status, tc.want)
		}
	}
	if p := primary(t, failed, "i", 0); p.State != Initializing || p.FailedAllocations != 1 || p.Node != "n2" {
		t.Errorf("failed primary = %+v, want it retried on n2 with one failure counted", p)
	}
}

func TestHealthEncodesAsClusterHealth(t *testing.T) {
	b, err := json.Marshal(mustApply(t, bootstrap(t, "n1"), createTask("i", 2, 1)).Health())
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"cluster_name":"c"`, `"status":"yellow"`, `"number_of_nodes":1`, `"number_of_data_nodes":1`,
		`"active_primary_shards":0`, `"active_shards":0`, `"relocating_shards":0`, `"initializing_shards":2`, `"unassigned_shards":2`,
		`"delayed_unassigned_shards":0`, `"active_shards_percent_as_number":0`, `"number_of_shards":2`, `"number_of_replicas":1`} {
		if !strings.Contains(string(b), field) {
			t.Errorf("health JSON %s lacks %s", b, field)
		}
	}
}
