package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewRESTSplitShardCountBounded: an in-place split may not take an
// index over the 1024 shards an OpenSearch index may have
// (index.number_of_shards' maximum). In opensearch mode a one-shard index
// accepted number_of_splits up to about 4.29 million (each child only needs
// more than 1000 hashes): the reservation was made and the task set out to
// make one store per child (2048 children took 12 s here; millions exhaust
// file descriptors and hold the node for hours).
func TestReviewRESTSplitShardCountBounded(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/osm", `{"settings":{"number_of_shards":1,"number_of_replicas":0,"shardsplit.mode":"opensearch"}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, tc := range []struct{ body, reason string }{
		{`{"number_of_splits":1025}`, "Cannot split shard [0] of index [osm] into [1025] shards: the index would have [1025] shards, more than the [1024] an index may have"},
		{`{"number_of_splits":4000000}`, "Cannot split shard [0] of index [osm] into [4000000] shards: the index would have [4000000] shards, more than the [1024] an index may have"},
	} {
		var out struct {
			errBody
			Task string `json:"task"`
		}
		st := ts.do(t, "POST", "/osm/_shards/0/_split", tc.body, &out)
		if out.Task != "" {
			// Acknowledged: stop it before the test ends.
			ts.do(t, "POST", "/_tasks/"+out.Task+"/_cancel", "", nil)
			if task, err := ts.svc.Task(out.Task); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				_ = task.Wait(ctx)
				cancel()
			}
		}
		if st != 400 || out.Error.Type != "illegal_argument_exception" || out.Error.Reason != tc.reason {
			t.Fatalf("split %s: HTTP %d %+v; want 400 illegal_argument_exception %q", tc.body, st, out, tc.reason)
		}
	}
	// Within the limit a split runs; counted against the shards the index
	// has, the next one may not take it over.
	var out struct{ Task string }
	if st := ts.do(t, "POST", "/osm/_shards/0/_split", `{"number_of_splits":2}`, &out); st != 200 {
		t.Fatalf("a split within the limit: %d", st)
	}
	task, err := ts.svc.Task(out.Task)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := task.Wait(ctx); err != nil || task.Status().Err != nil {
		t.Fatalf("split into 2: %v %v", err, task.Status().Err)
	}
	tab, _ := ts.svc.Table("osm")
	if n := len(tab.ActiveShards()); n != 2 {
		t.Fatalf("%d shards after the split, want 2", n)
	}
	var eb errBody
	st := ts.do(t, "POST", "/osm/_shards/1/_split", fmt.Sprintf(`{"number_of_splits":%d}`, 1024), &eb)
	if st != 400 || eb.Error.Reason != "Cannot split shard [1] of index [osm] into [1024] shards: the index would have [1025] shards, more than the [1024] an index may have" {
		t.Fatalf("split to 1025 shards: HTTP %d %+v", st, eb)
	}
}
