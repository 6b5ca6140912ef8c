package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/service"
	"github.com/shardsplit/shardsplit/splitter"
)

// TestCancelledTaskError: a split cancelled over the API ends as
// OpenSearch reports a cancelled task: task_cancelled_exception, "task
// cancelled [by user request]" (a 500: TaskCancelledException sets no
// status), both to a request that waited for it (wait_for_completion) and
// in GET _tasks' error, not a generic "exception" with the splitter's
// words.
func TestCancelledTaskError(t *testing.T) {
	reached, release := make(chan struct{}), make(chan struct{})
	first := true
	ts := startServer(t, service.Config{SplitHook: func(index string, phase splitter.Phase, next splitter.Intent) {
		if first && next.Kind == splitter.IntentCatchUp {
			first = false
			close(reached)
			<-release
		}
	}})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	type answer struct {
		status int
		body   string
	}
	waited := make(chan answer, 1)
	go func() {
		var body string
		st := ts.do(t, "POST", "/logs/_shards/0/_split?wait_for_completion=true", `{"number_of_splits":2}`, &body)
		waited <- answer{st, body}
	}()
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the split never reached its catch-up")
	}
	tasks := ts.svc.Tasks()
	if len(tasks) != 1 {
		t.Fatalf("tasks: %v", tasks)
	}
	if st := ts.do(t, "POST", "/_tasks/"+tasks[0].ID+"/_cancel", "", nil); st != 200 {
		t.Fatalf("cancel: %d", st)
	}
	close(release)
	var a answer
	select {
	case a = <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting request never returned")
	}
	var eb errBody
	_ = json.Unmarshal([]byte(a.body), &eb)
	if a.status != 500 || eb.Error.Type != "task_cancelled_exception" || eb.Error.Reason != "task cancelled [by user request]" {
		t.Errorf("the waiting split request: HTTP %d %s; want 500 task_cancelled_exception", a.status, a.body)
	}
	var got struct {
		Completed bool `json:"completed"`
		Error     struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"error"`
	}
	if st := ts.do(t, "GET", "/_tasks/"+tasks[0].ID, "", &got); st != 200 || !got.Completed ||
		got.Error.Type != "task_cancelled_exception" || got.Error.Reason != "task cancelled [by user request]" {
		t.Errorf("GET the cancelled task: %d %+v", st, got)
	}
}

// TestMalformedTaskID: a task id whose number is not a Java long is
// malformed (OpenSearch's TaskId: 400 illegal_argument_exception
// "malformed task id ..."), for a get and a cancel; only a well-formed id
// that names no task is a 404.
func TestMalformedTaskID(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, tc := range []struct {
		method, path, id string
		status           int
	}{
		{"GET", "/_tasks/node:abc", "node:abc", 400},
		{"POST", "/_tasks/node:abc/_cancel", "node:abc", 400},
		{"GET", "/_tasks/node:1:2", "node:1:2", 400},
		{"GET", "/_tasks/node:99999999999999999999", "node:99999999999999999999", 400},
		{"GET", "/_tasks/node:7", "node:7", 404},
	} {
		var eb errBody
		st := ts.do(t, tc.method, tc.path, "", &eb)
		want := "malformed task id " + tc.id
		if tc.status == 404 {
			want = "task [" + tc.id + "] isn't running and hasn't stored its results"
		}
		if st != tc.status || eb.Error.Reason != want {
			t.Errorf("%s %s: HTTP %d %+v; want %d %q", tc.method, tc.path, st, eb, tc.status, want)
		}
	}
}

// TestSplitShardCountBounded: an in-place split may not take an index over
// the 1024 shards an OpenSearch index may have (index.number_of_shards'
// maximum). In opensearch mode each child of a one-shard index only needs
// more than 1000 hashes, so number_of_splits up to about 4.29 million would
// pass the table: the task would set out to make one store per child
// (2048 children take 12 s; millions exhaust file descriptors and hold the
// node for hours).
func TestSplitShardCountBounded(t *testing.T) {
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

// TestSplitBodyNotAnObject: a split or merge body that is JSON but not an
// object is refused as OpenSearch's ObjectParser refuses one, an
// x_content_parse_exception at the token's location, not with a Go
// decoder's words.
func TestSplitBodyNotAnObject(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/sb", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil)
	for _, tc := range []struct{ path, body, want string }{
		{"/sb/_shards/0/_split", `[2]`, "[1:1] [split] Expected START_OBJECT but was: START_ARRAY"},
		{"/sb/_shards/0/_split", ` 2`, "[1:2] [split] Expected START_OBJECT but was: VALUE_NUMBER"},
		{"/sb/_shards/_merge", `["a"]`, "[1:1] [merge] Expected START_OBJECT but was: START_ARRAY"},
	} {
		var eb errBody
		if st := ts.do(t, "POST", tc.path, tc.body, &eb); st != 400 || eb.Error.Type != "x_content_parse_exception" || eb.Error.Reason != tc.want {
			t.Errorf("POST %s %s: %d %+v", tc.path, tc.body, st, eb)
		}
	}
}
