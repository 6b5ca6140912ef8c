package splitter

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
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
