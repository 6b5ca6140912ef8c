package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/service"
	"github.com/shardsplit/shardsplit/splitter"
)

// TestReviewRESTCancelledTaskError: a split cancelled over the API ends as
// OpenSearch reports a cancelled task: task_cancelled_exception, "task
// cancelled [by user request]" (a 500: TaskCancelledException sets no
// status), both to a request that waited for it (wait_for_completion) and
// in GET _tasks' error. It was a generic "exception" whose reason was the
// splitter's "splitter: cancelled".
func TestReviewRESTCancelledTaskError(t *testing.T) {
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
