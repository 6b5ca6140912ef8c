package storage

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
)

// A shard's backlog is its store's: the overlapping tables a held store
// keeps in L0 are sublevels, and nothing runs while compactions are held.
// A destroyed shard has none to report.
func TestBacklogReportsTheStoresL0(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	s, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
	e.HoldCompactions(s)
	for range 3 { // the same keys each time: each table overlaps the last
		writeDocs(t, s, "doc", 50, 100)
		if err := s.st.flush(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Backlog()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Backlog{L0Sublevels: 3}, Backlog{L0Sublevels: got.L0Sublevels, Running: got.Running}); diff != "" {
		t.Errorf("backlog of a held store with three overlapping flushes (-want +got):\n%s", diff)
	}
	if err := e.DestroyShard(2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Backlog(); !errors.Is(err, ErrShardClosed) {
		t.Errorf("backlog of a destroyed shard: err %v, want ErrShardClosed", err)
	}
}

// FlushesEnded counts every flush of the shard's store that ended, the
// ones a split forces included.
func TestFlushesEndedCountsTheStoresFlushes(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	s, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
	before := s.FlushesEnded()
	for range 2 {
		writeDocs(t, s, "doc", 10, 100)
		if err := s.st.flush(); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.FlushesEnded() - before; got != 2 {
		t.Errorf("%d flushes ended, want 2", got)
	}
}
