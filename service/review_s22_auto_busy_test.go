package service

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TestReviewS22AutoCompletedTaskFreesItsIndex: a task whose snapshot says
// completed (what GET _tasks/<id> answers) has ended, so the index takes
// the next split or merge at once. The task stored its completed snapshot,
// then logged its end, and only then cleared itself as the index's running
// operation: a client that polled the task to its end and started the next
// split in that window (here widened by a log sink that is slow once) was
// refused with 409 "already splitting".
func TestReviewS22AutoCompletedTaskFreesItsIndex(t *testing.T) {
	ended, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	core := zapcore.RegisterHooks(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel),
		func(e zapcore.Entry) error {
			if e.Message == "task ended" {
				once.Do(func() { close(ended); <-release })
			}
			return nil
		})
	s, err := Open(Config{Dir: t.TempDir(), Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "ix", Settings: FlatSettings{SettingShards: str("2")}}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := s.IndexDoc("ix", fmt.Sprint(i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	task, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Fatal("the split did not end")
	}
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free()
	snap := task.Status()
	if !snap.Completed || snap.Err != nil {
		t.Fatalf("the split's snapshot: %+v", snap)
	}
	// The client saw completed: true; the index's next operation.
	next, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 1, Ways: 2})
	if err != nil {
		e := AsError(err)
		t.Fatalf("a split started after the previous task's snapshot said completed: %d %s: %v", e.Status, e.Type, err)
	}
	free()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := next.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if snap := next.Status(); snap.Err != nil {
		t.Fatalf("the next split: %v", snap.Err)
	}
}
