package service

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
)

// splitIndex creates index ix with 2 shards in mode, 100 documents, and
// splits shard 0 into 2 (children 2 and 3).
func splitIndex(t *testing.T, s *Service, mode string) {
	t.Helper()
	if _, err := s.CreateIndex(CreateRequest{Name: "ix", Settings: FlatSettings{SettingShards: str("2"), SettingMode: str(mode)}}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := s.IndexDoc("ix", fmt.Sprint(i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	task, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 0, Ways: 2})
	waitTask(t, task, err)
}

// waitTask waits for a task and requires it to end in PhaseDone.
func waitTask(t *testing.T, task *Task, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := task.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if snap := task.Status(); snap.Phase != "done" || snap.Err != nil {
		t.Fatalf("%s ended in %s: %v", task.Description(), snap.Phase, snap.Err)
	}
}

// TestMergeBothModes merges the children of a split back in both routing
// modes: every document stays, the target is STARTED and the sources are
// gone from the shard rows.
func TestMergeBothModes(t *testing.T) {
	for _, mode := range []string{"partition", "opensearch"} {
		t.Run(mode, func(t *testing.T) {
			s := openT(t, t.TempDir())
			defer s.Close()
			splitIndex(t, s, mode)
			task, err := s.StartMerge(MergeRequest{Index: "ix", Shards: []routing.ShardID{3, 2}})
			waitTask(t, task, err)
			tab, _ := s.Table("ix")
			if got := tab.ActiveShards(); !slices.Equal(got, []routing.ShardID{1, 4}) {
				t.Fatalf("active shards %v, want [1 4]", got)
			}
			res, err := s.Search(SearchRequest{Indices: "ix", Size: -1})
			if err != nil || res.Total != 100 {
				t.Fatalf("%d documents after the merge, %v", res.Total, err)
			}
			rows, err := s.ShardRows("ix")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.Primary && (r.State != StateStarted || (r.Shard != 1 && r.Shard != 4)) {
					t.Fatalf("shard rows after the merge: %+v", rows)
				}
			}
		})
	}
}

// TestCloseMidMergeRecovers closes the service while a merge is held: on
// reopen recovery rolls it back (before its commit point) or forward
// (after it), every document is there, and a rolled-back merge can run
// again.
func TestCloseMidMergeRecovers(t *testing.T) {
	// The held intent is carried out before the task sees the stop: held at
	// the sync, the table is staged but not installed; held at the commit,
	// it is installed and the sources are not yet retired.
	for _, at := range []splitter.IntentKind{splitter.IntentBuildTargets, splitter.IntentCatchUp, splitter.IntentSyncTargets, splitter.IntentCommitTable} {
		t.Run(at.String(), func(t *testing.T) {
			dir := t.TempDir()
			armed := false
			hook, reached, release := holdAt(at)
			s, err := Open(Config{Dir: dir, SplitHook: func(ix string, p splitter.Phase, next splitter.Intent) {
				if armed {
					hook(ix, p, next)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			splitIndex(t, s, "partition")
			armed = true // the split has ended: its goroutine reads armed no more
			task, err := s.StartMerge(MergeRequest{Index: "ix", Shards: []routing.ShardID{2, 3}})
			if err != nil {
				t.Fatal(err)
			}
			<-reached
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			<-task.stop // Close has asked the task to stop before the held intent returns
			close(release)
			if err := <-closed; err != nil {
				t.Fatal(err)
			}
			if snap := task.Status(); !snap.Completed || snap.Err == nil || slices.Contains([]string{"done", "aborted", "failed"}, snap.Phase) {
				t.Fatalf("task after Close: %+v", snap)
			}
			s = openT(t, dir)
			defer s.Close()
			tab, _ := s.Table("ix")
			if len(tab.MergesInProgress()) != 0 {
				t.Fatalf("a merge is still in progress after recovery: %v", tab.MergesInProgress())
			}
			res, err := s.Search(SearchRequest{Indices: "ix", Size: -1})
			if err != nil || res.Total != 100 {
				t.Fatalf("after recovery: %d documents, %v", res.Total, err)
			}
			want := []routing.ShardID{1, 2, 3}
			if at == splitter.IntentCommitTable { // stopped after the commit point: rolled forward
				want = []routing.ShardID{1, 4}
			}
			if got := tab.ActiveShards(); !slices.Equal(got, want) {
				t.Fatalf("active shards %v, want %v", got, want)
			}
			if at != splitter.IntentCommitTable {
				task, err := s.StartMerge(MergeRequest{Index: "ix", Shards: []routing.ShardID{2, 3}})
				waitTask(t, task, err)
			}
		})
	}
}
