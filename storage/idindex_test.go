package storage

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// routedOp is an op of id with routing value r (or none), as the node
// builds it: the keyspace and key r routes to, and the _id's home when the
// _id alone routes into the same keyspace.
func routedOp(id, r string, kind OpKind, source string) Op {
	p, home := testSettings.Place(id, r), testSettings.Place(id, "")
	op := Op{Kind: kind, Root: p.Root, Key: routing.Key(p.Partition), ID: id, Routing: r}
	if source != "" {
		op.Source = []byte(source)
	}
	if r != "" && home.Root == p.Root {
		op.Home = Home{Key: routing.Key(home.Partition), Set: true}
	}
	return op
}

// routingsInto returns n routing values that route id into span of root
// 2, each under a key of its own and none under the _id's home.
func routingsInto(id string, span routing.Span, n int) []string {
	home := testSettings.Place(id, "")
	seen := map[uint32]bool{}
	if home.Root == 2 {
		seen[home.Partition] = true
	}
	var out []string
	for i := 0; len(out) < n; i++ {
		r := fmt.Sprintf("tenant-%d", i)
		p := testSettings.Place(id, r)
		if p.Root == 2 && span.Contains(routing.Key(p.Partition)) && !seen[p.Partition] {
			seen[p.Partition] = true
			out = append(out, r)
		}
	}
	return out
}

// idDocs returns the documents of id the shard's store holds, "routing=source"
// each, in key order.
func idDocs(t *testing.T, s *Shard, id string) []string {
	t.Helper()
	var out []string
	if err := s.Scan(func(d Doc) error {
		if d.ID == id {
			out = append(out, d.Routing+"="+string(d.Source))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func checkIDIndex(t *testing.T, s *Shard, sp routing.Span, outside bool) IDIndexReport {
	t.Helper()
	r, err := s.CheckIDIndex(sp)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || outside && r.Outside != 0 {
		t.Errorf("shard %d's _id index over %s: %+v", s.ID(), sp, r)
	}
	return r
}

// A shard keeps one document per _id whatever routing values reach it, as
// OpenSearch's engine does (its _id terms are per shard): an index moves
// the document under its own key, a get with any routing value that
// reaches the shard finds it, a delete with any of them deletes it; also
// within one batch.
func TestAShardKeepsOneDocumentPerID(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout Layout) {
		e := openTestEngine(t, vfs.NewMem(), layout)
		defer e.Close()
		span := rootSpan(2)
		s, err := e.OpenShard(2, 2, []routing.Span{span})
		if err != nil {
			t.Fatal(err)
		}
		id := idsInRoot(2, 1)[0]
		rs := routingsInto(id, span, 2)
		write := func(ops ...Op) {
			t.Helper()
			if _, err := s.Write(ops, nil); err != nil {
				t.Fatal(err)
			}
		}
		want := func(step string, docs ...string) {
			t.Helper()
			if got := idDocs(t, s, id); !slices.Equal(got, docs) {
				t.Errorf("%s: documents of %s %q, want %q", step, id, got, docs)
			}
			checkIDIndex(t, s, span, layout == LayoutPerShard)
			for _, r := range append([]string{""}, rs...) {
				op := routedOp(id, r, OpIndex, "")
				d, found, err := s.GetID(2, span, op.Key, id, op.Home)
				switch {
				case err != nil:
					t.Fatal(err)
				case len(docs) == 0 && found:
					t.Errorf("%s: get with routing %q found %q, want nothing", step, r, d.Source)
				case len(docs) == 1 && (!found || d.Routing+"="+string(d.Source) != docs[0]):
					t.Errorf("%s: get with routing %q = %v %q, want %s", step, r, found, d.Routing+"="+string(d.Source), docs[0])
				}
			}
		}
		write(routedOp(id, "", OpIndex, "v1"))
		want("unrouted", "=v1")
		write(routedOp(id, rs[0], OpIndex, "v2"))
		want("routed over the unrouted", rs[0]+"=v2")
		write(routedOp(id, rs[1], OpIndex, "v3"))
		want("routed over another routing", rs[1]+"=v3")
		write(routedOp(id, "", OpIndex, "v4"))
		want("unrouted over the routed", "=v4")
		write(routedOp(id, rs[0], OpDelete, ""))
		want("deleted with another routing")
		write(routedOp(id, rs[0], OpIndex, "v5"), routedOp(id, rs[1], OpIndex, "v6"), routedOp(id, "", OpIndex, "v7"), routedOp(id, rs[0], OpIndex, "v8"))
		want("one batch of four", rs[0]+"=v8")
		write(routedOp(id, rs[1], OpIndex, "v9"), routedOp(id, "", OpDelete, ""))
		want("one batch, then deleted unrouted")
		if r := checkIDIndex(t, s, span, true); r.Entries != 0 || r.Routed != 0 {
			t.Errorf("nothing left, yet %+v", r)
		}
	})
}

// An unrouted write cannot meet another document of its _id but a routed
// one, and there is none while the store has no `_id` entry: such a store
// does not read its index. A reopened store knows whether it has entries.
func TestAStoreReadsItsIDIndexOnlyOnceItHoldsAnEntry(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout Layout) {
		fs := vfs.NewMem()
		e := openTestEngine(t, fs, layout)
		s, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
		if err != nil {
			t.Fatal(err)
		}
		ids := idsInRoot(2, 10)
		for _, id := range ids {
			if _, err := s.Write([]Op{routedOp(id, "", OpIndex, "v")}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if s.st.idEntries.Load() {
			t.Errorf("a store of unrouted documents may hold _id entries")
		}
		routed := routedOp(ids[0], routingsInto(ids[0], rootSpan(2), 1)[0], OpIndex, "v")
		if _, err := s.Write([]Op{routed}, nil); err != nil {
			t.Fatal(err)
		}
		if !s.st.idEntries.Load() {
			t.Fatalf("a store holding a routed document reads no _id index")
		}
		reopen := func() {
			t.Helper()
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = openTestEngine(t, fs, layout)
			if s, err = e.OpenShard(2, 2, []routing.Span{rootSpan(2)}); err != nil {
				t.Fatal(err)
			}
		}
		reopen()
		if !s.st.idEntries.Load() {
			t.Errorf("reopened with an _id entry, it reads no _id index")
		}
		routed.Kind, routed.Source = OpDelete, nil
		if _, err := s.Write([]Op{routed}, nil); err != nil {
			t.Fatal(err)
		}
		reopen()
		defer e.Close()
		if s.st.idEntries.Load() {
			t.Errorf("reopened without _id entries, it still reads the _id index")
		}
	})
}

// idParent is a shard of root 2 holding n documents, a third of them
// routed (to keys anywhere in the root), part flushed, with its log held.
func idParent(t *testing.T, e *Engine, n int) (*Shard, []ChildSpec) {
	t.Helper()
	parent, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range idsInRoot(2, n) {
		op := routedOp(id, "", OpIndex, fmt.Sprintf("v-%d", i))
		if i%3 == 0 {
			op = routedOp(id, routingsInto(id, rootSpan(2), 1+i%2)[i%2], OpIndex, fmt.Sprintf("v-%d", i))
		}
		if _, err := parent.Write([]Op{op}, nil); err != nil {
			t.Fatal(err)
		}
		if i == n/2 {
			if err := parent.st.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	parent.HoldLog()
	root := rootSpan(2)
	mid := root.Start + (root.End-root.Start)/2
	return parent, []ChildSpec{{Shard: 3, Span: routing.Span{Start: root.Start, End: mid}}, {Shard: 4, Span: routing.Span{Start: mid, End: root.End}}}
}

// movers returns ids of the parent with a document in one child's span
// and a routing value that moves it into the other's.
func movers(t *testing.T, parent *Shard, specs []ChildSpec, n int) (ids []string, to []string) {
	t.Helper()
	if err := parent.Scan(func(d Doc) error {
		if len(ids) == n || !specs[1].Span.Contains(d.Key) {
			return nil
		}
		ids = append(ids, d.ID)
		to = append(to, routingsInto(d.ID, specs[0].Span, 1)[0])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ids, to
}

// A split's children own exactly the `_id` entries of their documents,
// whichever way the per-shard child drops its parent's others, in both
// layouts: also for writes the catch-up replays that moved a document of
// the parent from one child's span into the other's (the other child
// deletes its copy).
func TestSplitChildrenOwnExactlyTheirIDEntries(t *testing.T) {
	for _, build := range []IDIndexBuild{IDIndexRebuild, IDIndexScanDelete} {
		t.Run("build="+build.String(), func(t *testing.T) {
			forLayouts(t, func(t *testing.T, layout Layout) {
				e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), Layout: layout, CacheBytes: 8 << 20, IDIndex: build})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				parent, specs := idParent(t, e, 600)
				ids, to := movers(t, parent, specs, 20)
				children, stats, err := e.CreateChildren(parent, specs, ChildExcise, false)
				if err != nil {
					t.Fatal(err)
				}
				if layout == LayoutPerShard {
					for _, cs := range stats {
						if ix := cs.IDIndex; ix.Build != build || ix.Kept == 0 || ix.Dropped == 0 || ix.Kept+ix.Dropped != ix.Scanned {
							t.Errorf("child %d's _id index build: %+v", cs.Shard, ix)
						}
					}
				}
				for i, id := range ids {
					op := routedOp(id, to[i], OpIndex, "moved")
					if _, err := parent.Write([]Op{op}, nil); err != nil {
						t.Fatal(err)
					}
				}
				if _, _, err := e.CatchUp(parent, children, stats[0].Seq); err != nil {
					t.Fatal(err)
				}
				for i, c := range children {
					checkIDIndex(t, c, specs[i].Span, layout == LayoutPerShard)
					for j, id := range ids {
						got := idDocs(t, c, id)
						if want := []string{to[j] + "=moved"}; i == 0 && !slices.Equal(got, want) || i == 1 && len(got) != 0 {
							t.Errorf("child %d holds %q of %s, which moved into child %d", c.ID(), got, id, children[0].ID())
						}
					}
				}
			})
		})
	}
}

// A keep-all child links its parent's whole index with the rest, and its
// cleanup deletes the entries of the documents it does not own.
func TestKeepAllChildCleanupDropsTheForeignIDEntries(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent, specs := idParent(t, e, 600)
	children, _, err := e.CreateChildren(parent, specs, ChildKeepAll, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range children {
		if r := checkIDIndex(t, c, specs[i].Span, false); r.Outside == 0 {
			t.Errorf("child %d links none of its parent's other entries before its cleanup", c.ID())
		}
		if _, err := e.StartForeignCleanup(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.WaitForeignCleanups(context.Background()); err != nil {
		t.Fatal(err)
	}
	ended, _ := e.ForeignCleanups()
	for _, r := range ended {
		if !r.Done || r.DeletedIDs == 0 {
			t.Errorf("cleanup of %d: done %v, %d _id entries deleted (%v)", r.Shard, r.Done, r.DeletedIDs, r.Err)
		}
	}
	for i, c := range children {
		checkIDIndex(t, c, specs[i].Span, true)
	}
}

// twoShardsOfOneID opens shards 9 and 10, the halves of root 2, and
// writes one _id into each under a routing value of its own: "a" under ra
// into 9, "b" under rb into 10.
func twoShardsOfOneID(t *testing.T, e *Engine) (a, b *Shard, id, ra, rb string) {
	t.Helper()
	lo, hi := routing.Span{Start: 256, End: 320}, routing.Span{Start: 320, End: 384}
	a, _ = e.OpenShard(9, 2, []routing.Span{lo})
	b, _ = e.OpenShard(10, 2, []routing.Span{hi})
	id = idsInRoot(2, 1)[0]
	ra, rb = routingsInto(id, lo, 1)[0], routingsInto(id, hi, 1)[0]
	if _, err := a.Write([]Op{routedOp(id, ra, OpIndex, "a")}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write([]Op{routedOp(id, rb, OpIndex, "b")}, nil); err != nil {
		t.Fatal(err)
	}
	return a, b, id, ra, rb
}

// A merge keeps every document of its sources, so two documents of one
// _id from two sources (two routing values that reached two shards) are
// both in the target, as OpenSearch's shrink keeps them; the next write of
// the _id there leaves one.
func TestAMergeKeepsBothDocumentsOfAnIDAndTheNextWriteLeavesOne(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout Layout) {
		e := openTestEngine(t, vfs.NewMem(), layout)
		defer e.Close()
		a, b, id, ra, rb := twoShardsOfOneID(t, e)
		hi := b.Owned()[0]
		for i, other := range idsInRoot(2, 300)[1:] {
			op := routedOp(other, "", OpIndex, fmt.Sprint(i))
			s := a
			if hi.Contains(op.Key) {
				s = b
			}
			if _, err := s.Write([]Op{op}, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []*Shard{a, b} {
			if err := s.st.db.Flush(); err != nil {
				t.Fatal(err)
			}
			s.HoldLog()
		}
		span := routing.Span{Start: 256, End: 384}
		target, _, err := e.CreateMergeTarget([]*Shard{a, b}, 11, span)
		if err != nil {
			t.Fatal(err)
		}
		if got := idDocs(t, target, id); !slices.Equal(got, []string{ra + "=a", rb + "=b"}) {
			t.Errorf("the target holds %q of %s, want both sources' documents", got, id)
		}
		if r := checkIDIndex(t, target, span, layout == LayoutPerShard); r.SharedIDs != 1 {
			t.Errorf("%d _ids with two documents in the target, want 1", r.SharedIDs)
		}
		if _, err := target.Write([]Op{routedOp(id, "", OpIndex, "one")}, nil); err != nil {
			t.Fatal(err)
		}
		if got := idDocs(t, target, id); !slices.Equal(got, []string{"=one"}) {
			t.Errorf("after a write of %s the target holds %q", id, got)
		}
		checkIDIndex(t, target, span, layout == LayoutPerShard)
	})
}

// A log entry keeps the keys of the documents its op removed.
func TestALogEntryKeepsTheKeysItsOpRemoved(t *testing.T) {
	op := routedOp("doc-1", "tenant-3", OpIndex, "v")
	dk := DocKey(nil, op.Root, op.Key, op.ID)
	for _, removed := range [][]routing.Key{nil, {7}, {300, 12, 1<<32 - 1}} {
		e, err := decodeLogEntry(logKey(nil, 2, 9), logValue(nil, op, 9, dk, removed))
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq != 9 || e.Op.Kind != OpIndex || e.Op.Key != op.Key || e.Op.ID != op.ID || e.Op.Routing != op.Routing ||
			string(e.Op.Source) != "v" || !slices.Equal(e.Removed, removed) {
			t.Errorf("removed %v: decoded %+v", removed, e)
		}
	}
	if _, err := decodeLogEntry(logKey(nil, 2, 9), []byte{byte(OpDelete) | logRemoved, 3, 0, 0}); err == nil {
		t.Errorf("a log entry naming three removed keys and holding none decoded")
	}
}

// A shrink's copy keeps every document of every source under its key, as
// Lucene's addIndexes does: a copy does not replace a document of its _id
// that the target holds under another key.
func TestCopyFromKeepsEveryDocument(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	a, b, id, ra, rb := twoShardsOfOneID(t, e)
	a.SetOwned([]routing.Span{{Start: 256, End: 384}})
	if _, err := a.CopyFrom(b); err != nil {
		t.Fatal(err)
	}
	if got := idDocs(t, a, id); !slices.Equal(got, []string{ra + "=a", rb + "=b"}) {
		t.Errorf("after the copy: %q", got)
	}
	checkIDIndex(t, a, routing.Span{Start: 256, End: 384}, true)
}
