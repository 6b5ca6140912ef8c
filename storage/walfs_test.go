package storage

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walFiles returns the size of each WAL in dir.
func walFiles(t *testing.T, fs vfs.FS, dir string) map[string]int64 {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			fi, err := fs.Stat(fs.PathJoin(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			sizes[n] = fi.Size()
		}
	}
	return sizes
}

// The stores recycle their WALs, and a checkpoint copies only the records
// a recycled WAL holds, not the stale bytes of the log it replaced
// (walLengths). Without the written length, the child's copy is the
// recycled file's whole length: a memtable's worth of old log.
func TestARecycledWALIsCopiedOnlyAsFarAsItWasWritten(t *testing.T) {
	fs := vfs.NewMem()
	e, parent := openParentOn(t, "/data", fs, true)
	// Two memtables' worth, flushed: the first WAL becomes obsolete and
	// is recycled at the next rotation.
	writeRandomDocs(t, parent, "bulk", 36000, 1024)
	for range 2 {
		if err := parent.st.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	writeDocs(t, parent, "late", 10, 100)
	var longest int64
	for _, size := range walFiles(t, fs, parent.st.dir) {
		longest = max(longest, size)
	}
	if recycled := parent.st.db.Metrics().WAL.ObsoleteFiles; longest < 8<<20 {
		t.Fatalf("the parent's longest WAL is %d bytes (%d obsolete): no recycled log; the test no longer sets up its case", longest, recycled)
	}
	parent.HoldLog()
	specs := halves()
	children, stats, err := e.CreateChildren(parent, specs, ChildExcise, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range stats {
		t.Logf("child %d: copied %d bytes (the parent's longest WAL file: %d bytes)", specs[i].Shard, st.Copied, longest)
		if st.Copied > 64<<10 {
			t.Errorf("child %d copied %d bytes: the recycled WAL's stale tail (the parent's longest WAL file is %d bytes)", specs[i].Shard, st.Copied, longest)
		}
	}
	sameAsParent(t, parent, children, specs)
}
