package storage

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/routing"
)

// storeDocIDs lists the ids of every document key in s's store, owned or
// not, sorted: what the store holds, not what it serves.
func storeDocIDs(t *testing.T, s *Shard) []string {
	t.Helper()
	it, err := s.st.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for it.First(); it.Valid(); it.Next() {
		if it.Key()[0] == tagDoc {
			_, _, id, err := DecodeDocKey(it.Key())
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// servedIDs lists the ids a shard serves (Scan: its owned spans).
func servedIDs(t *testing.T, s *Shard) []string {
	t.Helper()
	var ids []string
	if err := s.Scan(func(d Doc) error { ids = append(ids, d.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// keepAllSplit writes n documents to root 2's shard and makes two keep-all
// children of it (ids 9 and 10, halves of the root's span). It returns
// them with the ids each owns.
func keepAllSplit(t *testing.T, e *Engine, n int) (children []*Shard, want [][]string) {
	t.Helper()
	parent := openShard(t, e, 2, 2, rootSpan(2))
	var ops []Op
	spans := []routing.Span{{Start: 256, End: 320}, {Start: 320, End: 384}}
	want = make([][]string, 2)
	for _, id := range idsInRoot(2, n) {
		op := opFor(id, OpIndex, "payload")
		ops = append(ops, op)
		for i, sp := range spans {
			if sp.Contains(op.Key) {
				want[i] = append(want[i], id)
			}
		}
	}
	if _, err := parent.Write(ops, nil); err != nil {
		t.Fatal(err)
	}
	parent.HoldLog()
	for i, sp := range spans {
		c, stats, err := e.createChild(parent, routing.ShardID(9+i), sp, ChildKeepAll)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Seq != parent.Seq() {
			t.Fatalf("child %d starts at seq %d, parent is at %d", c.ID(), stats.Seq, parent.Seq())
		}
		children = append(children, c)
		slices.Sort(want[i])
	}
	return children, want
}

// A keep-all child holds every document of its parent but serves only its
// own; after its cleanup it holds exactly its own documents, its marker is
// gone and so is the space of the rest.
func TestKeepAllChildCleanupLeavesExactlyItsOwnDocuments(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	children, want := keepAllSplit(t, e, 3000)
	all := slices.Sorted(slices.Values(append(slices.Clone(want[0]), want[1]...)))
	for i, c := range children {
		if diff := cmp.Diff(all, storeDocIDs(t, c)); diff != "" {
			t.Errorf("child %d's store before cleanup, not the whole parent (-want +got):\n%s", c.ID(), diff)
		}
		if diff := cmp.Diff(want[i], servedIDs(t, c)); diff != "" {
			t.Errorf("child %d serves foreign documents before cleanup (-want +got):\n%s", c.ID(), diff)
		}
		if pending, err := c.ForeignPending(); err != nil || !pending {
			t.Errorf("child %d: ForeignPending = %v, %v before cleanup", c.ID(), pending, err)
		}
		if n, err := c.ForeignDocs(); err != nil || n != len(want[1-i]) {
			t.Errorf("child %d: %d foreign documents (%v), want %d", c.ID(), n, err, len(want[1-i]))
		}
		if ok, err := e.StartForeignCleanup(c); err != nil || !ok {
			t.Fatalf("child %d: cleanup not started: %v", c.ID(), err)
		}
	}
	if err := e.WaitForeignCleanups(context.Background()); err != nil {
		t.Fatal(err)
	}
	ended, running := e.ForeignCleanups()
	if len(ended) != 2 || len(running) != 0 {
		t.Fatalf("cleanups: ended %+v, running %v", ended, running)
	}
	for _, r := range ended {
		i := int(r.Shard - 9)
		if !r.Done || r.Err != nil || r.Deleted != len(want[1-i]) {
			t.Errorf("cleanup of %d: done %v, err %v, deleted %d, want %d", r.Shard, r.Done, r.Err, r.Deleted, len(want[1-i]))
		}
	}
	for i, c := range children {
		if diff := cmp.Diff(want[i], storeDocIDs(t, c)); diff != "" {
			t.Errorf("child %d's store after cleanup (-want +got):\n%s", c.ID(), diff)
		}
		if pending, err := c.ForeignPending(); err != nil || pending {
			t.Errorf("child %d: ForeignPending = %v, %v after cleanup", c.ID(), pending, err)
		}
		// A second start finds nothing to do.
		if ok, err := e.StartForeignCleanup(c); err != nil || ok {
			t.Errorf("child %d: a second cleanup started (%v, %v)", c.ID(), ok, err)
		}
	}
}

// A cleanup cut short by a close leaves the marker; on reopen the shard
// still serves only its own documents and a new cleanup finishes the job.
func TestKeepAllCleanupResumesAfterClose(t *testing.T) {
	fs := vfs.NewMem()
	e, err := Open(Options{Dir: "/data", FS: fs, Logger: zaptest.NewLogger(t), CacheBytes: 8 << 20,
		ForeignCleanup: ForeignCleanupOptions{Batch: 10, Pause: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	children, want := keepAllSplit(t, e, 2000)
	c := children[0]
	if _, err := e.StartForeignCleanup(c); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a few batches of 10
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	ended, _ := e.ForeignCleanups()
	if len(ended) != 1 || ended[0].Done || !errors.Is(ended[0].Err, context.Canceled) || ended[0].Deleted == 0 {
		t.Fatalf("cleanup cut by close: %+v, want canceled after some deletes", ended)
	}

	e = openTestEngine(t, fs, LayoutPerShard)
	defer e.Close()
	c, err = e.OpenShard(9, 2, []routing.Span{{Start: 256, End: 320}})
	if err != nil {
		t.Fatal(err)
	}
	left, err := c.ForeignDocs()
	if err != nil || left == 0 || left >= len(want[1]) {
		t.Fatalf("after reopen: %d foreign documents left (%v); want some deleted, some left", left, err)
	}
	if diff := cmp.Diff(want[0], servedIDs(t, c)); diff != "" {
		t.Errorf("reopened child serves (-want +got):\n%s", diff)
	}
	if ok, err := e.StartForeignCleanup(c); err != nil || !ok {
		t.Fatalf("resume: %v %v", ok, err)
	}
	if err := e.WaitForeignCleanups(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[0], storeDocIDs(t, c)); diff != "" {
		t.Errorf("child's store after the resumed cleanup (-want +got):\n%s", diff)
	}
	if ended, _ := e.ForeignCleanups(); len(ended) != 1 || !ended[0].Done || ended[0].Deleted != left {
		t.Errorf("resumed cleanup: %+v, want done with %d deletes", ended, left)
	}
}

// Destroying a shard stops its cleanup first (the store is not closed
// under it).
func TestDestroyShardStopsItsCleanup(t *testing.T) {
	e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), Logger: zaptest.NewLogger(t), CacheBytes: 8 << 20,
		ForeignCleanup: ForeignCleanupOptions{Batch: 5, Pause: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	children, _ := keepAllSplit(t, e, 1000)
	if _, err := e.StartForeignCleanup(children[1]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := e.DestroyShard(children[1].ID()); err != nil {
		t.Fatal(err)
	}
	if _, running := e.ForeignCleanups(); len(running) != 0 {
		t.Fatalf("cleanups still running after destroy: %v", running)
	}
}
