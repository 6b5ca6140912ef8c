package storage

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestWriteNoWaitIsReadableAtOnceAndDurableAfterItsWait: WriteNoWait
// applies in sequence order and returns before the fsync; once its wait
// returned, a crash keeps the ops (what a replication primary relies on
// to count itself toward the global checkpoint).
func TestWriteNoWaitIsReadableAtOnceAndDurableAfterItsWait(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := openTestEngine(t, mem, LayoutPerShard)
	s := openShard(t, e, 0, 0, rootSpan(0))
	ids := idsInRoot(0, 3)
	if _, err := s.Write([]Op{opFor(ids[0], OpIndex, "a")}, nil); err != nil {
		t.Fatal(err)
	}
	last, wait, err := s.WriteNoWait([]Op{opFor(ids[1], OpIndex, "b"), opFor(ids[2], OpIndex, "c")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if last != 3 || s.Seq() != 3 {
		t.Fatalf("WriteNoWait landed at %d (Seq %d), want 3", last, s.Seq())
	}
	if d, ok, err := s.Get(0, opFor(ids[2], OpIndex, "").Key, ids[2]); err != nil || !ok || string(d.Source) != "c" {
		t.Fatalf("before the wait, %s = %q, %v, %v; want c, readable", ids[2], d.Source, ok, err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = e.Close()
	e2 := openTestEngine(t, crashed, LayoutPerShard)
	defer e2.Close()
	s2 := openShard(t, e2, 0, 0, rootSpan(0))
	if s2.Seq() != 3 {
		t.Fatalf("after a crash following the wait, Seq = %d, want 3", s2.Seq())
	}
}

// TestApplyReplicatedNoWaitIsReadableAtOnceAndDurableAfterItsWait: as
// WriteNoWait, for a replica's operations with their history and undo
// records.
func TestApplyReplicatedNoWaitIsReadableAtOnceAndDurableAfterItsWait(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := openTestEngine(t, mem, LayoutPerShard)
	s := openShard(t, e, 0, 0, rootSpan(0))
	s.HoldLog()
	ids := idsInRoot(0, 2)
	wait, err := s.ApplyReplicatedNoWait([]LogEntry{{Seq: 1, Op: opFor(ids[0], OpIndex, "a")}, {Seq: 2, Op: opFor(ids[1], OpIndex, "b")}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if s.Seq() != 2 {
		t.Fatalf("before the wait, Seq = %d, want 2", s.Seq())
	}
	if d, ok, err := s.Get(0, opFor(ids[1], OpIndex, "").Key, ids[1]); err != nil || !ok || string(d.Source) != "b" {
		t.Fatalf("before the wait, %s = %q, %v, %v; want b, readable", ids[1], d.Source, ok, err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = e.Close()
	e2 := openTestEngine(t, crashed, LayoutPerShard)
	defer e2.Close()
	s2 := openShard(t, e2, 0, 0, rootSpan(0))
	if s2.Seq() != 2 {
		t.Fatalf("after a crash following the wait, Seq = %d, want 2", s2.Seq())
	}
	if err := s2.Undo(0); err != nil {
		t.Fatalf("the undo records did not survive: %v", err)
	}
}
