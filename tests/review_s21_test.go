package tests

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
)

// Recovery crashing half-way through a merge's decision (a power loss at
// each of its durable operations), in both layouts: the result recovers,
// opens and passes Check, and every document written before is there.
func TestReviewS21MergeRecoveryCrashesAtEveryPoint(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		for _, stop := range []splitter.IntentKind{splitter.IntentBuildTarget, splitter.IntentFence,
			splitter.IntentPublish, splitter.IntentSyncTarget, splitter.IntentCommitTable} {
			t.Run(fmt.Sprintf("%s/%s", layout, stop), func(t *testing.T) {
				mem := crashfs.New()
				opts := storage.Options{Dir: "/data", FS: mem.FS(nil), CacheBytes: 1 << 20, Layout: layout}
				tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 4, PartitionSize: 1})
				if err != nil {
					t.Fatal(err)
				}
				n, j, _, err := recovery.Open(opts, tab, nil)
				if err != nil {
					t.Fatal(err)
				}
				r := node.NewRouter(n, tab, node.RouterConfig{})
				for i := range 20 {
					if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v1")); err != nil {
						t.Fatal(err)
					}
				}
				d := splitter.NewDriver(n, splitter.Config{Journal: j})
				if rep, err := d.Run(splitter.Plan{Parent: 0, Ways: 2}); err != nil || rep.Phase != splitter.PhaseDone {
					t.Fatalf("split: %v %v", err, rep.Err)
				}
				mg := d.StartMerge(splitter.MergePlan{Sources: []routing.ShardID{1, 2}})
				for {
					in, _, err := mg.Next()
					if err != nil {
						t.Fatal(err)
					}
					if in.Kind == stop {
						break
					}
				}
				disk := mem.Crash(0, 0)
				_ = n.Close()
				crashRecoveryAtEveryOp(t, disk, storage.Options{Dir: "/data", CacheBytes: 1 << 20, Layout: layout}, tab, func(t *testing.T, fs vfs.FS) {
					n3, j3, _, err := recovery.Open(storage.Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20, Layout: layout}, tab, nil)
					if err != nil {
						t.Fatalf("recovery after a crash in recovery: %v", err)
					}
					defer n3.Close()
					if rep := recovery.Check(n3, j3, nil); !rep.OK() {
						t.Fatalf("after recovery: %v", rep.Violations)
					}
					r := node.NewRouter(n3, tab, node.RouterConfig{})
					for i := range 20 {
						id := fmt.Sprintf("d%d", i)
						if doc, ok, err := r.Get(id, ""); err != nil || !ok || string(doc.Source) != "v1" {
							t.Errorf("%s = %q, %v, %v", id, doc.Source, ok, err)
						}
					}
				})
			})
		}
	}
}

// A service closing while an in-place split or merge holds its parent
// (sources) fenced — the handoff, between Fence and Unfence — halts it
// after its current intent and leaves it to recovery. A write that was
// waiting on the apply lock must then be answered, not left waiting for
// ever on a lock nobody will release.
func TestReviewS21CloseDuringAFencedHandoffAnswersTheWaitingWrite(t *testing.T) {
	for _, op := range []string{"split", "merge"} {
		t.Run(op, func(t *testing.T) {
			var armed atomic.Bool
			fenced := make(chan struct{})
			release := make(chan struct{})
			var once sync.Once
			dir := t.TempDir()
			s, err := service.Open(service.Config{Dir: dir, SplitHook: func(_ string, _ splitter.Phase, next splitter.Intent) {
				if armed.Load() && next.Kind == splitter.IntentReplayTail {
					once.Do(func() {
						close(fenced)
						<-release
					})
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			one, zero := "1", "0"
			if _, err := s.CreateIndex(service.CreateRequest{Name: "h", Settings: service.FlatSettings{service.SettingShards: &one, service.SettingReplicas: &zero}}); err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				if _, err := s.IndexDoc("h", fmt.Sprintf("d%d", i), "", []byte(`{}`), service.WriteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if op == "merge" {
				task, err := s.StartSplit(service.SplitRequest{Index: "h", Shard: 0, Ways: 2})
				if err != nil {
					t.Fatal(err)
				}
				if err := task.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
				armed.Store(true)
				if _, err := s.StartMerge(service.MergeRequest{Index: "h", Shards: []routing.ShardID{1, 2}}); err != nil {
					t.Fatal(err)
				}
			} else {
				armed.Store(true)
				if _, err := s.StartSplit(service.SplitRequest{Index: "h", Shard: 0, Ways: 2}); err != nil {
					t.Fatal(err)
				}
			}
			<-fenced // the apply lock is held
			wrote := make(chan error, 1)
			go func() {
				_, err := s.IndexDoc("h", "d0", "", []byte(`{"during":1}`), service.WriteOptions{})
				wrote <- err
			}()
			select {
			case err := <-wrote:
				t.Fatalf("the write did not wait on the fence: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			time.Sleep(200 * time.Millisecond) // Close has halted the task
			close(release)
			select {
			case err := <-closed:
				t.Logf("Close: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("Close never returned")
			}
			select {
			case err := <-wrote:
				t.Logf("the write waiting on the fence: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("a write waiting on the fence was never answered after the service closed")
			}
			// Recovery decides the operation; the index serves every write.
			s, err = service.Open(service.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.IndexDoc("h", "after", "", []byte(`{}`), service.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				if _, ok, err := s.GetDoc("h", fmt.Sprintf("d%d", i), ""); err != nil || !ok {
					t.Errorf("d%d after the restart: found %v, %v", i, ok, err)
				}
			}
		})
	}
}
