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
