package splitter

import (
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

// Step's contract: an event the current phase does not expect is a driver
// bug and returns an error, leaving the machine unchanged. A merge machine
// fed a catch-up or tail event before it was cloned (no bounds yet)
// indexed its empty per-source bounds and panicked instead.
func TestReviewS21MergeMachineRefusesAnEarlyBoundEvent(t *testing.T) {
	for _, kind := range []EventKind{EventCaughtUp, EventTailReplayed} {
		for _, reserved := range []bool{false, true} {
			m := New(1, MergePlan(1, 2))
			if reserved {
				m.Advance()
				if err := m.Step(Event{Kind: EventReserved, Targets: []routing.ShardID{3}}); err != nil {
					t.Fatal(err)
				}
			}
			before := m.Phase()
			err, panicked := stepRecovering(m, Event{Kind: kind, Seqs: []uint64{5, 6}})
			if panicked != nil {
				t.Errorf("%s in %s panicked: %v", kind, before, panicked)
			} else if err == nil {
				t.Errorf("%s in %s was accepted", kind, before)
			}
			if m.Phase() != before {
				t.Errorf("%s in %s moved the machine to %s", kind, before, m.Phase())
			}
		}
	}
}

// stepRecovering steps m and returns what Step returned or the panic.
func stepRecovering(m *Machine, ev Event) (err error, panicked any) {
	defer func() { panicked = recover() }()
	return m.Step(ev), nil
}

// A cancel whose undo fails while the disk is full for a moment (the
// table's write refused for 300 ms) must outlast the moment: Run retries
// a failed undo until it succeeds or its step bound runs out, and it ran
// out after 10,000 immediate retries, well inside the 300 ms. The split
// (merge) was left aborting, its reservation in the table and its journal
// unfinished, so every later split or merge was refused until a restart.
func TestReviewS21ACancelOutlastsAShortDiskFull(t *testing.T) {
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
	tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 4, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	full := new(atomic.Bool)
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind == errorfs.OpCreate && strings.HasPrefix(filepath.Base(op.Path), "TABLE") {
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	})
	eng, err := storage.Open(storage.Options{Dir: "/data", FS: errorfs.Wrap(vfs.NewMem(), inj), CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Config{Engine: eng, Table: tab})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	j, err := OpenJournal(eng)
	if err != nil {
		t.Fatal(err)
	}
	return n, j, full
}
