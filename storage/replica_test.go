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
