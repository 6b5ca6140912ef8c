package storage

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"
)

// walFiles lists the WAL files in dir.
func walFiles(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var wals []string
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			wals = append(wals, n)
		}
	}
	slices.Sort(wals)
	return wals
}

// eventually polls cond for up to two seconds: Pebble deletes obsolete
// files on a goroutine of its own.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// writeAndFlush writes n documents to s and flushes its store, which makes
// the WAL they were written to obsolete.
func writeAndFlush(t *testing.T, s *Shard, n int) {
	t.Helper()
	for _, id := range idsInRoot(s.id, n) {
		if _, err := s.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.st.flush(); err != nil {
		t.Fatal(err)
	}
}

// A parent being split keeps the WAL its flush made obsolete until the
// split ends: no unlink among the split's steps (waldefer.go). Without the
// hold, Pebble deletes it at once, which the first half checks (so the
// second half's file is there because it was parked, not because Pebble
// was slow).
func TestASplitParentKeepsItsObsoleteWALUntilReleased(t *testing.T) {
	fs := vfs.NewMem()
	e := openTestEngine(t, fs, LayoutPerShard)
	defer e.Close()
	s := openShard(t, e, 2, 2, rootSpan(2))
	dir := e.ShardDir(2)

	before := walFiles(t, fs, dir)
	writeAndFlush(t, s, 50)
	if !eventually(func() bool { return !slices.Contains(walFiles(t, fs, dir), before[len(before)-1]) }) {
		t.Fatalf("unheld: the flushed WAL %s was never deleted (WALs now %v)", before[len(before)-1], walFiles(t, fs, dir))
	}

	e.HoldCompactions(s)
	held := walFiles(t, fs, dir)
	writeAndFlush(t, s, 50)
	obsolete := held[len(held)-1]
	if !eventually(func() bool { return len(s.st.cfs.parkedWALDeletes()) > 0 }) {
		t.Fatalf("held: no WAL deletion parked after a flush (WALs before %v, now %v)", held, walFiles(t, fs, dir))
	}
	if diff := cmp.Diff([]string{fs.PathJoin(dir, obsolete)}, s.st.cfs.parkedWALDeletes()); diff != "" {
		t.Errorf("held: parked deletions (-want +got):\n%s", diff)
	}
	if !slices.Contains(walFiles(t, fs, dir), obsolete) {
		t.Fatalf("held: the flushed WAL %s was deleted during the hold (WALs now %v)", obsolete, walFiles(t, fs, dir))
	}

	s.ReleaseCompactions() // a cancelled split
	if got := walFiles(t, fs, dir); slices.Contains(got, obsolete) {
		t.Fatalf("released: the parked WAL %s is still there (WALs %v)", obsolete, got)
	}
	if got := s.st.cfs.parkedWALDeletes(); len(got) != 0 {
		t.Fatalf("released: still parked: %v", got)
	}
	writeAndFlush(t, s, 50) // and deletions are no longer parked
	if !eventually(func() bool { return len(walFiles(t, fs, dir)) == 1 }) || len(s.st.cfs.parkedWALDeletes()) != 0 {
		t.Fatalf("after the release: WALs %v, parked %v; want the live one only", walFiles(t, fs, dir), s.st.cfs.parkedWALDeletes())
	}
}

// parkedWALStore opens an engine on fs with shard 2 held as a split's
// parent, written and flushed until a WAL deletion is parked.
func parkedWALStore(t *testing.T, fs vfs.FS) (*Engine, *Shard, string) {
	t.Helper()
	e := openTestEngine(t, fs, LayoutPerShard)
	s := openShard(t, e, 2, 2, rootSpan(2))
	e.HoldCompactions(s)
	writeAndFlush(t, s, 40)
	if !eventually(func() bool { return len(s.st.cfs.parkedWALDeletes()) > 0 }) {
		t.Fatal("no WAL deletion parked after a flush")
	}
	return e, s, e.ShardDir(2)
}

// A crash while a WAL deletion is parked leaves a store that opens with
// every document, and the open deletes the obsolete WAL: Pebble treats a
// WAL below the MANIFEST's oldest unflushed one as obsolete.
func TestACrashWithAParkedWALDeletionRecovers(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e, s, dir := parkedWALStore(t, mem)
	want := scanState(t, s)
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	if got := walFiles(t, crashed, dir); len(got) < 2 {
		t.Fatalf("crash image: WALs %v, want the parked one beside the live one", got)
	}
	_ = e.Close()

	e2 := openTestEngine(t, crashed, LayoutPerShard)
	defer e2.Close()
	s2 := openShard(t, e2, 2, 2, rootSpan(2))
	if diff := cmp.Diff(want, scanState(t, s2)); diff != "" {
		t.Fatalf("after the crash (-before +after):\n%s", diff)
	}
	if !eventually(func() bool { return len(walFiles(t, crashed, dir)) == 1 }) {
		t.Fatalf("reopened: WALs %v, want the obsolete one deleted", walFiles(t, crashed, dir))
	}
}

// A held store that closes deletes what it parked (a store closed in the
// middle of its split: the engine's close).
func TestAClosedStoreDeletesItsParkedWALs(t *testing.T) {
	fs := vfs.NewMem()
	e, s, dir := parkedWALStore(t, fs)
	parked := s.st.cfs.parkedWALDeletes()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range parked {
		if _, err := fs.Stat(p); err == nil {
			t.Errorf("closed: the parked WAL %s is still there (WALs %v)", p, walFiles(t, fs, dir))
		}
	}
}

// A committed split's parent releases its parked WALs in its retirement's
// close, after the store is retired, and there cancelFS.Remove would free
// a large file in steps (shrink): the variant waldefer.go says was
// measured and not kept. The release unlinks each whole.
//
// The sequence is the real one of a split that hands off: the hold
// (holdCompactions), Pebble's cleaner removing the flushed WAL (parked),
// the retirement (closeThen's shut), then the release after db.Close.
func TestARetiredParentsParkedWALIsUnlinkedWhole(t *testing.T) {
	dir := t.TempDir()
	c := &cancelFS{FS: vfs.Default, dir: dir}
	name := filepath.Join(dir, "000005.log")
	data := bytes.Repeat([]byte("0123456789abcdef"), (3*shrinkStep+shrinkStep/2)/16) // a WAL of 28 MiB
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}

	c.holdWALDeletes() // HoldCompactions, at the split's createChildren
	if err := c.Remove(name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(name); err != nil {
		t.Fatalf("the WAL was not parked: %v", err)
	}
	c.retire() // the parent's retirement: closeThen's shut

	// A reader holding the file open sees the size it had at its unlink.
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := c.releaseWALDeletes(); err != nil { // closeThen, after db.Close
		t.Fatal(err)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Fatalf("the parked WAL is still there after the release (%v)", err)
	}
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() != int64(len(data)) {
		t.Fatalf("the retired parent's parked WAL was freed in steps before its unlink (%d bytes at the unlink, %d written): "+
			"waldefer.go says this variant was measured and not kept", info.Size(), len(data))
	}
}

// The same through the engine: a held parent (HoldCompactions) whose
// flushed WAL is larger than shrinkStep is destroyed (its split's cleanup
// retires it with DestroyShard), and its parked WAL is unlinked whole.
func TestADestroyedHeldParentUnlinksItsParkedWALWhole(t *testing.T) {
	e := openEngine(t, Options{Dir: t.TempDir(), FS: vfs.Default, Layout: LayoutPerShard, Logger: zaptest.NewLogger(t), CacheBytes: 8 << 20})
	defer e.Close()
	s := openShard(t, e, 2, 2, rootSpan(2))
	// Pebble's first memtables are small (256 KiB, doubling up to
	// MemTableSize) and each has its WAL: write until the live WAL holds
	// more than shrinkStep.
	src := string(bytes.Repeat([]byte("x"), 4096))
	dir := e.ShardDir(2)
	liveWAL := func() int64 { // the newest WAL's size
		wals := walFiles(t, vfs.Default, dir)
		info, err := os.Stat(filepath.Join(dir, wals[len(wals)-1]))
		if err != nil {
			t.Fatal(err)
		}
		return info.Size()
	}
	ids := idsInRoot(2, 256)
	for i := 0; liveWAL() < shrinkStep+(1<<20); i++ {
		if i >= 256 {
			t.Fatalf("the live WAL holds %d bytes after %d MiB of writes", liveWAL(), i)
		}
		var ops []Op
		for _, id := range ids { // overwrites: every write goes to the WAL
			ops = append(ops, opFor(id, OpIndex, src))
		}
		if _, err := s.Write(ops, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.HoldCompactions(s) // the split begins
	if err := s.st.flush(); err != nil {
		t.Fatal(err)
	}
	// Pebble deletes obsolete WALs in the background: wait for the one this
	// flush made obsolete, not for any. A flush of the write loop's earlier
	// memtables can park its smaller WALs first (a CI run parked 11 B, 1,
	// 3 and 7 MiB, then the 9 MiB one just after the check).
	bigParked := func() bool {
		for _, p := range s.st.cfs.parkedWALDeletes() {
			if info, err := os.Stat(p); err == nil && info.Size() > shrinkStep {
				return true
			}
		}
		return false
	}
	if !eventually(bigParked) {
		t.Fatalf("no WAL of more than shrinkStep bytes parked after the flush (parked: %v)", s.st.cfs.parkedWALDeletes())
	}
	var files []*os.File
	var sizes []int64
	for _, p := range s.st.cfs.parkedWALDeletes() {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		files, sizes = append(files, f), append(sizes, info.Size())
	}
	if slices.Max(sizes) <= shrinkStep {
		t.Fatalf("parked WALs of %v bytes: none above shrinkStep, the test proves nothing", sizes)
	}
	if err := e.DestroyShard(2); err != nil { // the split's cleanup retires the parent
		t.Fatal(err)
	}
	for i, f := range files {
		info, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() != sizes[i] {
			t.Errorf("parked WAL %s: %d bytes at its unlink, %d when parked: freed in steps in the retired parent's close "+
				"(waldefer.go: measured and not kept)", f.Name(), info.Size(), sizes[i])
		}
	}
}
