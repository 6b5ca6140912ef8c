package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewRESTReplicaCountBounded: number_of_replicas is a Java int
// setting and every replica is a shard copy the cluster's shard limit
// (cluster.max_shards_per_node, 1000 on our one node) counts, as
// OpenSearch's ShardLimitValidator does on create and on a replica
// increase. Unbounded, one PUT with a huge count was acknowledged and every
// later _cat/shards, _cat/indices and _cluster/health built one row per
// unassigned replica: 99999999999 of them exhausted memory and the process
// was killed.
func TestReviewRESTReplicaCountBounded(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/ok", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, tc := range []struct {
		name, method, path, body string
		typ, reason              string
	}{
		{"replicas beyond a Java int", "PUT", "/huge", `{"settings":{"number_of_replicas":99999999999}}`,
			"illegal_argument_exception", "Failed to parse value [99999999999] for setting [index.number_of_replicas]"},
		{"shards times replicas over the limit", "PUT", "/many", `{"settings":{"number_of_shards":2,"number_of_replicas":2000000}}`,
			"validation_exception", "Validation Failed: 1: this action would add [4000002] total shards, but this cluster currently has [2]/[1000] maximum shards open;"},
		{"replica increase over the limit", "PUT", "/ok/_settings", `{"index":{"number_of_replicas":2147483647}}`,
			"validation_exception", "Validation Failed: 1: this action would add [4294967294] total shards, but this cluster currently has [2]/[1000] maximum shards open;"},
	} {
		// Fatal at the first acknowledged one: a _cat or health request
		// (the cleanup makes none) would then try to list its replicas.
		var eb errBody
		st := ts.do(t, tc.method, tc.path, tc.body, &eb)
		if st != 400 || eb.Status != 400 || eb.Error.Type != tc.typ || eb.Error.Reason != tc.reason {
			t.Fatalf("%s: %s %s: HTTP %d %+v; want 400 %s %q", tc.name, tc.method, tc.path, st, eb, tc.typ, tc.reason)
		}
	}
	// What is left is served at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.url+"/_cat/shards", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("_cat/shards: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("_cat/shards: %d", resp.StatusCode)
	}
	if names := ts.svc.Names(); len(names) != 1 {
		t.Fatalf("indices: %v, want only ok", names)
	}
}
