package tests

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
)

// Recovery crashing half-way is just another crash: for a disk left by a
// crash at each point of a split's handoff, recovery is crashed at every
// durable operation it makes (a power loss there), and recovering the
// result must open and pass recovery.Check.
func TestRecoveryCrashesAtEveryPoint(t *testing.T) {
	for _, stop := range []splitter.IntentKind{splitter.IntentBuildTargets, splitter.IntentFence,
		splitter.IntentPublish, splitter.IntentSyncTargets, splitter.IntentCommitTable} {
		t.Run(stop.String(), func(t *testing.T) {
			// Crashed inside the injector, beside recovery's opens:
			// crashfs's guard (crashclone_test.go).
			mem := crashfs.New()
			n, j, tab := openFailpath(t, mem.FS(nil))
			sp := splitter.NewDriver(n, splitter.Config{Journal: j}).Start(splitter.SplitPlan(0, 2))
			for {
				in, _, err := sp.Next()
				if err != nil {
					t.Fatal(err)
				}
				if in.Kind == stop {
					break
				}
			}
			disk := mem.Crash(0, 0)
			_ = n.Close()
			crashRecoveryAtEveryOp(t, disk, storage.Options{Dir: "/data", CacheBytes: 1 << 20}, tab, func(t *testing.T, fs vfs.FS) {
				reopen(t, fs, tab).Close()
			})
		})
	}
}

// crashRecoveryAtEveryOp recovers the disk a crash left (disk) with opts
// over it, crashing the recovery at its k-th durable operation for every k
// in turn (a power loss there), until a recovery makes no more, and checks
// what each such crash left with check (in a subtest named k).
func crashRecoveryAtEveryOp(t *testing.T, disk *crashfs.Disk, opts storage.Options, tab *routing.Table, check func(t *testing.T, fs vfs.FS)) {
	t.Helper()
	for k := 1; ; k++ {
		img := disk.Crash(0, 0)
		var ops atomic.Int32
		var mu sync.Mutex // Pebble calls the injector concurrently
		var crashed *crashfs.Disk
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if isDurableOp(op.Kind) && int(ops.Add(1)) == k {
				mu.Lock()
				crashed = img.Crash(0, 0)
				mu.Unlock()
			}
			return nil
		})
		o := opts
		o.FS = errorfs.Wrap(img.FS(nil), inj)
		n, _, _, err := recovery.Open(o, tab, nil)
		if err != nil {
			t.Fatalf("first recovery: %v", err)
		}
		_ = n.Close()
		mu.Lock()
		c := crashed
		mu.Unlock()
		if c == nil {
			t.Logf("%d crash points in recovery", k-1)
			return
		}
		t.Run(fmt.Sprint(k), func(t *testing.T) { check(t, c.FS(nil)) })
	}
}

// Recovery crashing half-way through a merge's decision (a power loss at
// each of its durable operations), in both layouts: the result recovers,
// opens and passes Check, and every document written before is there.
func TestMergeRecoveryCrashesAtEveryPoint(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		for _, stop := range []splitter.IntentKind{splitter.IntentBuildTargets, splitter.IntentFence,
			splitter.IntentPublish, splitter.IntentSyncTargets, splitter.IntentCommitTable} {
			t.Run(fmt.Sprintf("%s/%s", layout, stop), func(t *testing.T) {
				mem := crashfs.New()
				n, j, tab := openIndex(t, storage.Options{FS: mem.FS(nil), Layout: layout}, 20)
				d := splitter.NewDriver(n, splitter.Config{Journal: j})
				if rep, err := d.Run(splitter.SplitPlan(0, 2)); err != nil || rep.Phase != splitter.PhaseDone {
					t.Fatalf("split: %v %v", err, rep.Err)
				}
				mg := d.Start(splitter.MergePlan(1, 2))
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
