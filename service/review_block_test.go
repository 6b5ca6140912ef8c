package service

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/splitter"
)

// TestReviewWriteBlockDuringSplit: a write block set while an in-place split
// hands off takes effect and is acknowledged. The block drains every shard
// of the table it read; a shard the split retired meanwhile failed the
// drain ("node: write block: drain shard 1: ... no shard 1" or "storage:
// shard closed"), so PUT _settings answered a 500 and the block was lifted
// again. Here shard 0's apply lock is held (as an in-flight write would)
// while the split of shard 1 publishes and retires its parent. (Found by a
// stress run: 150 splits under block toggling failed once in four runs
// with "drain shard 149: storage: shard closed".)
func TestReviewWriteBlockDuringSplit(t *testing.T) {
	atFence := make(chan struct{})
	release := make(chan struct{})
	s, err := Open(Config{Dir: t.TempDir(), SplitHook: func(index string, phase splitter.Phase, next splitter.Intent) {
		if next.Kind == splitter.IntentFence {
			close(atFence)
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "b", Settings: FlatSettings{SettingShards: str("2"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := s.IndexDoc("b", fmt.Sprintf("d%d", i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	task, err := s.StartSplit(SplitRequest{Index: "b", Shard: 1, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	<-atFence
	ix, _ := s.index("b")
	held := make(chan struct{})
	unhold := make(chan struct{})
	go func() {
		_, _ = ix.node.HoldApplyLock(0, 30*time.Second, func() error {
			close(held)
			<-unhold
			return nil
		})
	}()
	<-held
	blocked := make(chan error, 1)
	go func() { blocked <- s.PutSettings("b", FlatSettings{SettingBlockWrite: str("true")}, IndicesOptions{}) }()
	time.Sleep(200 * time.Millisecond) // the block waits for shard 0
	close(release)
	select {
	case <-task.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the split did not end")
	}
	if e := task.Status().Err; e != nil {
		t.Fatalf("split: %v", e)
	}
	close(unhold)
	select {
	case err := <-blocked:
		if err != nil {
			t.Fatalf("write block during the split: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the write block never returned")
	}
	tab, _ := s.Table("b")
	if _, ok := tab.Shard(1); ok {
		t.Fatalf("shard 1 still active after its split: %v", tab.ActiveShards())
	}
	_, err = s.IndexDoc("b", "after", "", []byte(`{}`), WriteOptions{})
	var be *BlockError
	if !errors.As(err, &be) {
		t.Fatalf("a write after the block: %v, want the block", err)
	}
}
