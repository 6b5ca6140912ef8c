package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/splitter"
)

// TestReviewCloseDuringSplitReservation: a service Close while a split
// request is taking its reservation (the task's first intent, in the
// request's goroutine, before the task is registered) must neither leave a
// task running on the closed index nor lose the index: the request fails,
// Close stops everything it started, and the data directory reopens and
// serves.
func TestReviewCloseDuringSplitReservation(t *testing.T) {
	dir := t.TempDir()
	inHook := make(chan struct{})
	release := make(chan struct{})
	first := true
	s, err := Open(Config{Dir: dir, SplitHook: func(index string, phase splitter.Phase, next splitter.Intent) {
		if first && next.Kind == splitter.IntentReserve {
			first = false
			close(inHook)
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateIndex(CreateRequest{Name: "r", Settings: FlatSettings{SettingShards: str("1"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := s.IndexDoc("r", fmt.Sprintf("d%d", i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		task *Task
		err  error
	}
	started := make(chan result, 1)
	go func() {
		task, err := s.StartSplit(SplitRequest{Index: "r", Shard: 0, Ways: 2})
		started <- result{task, err}
	}()
	<-inHook
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close must not return while the split request may still start a
	// task on the index it closes; give it a moment to try.
	closeDone := false
	select {
	case err := <-closed:
		closeDone = true
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	var res result
	select {
	case res = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the split request never returned")
	}
	if !closeDone {
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("Close: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Close never returned")
		}
	}
	t.Logf("split request: %v", res.err)
	if res.err == nil {
		select {
		case <-res.task.Done():
		default:
			t.Errorf("task %s is still running on an index the closed service no longer owns (phase %s)", res.task.ID, res.task.Status().Phase)
			<-res.task.Done()
		}
	}
	for _, task := range s.Tasks() {
		select {
		case <-task.Done():
		default:
			t.Errorf("task %s still running after Close", task.ID)
		}
	}
	s2, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatalf("reopen after a close during a split's reservation: %v", err)
	}
	defer s2.Close()
	res2, err := s2.Search(SearchRequest{Indices: "r", Size: -1})
	if err != nil || res2.Total != 50 {
		t.Fatalf("after reopen: %d documents, %v; want 50", res2.Total, err)
	}
}
