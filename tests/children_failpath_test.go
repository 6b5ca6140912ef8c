package tests

// Failure paths of a split whose children are made at the same time
// (storage.Engine.CreateChildren, the driver's default): one child cannot
// be made while its sibling is. The sibling exists only in the engine when
// CreateChildren returns, so the driver must hand it to the split (node
// and sp.children) for the cancel to retire it; a sibling left open in the
// engine keeps its store directory, a leak the next split meets.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
)

func TestConcurrentChildFailureRetiresTheSibling(t *testing.T) {
	for _, tc := range []struct {
		name   string
		serial bool
		fail   string // the store directory whose Pebble lock fails
	}{
		{name: "concurrent/first fails", fail: "/data/shard-1/"},
		{name: "concurrent/second fails", fail: "/data/shard-2/"},
		{name: "serial/second fails", serial: true, fail: "/data/shard-2/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			var armed atomic.Bool
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Kind == errorfs.OpLock && strings.HasPrefix(op.Path, tc.fail) && armed.CompareAndSwap(true, false) {
					return fmt.Errorf("injected: %w", syscall.EIO)
				}
				return nil
			})
			n, j, tab := openFailpath(t, errorfs.Wrap(mem, inj))
			d := splitter.NewDriver(n, splitter.Config{Journal: j, SerialChildren: tc.serial})
			armed.Store(true)
			rep, err := d.Run(splitter.SplitPlan(0, 2))
			if err != nil {
				t.Fatal(err)
			}
			if armed.Load() {
				t.Fatalf("the fault on %s was never hit (children %v)", tc.fail, rep.Targets)
			}
			if rep.Phase != splitter.PhaseAborted || !errors.Is(rep.Err, syscall.EIO) {
				t.Fatalf("split ended %s with %v, want aborted with the injected EIO", rep.Phase, rep.Err)
			}
			eng := n.Engine()
			for _, id := range []routing.ShardID{1, 2} {
				if _, ok := n.ShardStore(id); ok {
					t.Errorf("the node still has child %d of the aborted split", id)
				}
				if _, ok := eng.Shard(id); ok {
					t.Errorf("the engine still has child %d of the aborted split open", id)
				}
			}
			if dirs, err := eng.ShardDirs(); err != nil || !slices.Equal(dirs, []routing.ShardID{0}) {
				t.Errorf("store directories after the abort: %v (%v), want only the parent's [0]", dirs, err)
			}
			parent, ok := n.ShardStore(0)
			if !ok {
				t.Fatal("the parent is gone")
			}
			if h := parent.LogHolds(); h != 0 {
				t.Errorf("the parent's log is held %d time(s) after the abort", h)
			}
			rep, err = d.Run(splitter.SplitPlan(0, 2))
			if err != nil || rep.Phase != splitter.PhaseDone {
				t.Fatalf("the next split of the parent: %s, %v, %v", rep.Phase, err, rep.Err)
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{})
			_ = n.Close()
			reopen(t, crashed, tab).Close()
		})
	}
}
