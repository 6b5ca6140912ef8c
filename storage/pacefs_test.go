package storage

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/routing"
)

// TestSplitFlushesArePaced: the parent's flush before a child's checkpoint,
// and the child's flush of the WAL it copied, write at SplitFlushRate; the
// store's own flushes do not.
func TestSplitFlushesArePaced(t *testing.T) {
	const rate = 8 << 20
	e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), Logger: zaptest.NewLogger(t), CacheBytes: 8 << 20, SplitFlushRate: rate})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	parent, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
	writeRandomDocs(t, parent, "own", 1000, 1024)
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := parent.st.cfs.pacedBytes.Load(); n != 0 {
		t.Fatalf("the store's own flush wrote %d paced bytes, want 0", n)
	}

	writeRandomDocs(t, parent, "split", 4000, 1024) // ~4 MiB unflushed: CreateChild flushes the parent
	parent.HoldLog()
	_, stats, err := e.CreateChild(parent, 9, routing.Span{Start: 256, End: 320})
	if err != nil {
		t.Fatal(err)
	}
	paced := parent.st.cfs.pacedBytes.Load()
	if paced < 2<<20 {
		t.Fatalf("the split's flush of ~4 MiB wrote %d paced bytes, want > 2 MiB", paced)
	}
	if min := time.Duration(float64(paced) / rate * float64(time.Second)); stats.Flush < min*9/10 {
		t.Errorf("the split's flush took %v for %d bytes, want >= %v at %d B/s", stats.Flush, paced, min, rate)
	}
	if n := parent.st.cfs.paced.Load(); n != 0 {
		t.Errorf("the parent is still paced after the child's creation (%d)", n)
	}

	writeRandomDocs(t, parent, "late", 500, 1024) // ~1 MiB with the held log: copied with the WAL, flushed by the child's open
	child, stats, err := e.CreateChild(parent, 10, routing.Span{Start: 320, End: 384})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Flush != 0 || stats.Copied < 512<<10 {
		t.Fatalf("second child: flush %v, copied %d bytes; want no flush and the WAL copied", stats.Flush, stats.Copied)
	}
	if n := child.st.cfs.pacedBytes.Load(); n == 0 {
		t.Errorf("the child's open flushed its copied WAL unpaced")
	}
	if n := child.st.cfs.paced.Load(); n != 0 {
		t.Errorf("the child is still paced after its open (%d)", n)
	}
}
