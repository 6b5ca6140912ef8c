package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/routing"
)

// applyLogReplay gives child the history through ApplyLog, in batches of
// 256 as the catch-up applies the log: the writes the history table must
// equal.
func applyLogReplay(parent, child *Shard, after, upTo uint64) (int, error) {
	entries, err := parent.st.hist.since(after, upTo, child.Owned())
	if err != nil {
		return 0, err
	}
	for i := 0; i < len(entries); i += 256 {
		if err := child.ApplyLog(entries[i:min(i+256, len(entries))]); err != nil {
			return i, err
		}
	}
	return len(entries), nil
}

// routedMemtableParent opens shard 2 on e with flushed documents, routed
// (with `_id` entries) and not, then leaves in its memtable the writes
// that touch the `_id` index in every way: routed documents moved under
// another routing value and back home, deleted, new routed and unrouted
// documents, and a no-op; then holds its log as a split does and writes
// once more.
func routedMemtableParent(t *testing.T, e *Engine) (*Shard, []ChildSpec) {
	t.Helper()
	parent := openShard(t, e, 2, 2, rootSpan(2))
	root := rootSpan(2)
	write := func(op Op) {
		t.Helper()
		if _, err := parent.Write([]Op{op}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ids := idsInRoot(2, 240)
	routings := map[string][]string{}
	for i, id := range ids {
		routings[id] = routingsInto(id, root, 2)
		if i < 120 {
			if i%2 == 0 {
				write(routedOp(id, routings[id][0], OpIndex, "flushed "+id))
			} else {
				write(opFor(id, OpIndex, "flushed "+id))
			}
		}
	}
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids[:200] {
		switch {
		case i >= 120 && i%2 == 0: // new, routed
			write(routedOp(id, routings[id][1], OpIndex, "memtable "+id))
		case i >= 120: // new, at home
			write(opFor(id, OpIndex, "memtable "+id))
		case i%5 == 0: // a routed document moved under another routing value
			write(routedOp(id, routings[id][1], OpIndex, "moved "+id))
		case i%5 == 1: // deleted, routed or not
			if i%2 == 0 {
				write(routedOp(id, routings[id][0], OpDelete, ""))
			} else {
				write(opFor(id, OpDelete, ""))
			}
		case i%5 == 2: // moved home, or from home under a routing value
			if i%2 == 0 {
				write(opFor(id, OpIndex, "home "+id))
			} else {
				write(routedOp(id, routings[id][0], OpIndex, "routed "+id))
			}
		case i%5 == 3: // changed twice in the memtable
			write(routedOp(id, routings[id][1], OpIndex, "first "+id))
			write(routedOp(id, routings[id][0], OpIndex, "second "+id))
		}
	}
	if err := parent.ApplyReplicated([]LogEntry{{Seq: parent.Seq() + 1, Op: Op{Kind: OpNoop}}}, false); err != nil {
		t.Fatal(err)
	}
	write(opFor(ids[0], OpDelete, ""))
	parent.HoldLog()
	for _, id := range ids[200:] {
		write(opFor(id, OpIndex, "logged "+id))
	}
	mid := root.Start + (root.End-root.Start)/2
	return parent, []ChildSpec{{Shard: 3, Span: routing.Span{Start: root.Start, End: mid}}, {Shard: 4, Span: routing.Span{Start: mid, End: root.End}}}
}

// storeKeys returns every key and value of s's store, the shard's own
// metadata key spelled as shard 0's, so that stores of two shards compare.
func storeKeys(t *testing.T, s *Shard) [][2]string {
	t.Helper()
	it, err := s.st.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out [][2]string
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if bytes.Equal(k, metaKey(metaSeq, s.id)) {
			k = metaKey(metaSeq, 0)
		}
		out = append(out, [2]string{string(k), string(it.Value())})
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A child given its parent's history as an ingested table holds, key by
// key, what ApplyLog's replay of the same history leaves: its documents,
// its `_id` index (moves, deletes and new entries alike), its sequence
// number and metadata, and the history it keeps for a split of its own.
// The ingest needs no flush of the child: the table overlaps nothing in
// its memtable.
func TestAChildsHistoryTableHoldsWhatApplyLogWrites(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent, specs := routedMemtableParent(t, e)
	ingested, istats, err := e.CreateChildren(parent, specs, ChildExcise, true)
	if err != nil {
		t.Fatal(err)
	}
	e.historyReplay = applyLogReplay
	var applied []*Shard
	var astats []ChildStats
	{
		other := []ChildSpec{{Shard: 5, Span: specs[0].Span}, {Shard: 6, Span: specs[1].Span}}
		applied, astats, err = e.CreateChildren(parent, other, ChildExcise, true)
		if err != nil {
			t.Fatal(err)
		}
	}
	e.historyReplay = nil
	tables := 0
	for i, c := range ingested {
		a := applied[i]
		is, as := istats[i], astats[i]
		if !is.Unflushed || is.History == 0 {
			t.Fatalf("child %d: unflushed %v, %d operations from the history: want the history replayed", c.ID(), is.Unflushed, is.History)
		}
		if is.History != as.History || is.Seq != as.Seq {
			t.Errorf("child %d took %d operations up to %d, ApplyLog's %d up to %d", c.ID(), is.History, is.Seq, as.History, as.Seq)
		}
		if is.HistoryTable.Keys > 0 {
			tables++
		}
		if is.HistoryTable.Overlap != 0 {
			t.Errorf("child %d: %d history tables overlapped its memtable, want none (no flush for the ingest)", c.ID(), is.HistoryTable.Overlap)
		}
		if n := c.FlushesEnded(); n != 0 {
			t.Errorf("child %d flushed %d times while it was made, want never", c.ID(), n)
		}
		if c.Seq() != a.Seq() {
			t.Errorf("child %d's sequence number is %d, ApplyLog's child's %d", c.ID(), c.Seq(), a.Seq())
		}
		if ci, ai := c.st.idEntries.Load(), a.st.idEntries.Load(); ci != ai {
			t.Errorf("child %d keeps `_id` entries: %v, ApplyLog's child: %v", c.ID(), ci, ai)
		}
		if ch, ah := c.st.hist.retained(), a.st.hist.retained(); ch != ah {
			t.Errorf("child %d's history holds %d operations, ApplyLog's child's %d", c.ID(), ch, ah)
		}
		got, want := storeKeys(t, c), storeKeys(t, a)
		ids := 0
		for _, kv := range want {
			if kv[0][0] == tagID {
				ids++
			}
		}
		if ids == 0 {
			t.Errorf("ApplyLog's child %d holds no `_id` entry: the test compares no index", a.ID())
		}
		if len(got) != len(want) {
			t.Errorf("child %d's store holds %d keys, ApplyLog's child's %d", c.ID(), len(got), len(want))
		}
		for j := range min(len(got), len(want)) {
			if got[j] != want[j] {
				t.Errorf("child %d's key %d is %x = %x, ApplyLog's child's %x = %x", c.ID(), j, got[j][0], got[j][1], want[j][0], want[j][1])
				break
			}
		}
		if _, _, err := e.CatchUp(parent, []*Shard{c}, is.Seq); err != nil {
			t.Fatal(err)
		}
		sameDocs(t, parent, c, specs[i].Span)
	}
	if tables != len(ingested) {
		t.Errorf("%d of %d children were given a history table", tables, len(ingested))
	}
}

// A history of no-ops alone changes no document: the child takes no table,
// and its sequence number rises to the last no-op, as ApplyLog's would.
// (A no-op's key is 0: it reaches the children of root 0's first span.)
func TestAHistoryOfNoOpsGivesTheChildOnlyItsSequenceNumber(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent := openShard(t, e, 2, 0, rootSpan(0))
	for _, id := range idsInRoot(0, 20) {
		if _, err := parent.Write([]Op{opFor(id, OpIndex, "flushed "+id)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := parent.ApplyReplicated([]LogEntry{{Seq: parent.Seq() + 1, Op: Op{Kind: OpNoop}}}, false); err != nil {
			t.Fatal(err)
		}
	}
	child := openShard(t, e, 3, 0, rootSpan(0))
	defer func() { _ = e.DestroyShard(3) }()
	floor, ok, err := parent.pinHistory()
	if err != nil || !ok {
		t.Fatalf("pin: %v, %v", ok, err)
	}
	defer parent.st.hist.unpin()
	n, table, err := e.ingestHistory(parent, child, floor, parent.Seq())
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || table.Keys != 0 {
		t.Errorf("the child took %d operations as a table of %d keys, want 3 and no table", n, table.Keys)
	}
	if child.Seq() != parent.Seq() {
		t.Errorf("the child's sequence number is %d, want the last no-op's %d", child.Seq(), parent.Seq())
	}
	v, closer, err := child.st.db.Get(metaKey(metaSeq, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if got := binary.BigEndian.Uint64(v); got != parent.Seq() {
		t.Errorf("the child's stored sequence number is %d, want %d", got, parent.Seq())
	}
}

// A child whose `_id` index is trimmed with tombstones (IDIndexScanDelete)
// given its parent's history as an ingested table holds what ApplyLog's
// replay leaves, and the table overlaps nothing in its memtable: the
// split's window holds no flush of the child for it.
func TestAScanDeleteChildsHistoryTableOverlapsNoMemtable(t *testing.T) {
	e := openEngine(t, Options{FS: vfs.NewMem(), IDIndex: IDIndexScanDelete, Logger: zaptest.NewLogger(t), CacheBytes: 8 << 20})
	defer e.Close()
	parent, specs := routedMemtableParent(t, e)
	ingested, istats, err := e.CreateChildren(parent, specs, ChildExcise, true)
	if err != nil {
		t.Fatal(err)
	}
	e.historyReplay = applyLogReplay
	other := []ChildSpec{{Shard: 5, Span: specs[0].Span}, {Shard: 6, Span: specs[1].Span}}
	applied, _, err := e.CreateChildren(parent, other, ChildExcise, true)
	e.historyReplay = nil
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range ingested {
		if istats[i].HistoryTable.Keys == 0 {
			t.Fatalf("child %d took no history table: the test tests nothing", c.ID())
		}
		if n := istats[i].HistoryTable.Overlap; n != 0 {
			t.Errorf("child %d: %d history tables overlapped its memtable (the `_id` tombstones of its trim), want none", c.ID(), n)
		}
		if n := c.FlushesEnded(); n != 0 {
			t.Errorf("child %d flushed %d times while it was made, want never", c.ID(), n)
		}
		got, want := storeKeys(t, c), storeKeys(t, applied[i])
		if !slices.Equal(got, want) {
			t.Errorf("child %d's store holds %d keys, ApplyLog's child's %d, or they differ", c.ID(), len(got), len(want))
		}
	}
}

// A failure of any operation on a child's history table (its directory's
// creation, the table's create, writes, sync, close, the ingest's reads
// and links of it, its removal) fails CreateChildren and leaves nothing of
// the failed child behind: no directory, no registered shard, no table;
// the parent is untouched and the next split of it, still from its
// flushed state, makes children that hold its documents. The test fails,
// in turn, the k-th such operation for k = 1, 2, … until a split runs
// through without reaching the k-th.
func TestAFailureOnTheHistoryTableLeavesNoChildBehind(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) {
			inj := &countingFail{match: func(op errorfs.Op) bool {
				return strings.Contains(op.Path, "/"+historyTableDir)
			}}
			fs := errorfs.Wrap(vfs.NewMem(), inj)
			e := openTestEngine(t, fs, LayoutPerShard)
			defer e.Close()
			parent, specs, _ := memtableParent(t, e)
			before := docsOf(t, parent)
			made := func(children []*Shard, stats []ChildStats, k int64) {
				t.Helper()
				for i, c := range children {
					if !stats[i].Unflushed || stats[i].HistoryTable.Keys == 0 {
						t.Fatalf("k=%d: child %d: unflushed %v, history table of %d keys: want one", k, c.ID(), stats[i].Unflushed, stats[i].HistoryTable.Keys)
					}
					if _, _, err := e.CatchUp(parent, []*Shard{c}, stats[i].Seq); err != nil {
						t.Fatal(err)
					}
					sameDocs(t, parent, c, specs[i].Span)
					if left := treeHas(t, fs, e.ShardDir(c.ID()), historyTableDir); len(left) > 0 {
						t.Fatalf("k=%d: child %d was made and keeps %v", k, c.ID(), left)
					}
				}
			}
			destroy := func(children []*Shard) {
				t.Helper()
				for _, c := range children {
					if c != nil {
						if err := e.DestroyShard(c.ID()); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			failures := 0
			for k := int64(1); k <= 500; k++ {
				inj.k = k
				inj.seen.Store(0)
				inj.hit.Store(false)
				inj.armed.Store(true)
				children, stats, err := e.CreateChildren(parent, specs, ChildExcise, concurrent)
				inj.armed.Store(false)
				if err == nil {
					if inj.hit.Load() {
						t.Logf("k=%d: injected, the split succeeded", k)
					}
					made(children, stats, k)
					destroy(children)
				} else {
					if !errors.Is(err, errInjected) {
						t.Fatalf("k=%d: CreateChildren = %v, want the injected error", k, err)
					}
					failures++
					for i, c := range children {
						if c != nil {
							continue
						}
						if _, statErr := fs.Stat(e.ShardDir(specs[i].Shard)); statErr == nil {
							t.Fatalf("k=%d: child %d failed (%v) and left its directory behind", k, specs[i].Shard, err)
						}
						if _, ok := e.Shard(specs[i].Shard); ok {
							t.Fatalf("k=%d: child %d failed (%v) and is still registered", k, specs[i].Shard, err)
						}
					}
					destroy(children)
					if left := treeHas(t, fs, "/data", historyTableDir); len(left) > 0 {
						t.Fatalf("k=%d: the split failed (%v) and left %v behind", k, err, left)
					}
					if diff := diffDocs(before, docsOf(t, parent)); diff != "" {
						t.Fatalf("k=%d: the parent changed:\n%s", k, diff)
					}
					children, stats, err = e.CreateChildren(parent, specs, ChildExcise, concurrent)
					if err != nil {
						t.Fatalf("k=%d: CreateChildren after a failed one: %v", k, err)
					}
					made(children, stats, k)
					destroy(children)
				}
				if !inj.hit.Load() {
					t.Logf("%d operations on the history tables counted; %d injected failures failed the split", inj.seen.Load(), failures)
					if failures == 0 {
						t.Fatal("no injected failure failed a split: the test tests nothing")
					}
					return
				}
			}
			t.Fatal("the split never ran through without reaching the injected operation")
		})
	}
}

// A child's history table being written while the engine closes: the
// ingest runs inside the child's store gate, so the close waits for it
// and does not close the store under it; the creation then fails and the
// child's directory is removed, as at every other step of a child's
// creation (childCreationRacingClose).
func TestAChildsHistoryIngestRacingCloseFailsCleanly(t *testing.T) {
	fs := &createHookFS{FS: vfs.NewMem()}
	childCreationRacingClose(t, fs, "a child's history ingest", func(childDir string, block func()) {
		fs.onCreate = func(name string) {
			if strings.HasPrefix(name, childDir+"/"+historyTableDir+"/") {
				block() // the child's history table is being written
			}
		}
	})
}

// A power loss at any operation on a child's history table (the crashed
// copy keeps only what was synced: the table half written, written but not
// linked, linked but the ingest not recorded, its directory not removed)
// leaves a data directory that serves: the engine opens, the parent holds
// every write it acknowledged, the half-made child's store opens as it is
// (a table left in history-ingest/ is not Pebble's) and DestroyShard
// removes it whole, and a split with the same ids then succeeds.
func TestAPowerLossDuringAChildsHistoryIngestLeavesADirectoryThatServes(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var armed atomic.Bool
	var clones []*vfs.MemFS
	var ops []string
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && strings.Contains(op.Path, "/"+historyTableDir) {
			clones = append(clones, mem.CrashClone(vfs.CrashCloneCfg{}))
			ops = append(ops, fmt.Sprintf("%v %s", op.Kind, op.Path))
		}
		return nil
	}))
	e := openTestEngine(t, fs, LayoutPerShard)
	parent, specs, _ := memtableParent(t, e)
	if err := parent.Sync(); err != nil {
		t.Fatal(err)
	}
	want := docsOf(t, parent)
	armed.Store(true)
	_, stats, err := e.CreateChildren(parent, specs, ChildExcise, false)
	armed.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range stats {
		if st.HistoryTable.Keys == 0 {
			t.Fatalf("child %d took no history table: the test tests nothing", specs[i].Shard)
		}
	}
	clones = append(clones, mem.CrashClone(vfs.CrashCloneCfg{}))
	ops = append(ops, "after CreateChildren")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	half := 0
	for i, c := range clones {
		func() {
			e := openEngine(t, Options{FS: c, CacheBytes: 8 << 20})
			defer e.Close()
			p := openShard(t, e, 2, 2, rootSpan(2))
			if diff := diffDocs(want, docsOf(t, p)); diff != "" {
				t.Fatalf("crash %d (at %s): the parent lost writes:\n%s", i, ops[i], diff)
			}
			for _, sp := range specs {
				if _, err := c.Stat(e.ShardDir(sp.Shard)); err != nil {
					continue
				}
				half++
				if _, err := e.OpenShard(sp.Shard, 2, []routing.Span{sp.Span}); err != nil {
					t.Errorf("crash %d (at %s): the half-made child %d does not open: %v", i, ops[i], sp.Shard, err)
				}
				if err := e.DestroyShard(sp.Shard); err != nil {
					t.Fatalf("crash %d (at %s): destroy child %d: %v", i, ops[i], sp.Shard, err)
				}
				if _, err := c.Stat(e.ShardDir(sp.Shard)); err == nil {
					t.Fatalf("crash %d (at %s): child %d's directory outlives DestroyShard", i, ops[i], sp.Shard)
				}
			}
			p.HoldLog()
			children, stats, err := e.CreateChildren(p, specs, ChildExcise, false)
			if err != nil {
				t.Fatalf("crash %d (at %s): a split after the crash: %v", i, ops[i], err)
			}
			for j, ch := range children {
				if _, _, err := e.CatchUp(p, []*Shard{ch}, stats[j].Seq); err != nil {
					t.Fatal(err)
				}
				sameDocs(t, p, ch, specs[j].Span)
			}
		}()
	}
	t.Logf("%d crash points, %d half-made children opened", len(clones), half)
	if half == 0 {
		t.Error("no crash left a child's directory: the test tests nothing")
	}
}

// A keep-all child (it keeps its parent's foreign documents and their
// `_id` entries until its cleanup) given its parent's history as an
// ingested table holds, key by key, what ApplyLog's replay leaves, and the
// table overlaps nothing in its memtable (the foreign-cleanup marker is a
// metadata key).
func TestAKeepAllChildsHistoryTableHoldsWhatApplyLogWrites(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent, specs := routedMemtableParent(t, e)
	ingested, istats, err := e.CreateChildren(parent, specs, ChildKeepAll, true)
	if err != nil {
		t.Fatal(err)
	}
	e.historyReplay = applyLogReplay
	other := []ChildSpec{{Shard: 5, Span: specs[0].Span}, {Shard: 6, Span: specs[1].Span}}
	applied, astats, err := e.CreateChildren(parent, other, ChildKeepAll, true)
	e.historyReplay = nil
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range ingested {
		a := applied[i]
		if istats[i].HistoryTable.Keys == 0 || istats[i].History != astats[i].History {
			t.Fatalf("child %d: a table of %d keys for %d operations, ApplyLog's child took %d", c.ID(), istats[i].HistoryTable.Keys, istats[i].History, astats[i].History)
		}
		if n := istats[i].HistoryTable.Overlap; n != 0 {
			t.Errorf("child %d: %d history tables overlapped its memtable, want none", c.ID(), n)
		}
		if c.Seq() != a.Seq() {
			t.Errorf("child %d's sequence number is %d, ApplyLog's child's %d", c.ID(), c.Seq(), a.Seq())
		}
		got, want := storeKeys(t, c), storeKeys(t, a)
		// The foreign-cleanup marker names its shard: spelled as shard 0's.
		for _, kvs := range [][][2]string{got, want} {
			for j, kv := range kvs {
				if k := []byte(kv[0]); len(k) == 6 && k[0] == tagMeta && k[1] != metaSeq {
					kvs[j][0] = string(metaKey(k[1], 0))
				}
			}
		}
		if len(got) != len(want) {
			t.Errorf("child %d's store holds %d keys, ApplyLog's child's %d", c.ID(), len(got), len(want))
		}
		for j := range min(len(got), len(want)) {
			if got[j] != want[j] {
				t.Errorf("child %d's key %d is %x = %x, ApplyLog's child's %x = %x", c.ID(), j, got[j][0], got[j][1], want[j][0], want[j][1])
				break
			}
		}
	}
}

// A history of deletes alone, of the documents at the first and last
// routing keys of a child's span, gives that child a table of tombstones
// that holds what ApplyLog's replay leaves; its sibling, with nothing in
// the history, takes no table and is what ApplyLog's sibling is.
func TestAHistoryOfDeletesAtTheSpanBoundsGivesTheChildOnlyTombstones(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent := openShard(t, e, 2, 2, rootSpan(2))
	root := rootSpan(2)
	mid := root.Start + (root.End-root.Start)/2
	bounds := map[routing.Key]bool{routing.Key(root.Start): true, routing.Key(mid - 1): true}
	var deleted []string
	for _, id := range idsInRoot(2, 1200) {
		op := opFor(id, OpIndex, "flushed "+id)
		if _, err := parent.Write([]Op{op}, nil); err != nil {
			t.Fatal(err)
		}
		if bounds[op.Key] {
			deleted = append(deleted, id)
		}
	}
	if len(deleted) < 2 {
		t.Fatalf("%d documents at the span's bounds: the test tests nothing", len(deleted))
	}
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, id := range deleted {
		if _, err := parent.Write([]Op{opFor(id, OpDelete, "")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	parent.HoldLog()
	specs := []ChildSpec{{Shard: 3, Span: routing.Span{Start: root.Start, End: mid}}, {Shard: 4, Span: routing.Span{Start: mid, End: root.End}}}
	ingested, istats, err := e.CreateChildren(parent, specs, ChildExcise, true)
	if err != nil {
		t.Fatal(err)
	}
	e.historyReplay = applyLogReplay
	applied, astats, err := e.CreateChildren(parent, []ChildSpec{{Shard: 5, Span: specs[0].Span}, {Shard: 6, Span: specs[1].Span}}, ChildExcise, true)
	e.historyReplay = nil
	if err != nil {
		t.Fatal(err)
	}
	if istats[0].History != len(deleted) || istats[0].HistoryTable.Keys != len(deleted) {
		t.Errorf("child 3 took %d deletes as a table of %d keys, want %d and %d", istats[0].History, istats[0].HistoryTable.Keys, len(deleted), len(deleted))
	}
	if istats[1].History != 0 || istats[1].HistoryTable.Keys != 0 {
		t.Errorf("child 4 took %d operations as a table of %d keys, want none", istats[1].History, istats[1].HistoryTable.Keys)
	}
	for i, c := range ingested {
		a := applied[i]
		if istats[i].Seq != astats[i].Seq || c.Seq() != a.Seq() {
			t.Errorf("child %d reflects %d at sequence number %d, ApplyLog's child %d at %d", c.ID(), istats[i].Seq, c.Seq(), astats[i].Seq, a.Seq())
		}
		if got, want := storeKeys(t, c), storeKeys(t, a); !slices.Equal(got, want) {
			t.Errorf("child %d's store holds %d keys, ApplyLog's child's %d, or they differ", c.ID(), len(got), len(want))
		}
		if _, _, err := e.CatchUp(parent, []*Shard{c}, istats[i].Seq); err != nil {
			t.Fatal(err)
		}
		sameDocs(t, parent, c, specs[i].Span)
	}
}

// A scan-delete child's creation flushes the memtable its trim filled (its
// history table overlapped it), but not the one holding the batch of its
// sequence number after the table: its history still has the table's gap,
// so a split of it before its next flush flushes it first, and its
// children hold every document it holds.
func TestAScanDeleteChildSplitBeforeItsNextFlushIsFlushedFirst(t *testing.T) {
	e := openEngine(t, Options{FS: vfs.NewMem(), IDIndex: IDIndexScanDelete, Logger: zaptest.NewLogger(t), CacheBytes: 8 << 20})
	defer e.Close()
	parent, specs := routedMemtableParent(t, e)
	children, stats, err := e.CreateChildren(parent, specs, ChildExcise, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range children {
		if stats[i].HistoryTable.Keys == 0 {
			t.Fatalf("child %d took no history table: the test tests nothing", c.ID())
		}
		if _, _, err := e.CatchUp(parent, []*Shard{c}, stats[i].Seq); err != nil {
			t.Fatal(err)
		}
		span := specs[i].Span
		mid := span.Start + (span.End-span.Start)/2
		grand := []ChildSpec{{Shard: routing.ShardID(10 + 2*i), Span: routing.Span{Start: span.Start, End: mid}}, {Shard: routing.ShardID(11 + 2*i), Span: routing.Span{Start: mid, End: span.End}}}
		c.HoldLog()
		gc, gs, err := e.CreateChildren(c, grand, ChildExcise, true)
		if err != nil {
			t.Fatal(err)
		}
		for j, g := range gc {
			if gs[j].Unflushed {
				t.Errorf("grandchild %d made from child %d's flushed state and history, which misses its history table's gap", g.ID(), c.ID())
			}
			if _, _, err := e.CatchUp(c, []*Shard{g}, gs[j].Seq); err != nil {
				t.Fatal(err)
			}
			sameDocs(t, c, g, grand[j].Span)
			if rep, err := g.CheckIDIndex(grand[j].Span); err != nil || !rep.OK() {
				t.Errorf("grandchild %d's `_id` index: %+v, %v", g.ID(), rep, err)
			}
		}
		_ = c.ReleaseLog()
	}
}
