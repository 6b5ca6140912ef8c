package splitter

import (
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/shardsplit/shardsplit/storage"
)

// The driver's own paths around the parent's parked WAL deletions. A split's forced flush of the parent (CreateChildren) makes
// its WAL obsolete while the hold is on: it stays on disk through the
// catch-up; a cancel (ReleaseCompactions) deletes it, and so does a
// handoff (the parent's retirement removes the directory).
func TestASplitsParkedParentWALEndsWithTheSplit(t *testing.T) {
	walsOf := func(t *testing.T, fs vfs.FS, dir string) int {
		t.Helper()
		names, err := fs.List(dir)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range names {
			if strings.HasSuffix(name, ".log") {
				n++
			}
		}
		return n
	}
	for _, cancel := range []bool{true, false} {
		name := map[bool]string{true: "cancelled", false: "handed-off"}[cancel]
		t.Run(name, func(t *testing.T) {
			fs := vfs.NewMem()
			// FlushChildren: the flush a parent whose history cannot
			// stand in for its memtables gets.
			n := openNode(t, storage.Options{FS: fs, FlushChildren: true}, nil, 40)
			dir := n.Engine().ShardDir(0)
			sp := NewDriver(n, Config{}).Start(SplitPlan(0, 2))
			for sp.Phase() != PhaseCatchUp {
				if _, _, err := sp.Next(); err != nil || sp.Done() {
					t.Fatalf("split before catch-up: %v (phase %s)", err, sp.Phase())
				}
			}
			time.Sleep(50 * time.Millisecond) // Pebble deletes (parks) the flushed WAL on a goroutine of its own
			if got := walsOf(t, fs, dir); got < 2 {
				t.Fatalf("catch-up: the parent's directory holds %d WALs, want the parked one beside the live one", got)
			}
			if cancel {
				if err := sp.Cancel(); err != nil {
					t.Fatal(err)
				}
			}
			for !sp.Done() {
				if _, _, err := sp.Next(); err != nil {
					t.Fatal(err)
				}
			}
			if cancel {
				if sp.Phase() != PhaseAborted {
					t.Fatalf("phase %s, want aborted", sp.Phase())
				}
				if got := walsOf(t, fs, dir); got != 1 {
					t.Fatalf("cancelled: the parent's directory holds %d WALs, want the live one only", got)
				}
				return
			}
			if sp.Phase() != PhaseDone {
				t.Fatalf("phase %s, want done", sp.Phase())
			}
			if _, err := fs.Stat(dir); err == nil {
				t.Fatalf("handed off: the parent's directory %s is still there", dir)
			}
		})
	}
}
