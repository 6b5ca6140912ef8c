package splitter

import (
	"errors"
	"fmt"
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

// parentFenced reports whether shard 0's apply lock is held.
func parentFenced(t *testing.T, n *node.Node) bool {
	t.Helper()
	return shardFenced(t, n, 0)
}

// shardFenced reports whether shard id's apply lock is held: taking it
// with a short drain times out.
func shardFenced(t *testing.T, n *node.Node, id routing.ShardID) bool {
	t.Helper()
	f, err := n.Fence(id, 5*time.Millisecond)
	if errors.Is(err, storage.ErrLockTimeout) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	f.Release()
	return false
}

// HoldUntilDurable keeps the parent fenced through the children's sync and
// the table's commit (the relocation-style handoff question 1 measures);
// the default releases it right after the publish. Either way the split
// completes and the parent's lock is free afterwards.
func TestHoldUntilDurable(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) {
			n := openNode(t, storage.Options{}, nil, 40)
			fencedAt := map[IntentKind]bool{}
			hook := func(_ Phase, in Intent) {
				if in.Kind == IntentSyncTargets || in.Kind == IntentCommitTable || in.Kind == IntentCleanup {
					fencedAt[in.Kind] = parentFenced(t, n)
				}
			}
			r, err := NewDriver(n, Config{Hook: hook, HoldUntilDurable: hold}).Run(SplitPlan(0, 2))
			if err != nil || r.Phase != PhaseDone {
				t.Fatalf("split: %v (%s, %v)", err, r.Phase, r.Err)
			}
			want := map[IntentKind]bool{IntentSyncTargets: hold, IntentCommitTable: hold, IntentCleanup: false}
			for k, w := range want {
				if fencedAt[k] != w {
					t.Errorf("parent fenced before %s: %v, want %v", k, fencedAt[k], w)
				}
			}
			if r.Stall <= 0 {
				t.Errorf("stall %v, want > 0", r.Stall)
			}
			if hold && r.Commit != 0 {
				t.Errorf("commit %v with the parent held through it, want 0", r.Commit)
			}
		})
	}
}

// A held parent is released when the table cannot be made durable: the
// node fails (every request answers node.ErrFailed), but no write waits on
// the parent's lock for ever.
func TestHoldUntilDurableReleasesOnFailure(t *testing.T) {
	var failTable atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failTable.Load() && strings.HasSuffix(op.Path, "TABLE.tmp") {
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	})
	n := openNode(t, storage.Options{FS: errorfs.Wrap(vfs.NewMem(), inj)}, nil, 40)
	hook := func(_ Phase, in Intent) {
		if in.Kind == IntentFence {
			failTable.Store(true)
		}
	}
	_, err := NewDriver(n, Config{Hook: hook, HoldUntilDurable: true}).Run(SplitPlan(0, 2))
	if !errors.Is(err, node.ErrFailed) {
		t.Fatalf("driver: %v, want node.ErrFailed", err)
	}
	if parentFenced(t, n) {
		t.Fatal("the parent is still fenced after the node failed")
	}
}
