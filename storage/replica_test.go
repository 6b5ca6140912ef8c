package storage

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// TestUndoTakesBackReplicatedOperationsToTheGivenPoint: a replica's
// operations above a point are undone newest first, documents and history
// back to what they were, and the sequence number with them.
func TestUndoTakesBackReplicatedOperationsToTheGivenPoint(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	s := openShard(t, e, 0, 0, routing.Span{Start: 0, End: 1 << 32})
	put := func(seq uint64, id, v string) LogEntry {
		return LogEntry{Seq: seq, Op: Op{Kind: OpIndex, Key: 7, ID: id, Source: []byte(v)}}
	}
	if err := s.ApplyReplicated([]LogEntry{put(1, "a", "a1"), put(2, "b", "b1")}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyReplicated([]LogEntry{put(3, "a", "a2"), {Seq: 4, Op: Op{Kind: OpDelete, Key: 7, ID: "b"}}, put(5, "c", "c1")}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Undo(2); err != nil {
		t.Fatalf("Undo(2) = %v", err)
	}
	if got := s.Seq(); got != 2 {
		t.Fatalf("sequence number after Undo(2) = %d, want 2", got)
	}
	for id, want := range map[string]string{"a": "a1", "b": "b1", "c": ""} {
		d, found, err := s.Get(0, 7, id)
		if err != nil || found != (want != "") || string(d.Source) != want {
			t.Fatalf("after Undo(2): %s = %q, %v, %v; want %q", id, d.Source, found, err, want)
		}
	}
	var logged []uint64
	_ = s.LogSince(0, s.Seq(), nil, func(e LogEntry) error { logged = append(logged, e.Seq); return nil })
	if len(logged) != 2 {
		t.Fatalf("history after Undo(2) = %v, want operations 1 and 2", logged)
	}
	// Undo records at or below the global checkpoint are gone: no undo
	// past it.
	if err := s.DropUndo(2); err != nil {
		t.Fatal(err)
	}
	if err := s.Undo(0); err == nil {
		t.Fatal("Undo below dropped undo records succeeded")
	}
}

// TestTheUndoFloorIsKeptWithTheShard: the point DropUndo was given (a
// copy's global checkpoint) is read back once the engine is opened again
// on the same files, and only goes up.
func TestTheUndoFloorIsKeptWithTheShard(t *testing.T) {
	fs := vfs.NewMem()
	e := openTestEngine(t, fs, LayoutPerShard)
	s := openShard(t, e, 0, 0, routing.Span{Start: 0, End: 1 << 32})
	if _, ok, err := s.UndoFloor(); ok || err != nil {
		t.Fatalf("UndoFloor of a new shard = _, %v, %v; want none", ok, err)
	}
	entries := []LogEntry{{Seq: 1, Op: Op{Kind: OpIndex, Key: 7, ID: "a", Source: []byte("a1")}},
		{Seq: 2, Op: Op{Kind: OpIndex, Key: 7, ID: "b", Source: []byte("b1")}}}
	if err := s.ApplyReplicated(entries, true); err != nil {
		t.Fatal(err)
	}
	if err := s.DropUndo(2); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTestEngine(t, fs, LayoutPerShard)
	defer e.Close()
	s = openShard(t, e, 0, 0, routing.Span{Start: 0, End: 1 << 32})
	if floor, ok, err := s.UndoFloor(); !ok || err != nil || floor != 2 {
		t.Fatalf("UndoFloor after reopening = %d, %v, %v; want 2", floor, ok, err)
	}
}

// TestNoopAdvancesTheSequenceNumberWithoutADocument: a no-op takes its
// sequence number and a place in the history, changes no document, and is
// undone like any operation; an operation of a range the shard does not
// own is refused, which is why a follower turns it into a no-op.
func TestNoopAdvancesTheSequenceNumberWithoutADocument(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	s := openShard(t, e, 0, 0, routing.Span{Start: 0, End: 100})
	put := func(seq uint64, key routing.Key, id string) LogEntry {
		return LogEntry{Seq: seq, Op: Op{Kind: OpIndex, Key: key, ID: id, Source: []byte(id)}}
	}
	if err := s.ApplyReplicated([]LogEntry{put(1, 7, "a"), put(2, 200, "foreign")}, true); err == nil {
		t.Fatal("an operation outside the shard's span was applied")
	}
	if err := s.ApplyReplicated([]LogEntry{put(1, 7, "a"), {Seq: 2, Op: Op{Kind: OpNoop}}, put(3, 8, "b")}, true); err != nil {
		t.Fatal(err)
	}
	if got := s.Seq(); got != 3 {
		t.Fatalf("sequence number = %d, want 3", got)
	}
	var kinds []OpKind
	_ = s.LogSince(0, s.Seq(), nil, func(e LogEntry) error { kinds = append(kinds, e.Op.Kind); return nil })
	if len(kinds) != 3 || kinds[1] != OpNoop {
		t.Fatalf("history kinds %v, want index, noop, index", kinds)
	}
	if err := s.Undo(1); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := s.Get(0, 8, "b"); found || s.Seq() != 1 {
		t.Fatalf("after Undo(1): b found %v, seq %d", found, s.Seq())
	}
	if _, found, _ := s.Get(0, 7, "a"); !found {
		t.Fatal("after Undo(1): a is gone")
	}
}
