package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
)

// holdAt returns a hook that blocks the first intent of kind k until
// release is closed, signalling reached when it gets there.
func holdAt(k splitter.IntentKind) (hook func(string, splitter.Phase, splitter.Intent), reached, release chan struct{}) {
	reached, release = make(chan struct{}), make(chan struct{})
	fired := false
	return func(_ string, _ splitter.Phase, next splitter.Intent) {
		if next.Kind == k && !fired {
			fired = true
			close(reached)
			<-release
		}
	}, reached, release
}

// TestCloseMidSplitRecovers closes the service while a split is held
// before its handoff: on reopen, recovery rolls it back, every document is
// there, and the shard can be split again.
func TestCloseMidSplitRecovers(t *testing.T) {
	for _, at := range []splitter.IntentKind{splitter.IntentBuildTargets, splitter.IntentCatchUp, splitter.IntentCleanup} {
		t.Run(at.String(), func(t *testing.T) {
			dir := t.TempDir()
			hook, reached, release := holdAt(at)
			s := openService(t, Config{Dir: dir, SplitHook: hook})
			if _, err := s.CreateIndex(CreateRequest{Name: "ix", Settings: FlatSettings{SettingShards: str("2")}}); err != nil {
				t.Fatal(err)
			}
			for i := range 100 {
				if _, err := s.IndexDoc("ix", fmt.Sprint(i), "", []byte(`{}`), WriteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			task, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 0, Ways: 2})
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
			if snap := task.Status(); !snap.Completed {
				t.Fatalf("task not completed after Close: %+v", snap)
			}
			s = openT(t, dir)
			defer s.Close()
			tab, _ := s.Table("ix")
			if len(tab.InProgress()) != 0 {
				t.Fatalf("a split is still in progress after recovery: %v", tab.InProgress())
			}
			res, err := s.Search(SearchRequest{Indices: "ix", Size: -1})
			if err != nil || res.Total != 100 {
				t.Fatalf("after recovery: %d documents, %v", res.Total, err)
			}
			wantActive := 2
			if at == splitter.IntentCleanup { // held after the commit point: rolled forward
				wantActive = 3
			}
			if len(tab.ActiveShards()) != wantActive {
				t.Fatalf("active shards %v, want %d", tab.ActiveShards(), wantActive)
			}
			if wantActive == 2 {
				task, err = s.StartSplit(SplitRequest{Index: "ix", Shard: 0, Ways: 2})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := task.Wait(ctx); err != nil || task.Status().Phase != "done" {
					t.Fatalf("split after recovery: %v %+v", err, task.Status())
				}
			}
		})
	}
}

// TestDeleteDuringSplit deletes an index whose split is held: the split is
// cancelled first, the index and its directory are gone.
func TestDeleteDuringSplit(t *testing.T) {
	hook, reached, release := holdAt(splitter.IntentCatchUp)
	s := openService(t, Config{SplitHook: hook})
	if _, err := s.CreateIndex(CreateRequest{Name: "ix", Settings: FlatSettings{SettingShards: str("2")}}); err != nil {
		t.Fatal(err)
	}
	task, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 1, Ways: 3})
	if err != nil {
		t.Fatal(err)
	}
	<-reached
	deleted := make(chan error, 1)
	go func() { deleted <- s.DeleteIndex("ix", IndicesOptions{}) }()
	for !task.cancel.Load() { // the delete has asked for the cancel
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if snap := task.Status(); snap.Phase != "aborted" || !snap.Cancelled {
		t.Fatalf("split of a deleted index: %+v", snap)
	}
	if len(s.Names()) != 0 {
		t.Fatalf("indices left: %v", s.Names())
	}
}

// TestOpenSearchModeIndex: an index in opensearch mode (hash-range splits,
// OpenSearch #20859) splits in place at equal widths or explicit signed
// hashes, keeps every document, and refuses a new-index resize clearly.
func TestOpenSearchModeIndex(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "os", Settings: FlatSettings{SettingShards: str("2"), SettingMode: str("opensearch")}}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := s.IndexDoc("os", fmt.Sprint(i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, req := range []SplitRequest{{Index: "os", Shard: 0, Ways: 3}, {Index: "os", Shard: 1, Points: []int64{-1 << 20, 1 << 20}}} {
		task, err := s.StartSplit(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := task.Wait(ctx); err != nil || task.Status().Phase != "done" {
			t.Fatalf("%+v: %v %+v", req, err, task.Status())
		}
	}
	tab, _ := s.Table("os")
	if len(tab.ActiveShards()) != 6 {
		t.Fatalf("active shards %v, want 6", tab.ActiveShards())
	}
	res, err := s.Search(SearchRequest{Indices: "os", Size: -1})
	if err != nil || res.Total != 100 {
		t.Fatalf("%d documents after the splits, %v", res.Total, err)
	}
	if _, err := s.StartSplit(SplitRequest{Index: "os", Shard: 2, Points: []int64{1 << 40}}); errType(err) != TypeIllegalArgument {
		t.Fatalf("a split point outside int32: %v", err)
	}
	if err := s.PutSettings("os", FlatSettings{SettingBlockWrite: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Resize(ResizeRequest{Op: routing.Clone, Source: "os", Target: "os2"}); errType(err) != TypeIllegalArgument {
		t.Fatalf("new-index clone of an opensearch-mode index: %v", err)
	}
}

// TestCancelAfterHandoff: once the split has published its children, a
// cancel is refused with a reason and the split completes.
func TestCancelAfterHandoff(t *testing.T) {
	hook, reached, release := holdAt(splitter.IntentCleanup)
	s := openService(t, Config{SplitHook: hook})
	if _, err := s.CreateIndex(CreateRequest{Name: "ix"}); err != nil {
		t.Fatal(err)
	}
	task, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	<-reached
	_, err = s.CancelTask(task.ID)
	if errType(err) != TypeIllegalState {
		t.Fatalf("cancel after the handoff: %v", err)
	}
	close(release)
	<-task.Done()
	if snap := task.Status(); snap.Phase != "done" || snap.Cancelled {
		t.Fatalf("after a refused cancel: %+v", snap)
	}
	if _, err := s.CancelTask(task.ID); errType(err) != TypeIllegalState {
		t.Fatalf("cancel of a finished task: %v", err)
	}
	if _, err := s.CancelTask("x:99"); errType(err) != TypeResourceNotFound {
		t.Fatalf("cancel of an unknown task: %v", err)
	}
}
