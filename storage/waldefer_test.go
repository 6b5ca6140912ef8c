package storage

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
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
	s, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
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

// A crash while a WAL deletion is parked leaves a store that opens with
// every document, and the open deletes the obsolete WAL: Pebble treats a
// WAL below the MANIFEST's oldest unflushed one as obsolete.
func TestACrashWithAParkedWALDeletionRecovers(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := openTestEngine(t, mem, LayoutPerShard)
	s, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
	dir := e.ShardDir(2)
	e.HoldCompactions(s)
	writeAndFlush(t, s, 40)
	if !eventually(func() bool { return len(s.st.cfs.parkedWALDeletes()) > 0 }) {
		t.Fatal("no WAL deletion parked after a flush")
	}
	want := scanState(t, s)
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	if got := walFiles(t, crashed, dir); len(got) < 2 {
		t.Fatalf("crash image: WALs %v, want the parked one beside the live one", got)
	}
	_ = e.Close()

	e2 := openTestEngine(t, crashed, LayoutPerShard)
	defer e2.Close()
	s2, err := e2.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
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
	e := openTestEngine(t, fs, LayoutPerShard)
	s, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
	dir := e.ShardDir(2)
	e.HoldCompactions(s)
	writeAndFlush(t, s, 40)
	if !eventually(func() bool { return len(s.st.cfs.parkedWALDeletes()) > 0 }) {
		t.Fatal("no WAL deletion parked after a flush")
	}
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
