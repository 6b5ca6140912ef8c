package tests

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage/crashfs"
)

// A journal write that fails (ENOSPC on the SPLITLOG rename), the process
// going on, then a power loss at every durable operation after it: every
// crash image recovers and passes Check.
func TestFailedJournalWriteThenCrashEverywhere(t *testing.T) {
	for k := 1; k <= 8; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			disk := crashfs.New() // crashed inside the injector: crashfs's guard (crashclone_test.go)
			var failAt, renames atomic.Int32
			var after atomic.Bool
			var mu sync.Mutex // Pebble calls the injector concurrently
			var images []*crashfs.Disk
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if failAt.Load() == 0 {
					return nil
				}
				if op.Kind == errorfs.OpRename && strings.Contains(op.Path, splitter.JournalFile) {
					if renames.Add(1) == failAt.Load() {
						after.Store(true)
						return syscall.ENOSPC
					}
				}
				if after.Load() && isDurableOp(op.Kind) {
					mu.Lock()
					images = append(images, disk.Crash(0, 0))
					mu.Unlock()
				}
				return nil
			})
			n, j, tab := openFailpath(t, errorfs.Wrap(disk.FS(nil), inj))
			failAt.Store(int32(k))
			rep, err := splitter.NewDriver(n, splitter.Config{Journal: j}).Run(splitter.SplitPlan(0, 2))
			mu.Lock()
			t.Logf("split ended %s (%v), run error %v, journal dirty %v, %d images", rep.Phase, rep.Err, err, j.Dirty(), len(images))
			images = append(images, disk.Crash(0, 0))
			failAt.Store(0)
			mu.Unlock()
			// Not under mu: an injector call that read failAt before the
			// store may still take an image, and the close waits for
			// Pebble's file deletions, which call the injector (holding mu
			// across the close hangs: the cleanup manager's Remove waits
			// for mu, the test for the cleanup).
			_ = n.Close()
			mu.Lock() // the close has ended every Pebble goroutine
			defer mu.Unlock()
			for i, img := range images {
				t.Run(fmt.Sprint(i), func(t *testing.T) { reopen(t, img.FS(nil), tab).Close() })
			}
		})
	}
}

// A journal that fails every write from the handoff on, while the TABLE
// file still commits: the fence must not proceed without its durable
// record. The handoff stops there and the split aborts; recovery opens the
// directory and passes Check. Fenced without the record, the split would
// publish and commit its table while the journal still said it was
// catching up, and the next open would refuse for good ("refusing to
// delete shard N, which table vM names active").
func TestTheFenceWaitsForItsJournalRecord(t *testing.T) {
	for _, kind := range []string{"split", "merge"} {
		t.Run(kind, func(t *testing.T) {
			disk := crashfs.New()
			var failing atomic.Bool
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if failing.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.Contains(op.Path, splitter.JournalFile) {
					return syscall.EIO
				}
				return nil
			})
			n, j, tab := openFailpath(t, errorfs.Wrap(disk.FS(nil), inj))
			plan := splitter.SplitPlan(0, 2)
			if kind == "merge" {
				rep, err := splitter.NewDriver(n, splitter.Config{Journal: j}).Run(plan)
				if err != nil || rep.Phase != splitter.PhaseDone {
					t.Fatalf("split before the merge: %s (%v), %v", rep.Phase, rep.Err, err)
				}
				plan = splitter.MergePlan(n.Table().ActiveShards()...)
			}
			fenced := false
			hook := func(_ splitter.Phase, next splitter.Intent) {
				if next.Kind == splitter.IntentFence {
					failing.Store(true)
				}
			}
			d := splitter.NewDriver(n, splitter.Config{Journal: j, Hook: hook})
			op := d.Start(plan)
			for step := 0; !op.Done(); step++ {
				if step == 1000 {
					t.Fatalf("the %s did not end in 1000 steps: %s", kind, op.Phase())
				}
				intent, ev, err := op.Next()
				if err != nil {
					t.Fatal(err)
				}
				if intent.Kind == splitter.IntentFence && ev.Kind == splitter.EventFenced {
					fenced = true
				}
			}
			rep := op.Report()
			t.Logf("%s ended %s (%v); table v%d", kind, rep.Phase, rep.Err, n.Table().Version())
			if fenced || rep.Phase == splitter.PhaseDone {
				t.Errorf("the %s fenced (%v) and ended %s with its journal failing; want no fence, aborted", kind, fenced, rep.Phase)
			}
			failing.Store(false)
			if err := n.Close(); err != nil {
				t.Logf("close: %v", err)
			}
			reopen(t, disk.FS(nil), tab).Close()
		})
	}
}
