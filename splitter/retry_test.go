package splitter

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Run retries an undo that keeps failing for Config.RetryFor, not for ever
// (the retry pauses grow to a second, so its step bound alone would let a
// disk that stays full hold Run for hours), and then returns the error,
// leaving the split aborting for a later Next or recovery. Here the
// handoff's drain times out (the test holds the parent's fence until the
// undo), the split aborts, and its undo cannot write the table: the disk stays full.
func TestRunGivesUpOnAnUndoFailingLongerThanRetryFor(t *testing.T) {
	n, j, full := tableFullNode(t)
	var held *node.Fence
	hook := func(_ Phase, in Intent) {
		if in.Kind == IntentCancel && held != nil {
			held.Release() // the drain timed out: the undo needs the lock
			held = nil
		}
		if in.Kind == IntentFence && !full.Load() {
			f, err := n.Fence(0, time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			held = f
			full.Store(true)
		}
	}
	d := NewDriver(n, Config{Journal: j, Hook: hook, DrainTimeout: 5 * time.Millisecond, RetryFor: 300 * time.Millisecond})
	start := time.Now()
	rep, err := d.Run(Plan{Sources: []routing.ShardID{0}, Ways: 2, MaxHandoffs: 1})
	took := time.Since(start)
	t.Logf("Run returned after %v: %s, %v", took, rep.Phase, err)
	if !errors.Is(err, syscall.ENOSPC) || rep.Phase != PhaseAborting {
		t.Fatalf("Run = %s, %v; want aborting and an error naming the ENOSPC", rep.Phase, err)
	}
	if took > 10*time.Second {
		t.Errorf("Run gave up after %v, want soon after RetryFor", took)
	}
	if len(n.Table().InProgress()) == 0 {
		t.Errorf("the table no longer reserves the split: the undo did not fail as the test needs")
	}
}

// A cancel whose undo fails while the disk is full for a moment (the
// table's write refused for 300 ms) must outlast the moment: Run retries a
// failed undo until it succeeds or its step bound runs out, and retried at
// once, 10,000 retries end well inside the 300 ms. The operation would be
// left aborting, its reservation in the table and its journal unfinished,
// and every later split or merge refused until a restart.
func TestACancelOutlastsAShortDiskFull(t *testing.T) {
	for _, op := range []string{"split", "merge"} {
		t.Run(op, func(t *testing.T) {
			n, j, full := tableFullNode(t)
			var cancel func() error
			hook := func(_ Phase, in Intent) {
				if cancel != nil && in.Kind == IntentCatchUp && !full.Load() {
					full.Store(true)
					time.AfterFunc(300*time.Millisecond, func() { full.Store(false) })
					if err := cancel(); err != nil {
						t.Error(err)
					}
				}
			}
			d := NewDriver(n, Config{Journal: j, Hook: hook})
			var next func() (Intent, Event, error)
			var report func() Report
			if op == "split" {
				sp := d.Start(SplitPlan(0, 2))
				cancel, next, report = sp.Cancel, sp.Next, sp.Report
			} else {
				if rep, err := d.Run(SplitPlan(0, 2)); err != nil || rep.Phase != PhaseDone {
					t.Fatalf("split: %v %v", err, rep.Err)
				}
				mg := d.Start(MergePlan(1, 2))
				cancel, next, report = mg.Cancel, mg.Next, mg.Report
			}
			start := time.Now()
			for steps := 0; !report().Phase.Terminal(); steps++ {
				if steps > maxSteps {
					t.Fatalf("the %s is still %s after %d steps (%v): %v", op, report().Phase, steps, time.Since(start), report().Err)
				}
				if _, _, err := next(); err != nil {
					t.Fatal(err)
				}
			}
			if rep := report(); rep.Phase != PhaseAborted {
				t.Fatalf("%s ended %s: %v", op, rep.Phase, rep.Err)
			}
			if ip, mp := n.Table().InProgress(), n.Table().MergesInProgress(); len(ip)+len(mp) != 0 {
				t.Errorf("table v%d still reserves splits of %v, merges into %v", n.Table().Version(), ip, mp)
			}
			if u := j.Unfinished(0); len(u) != 0 {
				t.Errorf("the journal leaves %v unfinished", u)
			}
		})
	}
}

// tableFullNode opens a one-root node with a journal whose table writes
// fail with ENOSPC while full is set.
func tableFullNode(t *testing.T) (*node.Node, *Journal, *atomic.Bool) {
	t.Helper()
	full := new(atomic.Bool)
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind == errorfs.OpCreate && strings.HasPrefix(filepath.Base(op.Path), "TABLE") {
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	})
	n := openNode(t, storage.Options{FS: errorfs.Wrap(vfs.NewMem(), inj)}, newTable(t, routing.ModePartition, 1, 4), 0)
	j, err := OpenJournal(n.Engine())
	if err != nil {
		t.Fatal(err)
	}
	return n, j, full
}
