package cluster_test

import (
	"encoding/json"
	"fmt"
	"testing"

	. "github.com/shardsplit/shardsplit/cluster"
)

// benchState is a green cluster of 10 nodes holding 100 indices of 10
// shards with 1 replica: 2,000 copies. It is built with Apply alone (no
// checks), as the log would build it.
func benchState(b *testing.B) *State {
	b.Helper()
	must := func(s *State, t Task) *State {
		next, err := Apply(s, t)
		if err != nil {
			b.Fatalf("%s: %v", t.Kind(), err)
		}
		return next
	}
	boot := &Bootstrap{ClusterName: "bench", ClusterUUID: "bench-uuid"}
	for i := range 10 {
		boot.Nodes = append(boot.Nodes, NodeInfo{Name: fmt.Sprintf("n%02d", i), ID: fmt.Sprintf("id%02d", i)})
	}
	s := must(&State{}, Task{Bootstrap: boot})
	for i := range 100 {
		s = must(s, createTask(fmt.Sprintf("index-%03d", i), 10, 1))
	}
	for range 2 { // primaries, then the replicas they let in
		for c := range s.AllCopies() {
			if c.Copy.State == Initializing {
				s = must(s, Task{ShardStarted: &ShardStarted{Index: c.Index, Shard: c.Shard, AllocationID: c.Copy.AllocationID}})
			}
		}
	}
	if h := s.Health(); h.Status != Green || h.ActiveShards != 2000 {
		b.Fatalf("bench state health %+v, want green with 2000 copies", h)
	}
	return s
}

// BenchmarkApply measures Apply on the 2,000-copy state: every node runs it
// once per committed log entry.
func BenchmarkApply(b *testing.B) {
	green := benchState(b)
	replica := green.Indices["index-050"].Copies[5][1]
	failed, err := Apply(green, Task{ShardFailed: &ShardFailed{Index: "index-050", Shard: 5, AllocationID: replica.AllocationID}})
	if err != nil {
		b.Fatal(err)
	}
	rebuilt := failed.Indices["index-050"].Copies[5][1]
	cases := []struct {
		name string
		base *State
		task Task
	}{
		{"reroute", green, Task{Reroute: &Reroute{}}},
		{"shard-started", failed, Task{ShardStarted: &ShardStarted{Index: "index-050", Shard: 5, AllocationID: rebuilt.AllocationID}}},
		{"shard-failed", green, Task{ShardFailed: &ShardFailed{Index: "index-050", Shard: 5, AllocationID: replica.AllocationID, MarkStale: true}}},
		{"create-index", green, createTask("new", 10, 1)},
		{"update-replicas", green, Task{UpdateReplicas: &UpdateReplicas{Index: "index-050", Replicas: 2}}},
		{"node-left", green, Task{NodeLeft: &NodeLeft{Name: "n05"}}}, // 200 copies fail, about 100 promotions
	}
	for _, c := range cases {
		b.Run("task="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Apply(c.base, c.task); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("validate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := green.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("health", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			green.Health()
		}
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out, err := json.Marshal(green)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
		}
	})
}
