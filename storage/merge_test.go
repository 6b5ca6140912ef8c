package storage

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
)

// TestMergeTarget: a merge target made from two live siblings holds
// exactly their documents as of each one's S_i, and after each source's log
// is replayed from its own S_i it holds exactly the union of their
// documents; writes the catch-up must replay are ones made after the
// target was created. The larger sibling is the one checkpointed.
func TestMergeTarget(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout Layout) {
		e := openTestEngine(t, vfs.NewMem(), layout)
		defer e.Close()
		lo, hi := routing.Span{Start: 256, End: 320}, routing.Span{Start: 320, End: 384}
		a, _ := e.OpenShard(9, 2, []routing.Span{lo})
		b, _ := e.OpenShard(10, 2, []routing.Span{hi})
		byShard := map[*Shard][]Op{}
		for i, id := range idsInRoot(2, 1200) {
			op := opFor(id, OpIndex, fmt.Sprintf("v1-%d", i))
			if lo.Contains(op.Key) {
				byShard[a] = append(byShard[a], op)
			} else if len(byShard[b]) < 100 { // b is the smaller one
				byShard[b] = append(byShard[b], op)
			}
		}
		for s, ops := range byShard {
			if _, err := s.Write(ops, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []*Shard{a, b} {
			if err := s.st.db.Flush(); err != nil { // sizes are estimated from sstables
				t.Fatal(err)
			}
		}
		a.HoldLog()
		b.HoldLog()
		target, stats, err := e.CreateMergeTarget([]*Shard{b, a}, 11, routing.Span{Start: 256, End: 384})
		if err != nil {
			t.Fatal(err)
		}
		if layout == LayoutPerShard && (stats.Largest != a.ID() || stats.Docs != len(byShard[b])) {
			t.Errorf("largest %d, %d docs copied; want largest %d and %d copied", stats.Largest, stats.Docs, a.ID(), len(byShard[b]))
		}
		if stats.Seqs[0] != b.Seq() || stats.Seqs[1] != a.Seq() {
			t.Errorf("S = %v, want [%d %d]", stats.Seqs, b.Seq(), a.Seq())
		}
		// Writes after the target: updates and deletes on both sources.
		for s, ops := range byShard {
			var more []Op
			for i, op := range ops[:50] {
				op.Source = []byte(fmt.Sprintf("v2-%d", i))
				if i%5 == 0 {
					op.Kind, op.Source = OpDelete, nil
				}
				more = append(more, op)
			}
			if _, err := s.Write(more, nil); err != nil {
				t.Fatal(err)
			}
		}
		if layout == LayoutPerShard {
			if got := scanState(t, target); len(got) != len(byShard[a])+len(byShard[b]) {
				t.Errorf("target holds %d docs before catch-up, want %d", len(got), len(byShard[a])+len(byShard[b]))
			}
		}
		for i, s := range []*Shard{b, a} {
			if _, _, err := e.CatchUp(s, []*Shard{target}, stats.Seqs[i]); err != nil {
				t.Fatal(err)
			}
		}
		want := scanState(t, a)
		maps.Copy(want, scanState(t, b))
		if got := scanState(t, target); !equalState(got, want) {
			t.Errorf("target after catch-up: %d docs, sources %d", len(got), len(want))
		}
	})
}

// TestMergeTargetRefusesMixedKeyspaces: sources in different keyspaces
// cannot be one shard.
func TestMergeTargetRefusesMixedKeyspaces(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	a, _ := e.OpenShard(1, 1, []routing.Span{rootSpan(1)})
	b, _ := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if _, _, err := e.CreateMergeTarget([]*Shard{a, b}, 9, routing.Span{Start: 128, End: 384}); err == nil {
		t.Fatal("CreateMergeTarget across keyspaces succeeded")
	}
}

// docsOf returns every document a shard serves, in key order.
func docsOf(t *testing.T, s *Shard) []Doc {
	t.Helper()
	var docs []Doc
	if err := s.Scan(func(d Doc) error {
		d.Source = slices.Clone(d.Source)
		docs = append(docs, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return docs
}

// diffDocs is cmp.Diff of two document lists, with a fast path for equal
// ones (cmp.Diff of a thousand documents takes a good part of a second).
func diffDocs(want, got []Doc) string {
	if slices.EqualFunc(want, got, func(a, b Doc) bool {
		return a.Root == b.Root && a.Key == b.Key && a.ID == b.ID && a.Routing == b.Routing && a.Seq == b.Seq && string(a.Source) == string(b.Source)
	}) {
		return ""
	}
	return cmp.Diff(want, got)
}

// treeHas reports the paths under dir whose name contains part.
func treeHas(t *testing.T, fs vfs.FS, dir, part string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		if strings.Contains(n, part) {
			found = append(found, p)
		}
		if fi, err := fs.Stat(p); err == nil && fi.IsDir() {
			found = append(found, treeHas(t, fs, p, part)...)
		}
	}
	return found
}

// mergeSources opens three adjacent sources of root 2 and fills them: the
// middle one largest and flushed; the outer ones with some documents in
// tables and the rest (updates and deletes included) in their memtables,
// with routing values. It returns them in key order.
func mergeSources(t *testing.T, e *Engine) []*Shard {
	t.Helper()
	spans := []routing.Span{{Start: 256, End: 288}, {Start: 288, End: 352}, {Start: 352, End: 384}}
	var shards []*Shard
	for i, sp := range spans {
		s := openShard(t, e, routing.ShardID(20+i), 2, sp)
		shards = append(shards, s)
	}
	byShard := make([][]Op, len(shards))
	for i, id := range idsInRoot(2, 1500) {
		op := opFor(id, OpIndex, strings.Repeat(fmt.Sprintf("v1-%d.", i), 20))
		if i%3 == 0 {
			op.Routing = fmt.Sprintf("tenant-%d", i%7)
		}
		for j, sp := range spans {
			if sp.Contains(op.Key) {
				byShard[j] = append(byShard[j], op)
			}
		}
	}
	for i, s := range shards {
		ops := byShard[i]
		half := len(ops) / 2
		if _, err := s.Write(ops[:half], nil); err != nil {
			t.Fatal(err)
		}
		if err := s.st.db.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(ops[half:], nil); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := s.st.db.Flush(); err != nil { // the largest by its tables
				t.Fatal(err)
			}
			continue
		}
		var more []Op
		for j, op := range ops[:half] {
			switch j % 4 {
			case 0:
				op.Kind, op.Source = OpDelete, nil
			case 1:
				op.Source = []byte(fmt.Sprintf("v2-%d", j))
			default:
				continue
			}
			more = append(more, op)
		}
		if _, err := s.Write(more, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range shards {
		s.HoldLog()
	}
	return shards
}

// TestMergeTargetIngestsTheSourcesDocuments: in the per-shard layout the
// copied sources' documents reach the target as ingested tables (several,
// cut small here; none in L0, none through the WAL), and the target holds
// exactly the sources' documents — ids, routing values, sources and the
// sequence numbers of the writes that stored them — whatever the order the
// sources are given in, and still does after a crash that keeps only what
// was synced. No table directory is left behind.
func TestMergeTargetIngestsTheSourcesDocuments(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := openTestEngine(t, mem, LayoutPerShard)
	defer e.Close()
	e.mergeCut = 8 << 10
	src := mergeSources(t, e)
	var want []Doc
	for _, s := range src {
		want = append(want, docsOf(t, s)...)
	}
	copied := len(docsOf(t, src[0])) + len(docsOf(t, src[2]))
	order := []*Shard{src[2], src[0], src[1]}
	span := routing.Span{Start: 256, End: 384}
	written := e.BytesWritten()
	target, stats, err := e.CreateMergeTarget(order, 11, span)
	if err != nil {
		t.Fatal(err)
	}
	written = e.BytesWritten() - written
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})

	if stats.Largest != src[1].ID() || stats.Docs != copied {
		t.Errorf("largest %d, %d documents copied; want %d, %d", stats.Largest, stats.Docs, src[1].ID(), copied)
	}
	if want := []uint64{order[0].Seq(), order[1].Seq(), order[2].Seq()}; !slices.Equal(stats.Seqs, want) {
		t.Errorf("S = %v, want %v", stats.Seqs, want)
	}
	if diff := diffDocs(want, docsOf(t, target)); diff != "" {
		t.Errorf("target documents (-sources +target):\n%s", diff)
	}
	m := target.st.db.Metrics()
	var tables, bytes uint64
	for _, l := range m.Levels {
		tables, bytes = tables+l.TablesIngested, bytes+l.TableBytesIngested
	}
	if stats.Tables < 4 || tables != uint64(stats.Tables) || m.Levels[0].TablesIngested != 0 {
		t.Errorf("%d tables built, %d ingested (%d into L0); want at least 4 (two sources, cut at 8 KiB), all ingested, none into L0",
			stats.Tables, tables, m.Levels[0].TablesIngested)
	}
	if bytes == 0 || int64(bytes) > stats.Copied || written < bytes {
		t.Errorf("%d bytes ingested, %d reported copied, the engine counts %d written", bytes, stats.Copied, written)
	}
	if walBytes := m.WAL.BytesIn; walBytes > 4<<10 {
		t.Errorf("the target's WAL took %d bytes: documents went through the write path", walBytes)
	}
	if left := treeHas(t, mem, "/data", mergeTableDir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}

	// Everything the target holds is durable when CreateMergeTarget returns.
	after := openTestEngine(t, crashed, LayoutPerShard)
	defer after.Close()
	reopened := openShard(t, after, 11, 2, span)
	if diff := diffDocs(want, docsOf(t, reopened)); diff != "" {
		t.Errorf("target documents after a crash (-sources +target):\n%s", diff)
	}
	if reopened.Seq() != src[1].Seq() {
		t.Errorf("target's sequence number after a crash %d, want the largest source's %d", reopened.Seq(), src[1].Seq())
	}
	if left := treeHas(t, crashed, "/data", mergeTableDir); len(left) > 0 {
		t.Errorf("left behind after a crash: %v", left)
	}
}

// A failure while the copied side is built into tables or ingested (any
// operation on the tables: create, write, sync, close, the ingest's reads
// and links of them, their directory's removal) fails CreateMergeTarget
// and leaves nothing behind: no target directory, no table, no registered
// shard, the sources untouched; the next CreateMergeTarget with the same
// id succeeds. The test fails, in turn, the k-th such operation for k = 1,
// 2, … until a creation runs through without reaching the k-th.
func TestCreateMergeTargetCleansUpAfterAFailure(t *testing.T) {
	const target = 11
	targetDir := "/data/shard-11"
	inj := &countingFail{match: func(op errorfs.Op) bool {
		return strings.Contains(op.Path, "/"+mergeTableDir)
	}}
	fs := errorfs.Wrap(vfs.NewMem(), inj)
	e := openTestEngine(t, fs, LayoutPerShard)
	defer e.Close()
	e.mergeCut = 16 << 10
	src := mergeSources(t, e)
	var want []Doc
	before := map[*Shard][]Doc{}
	for _, s := range src {
		before[s] = docsOf(t, s)
		want = append(want, before[s]...)
	}
	span := routing.Span{Start: 256, End: 384}
	check := func(k int64, c *Shard) {
		t.Helper()
		if diff := diffDocs(want, docsOf(t, c)); diff != "" {
			t.Fatalf("k=%d: target documents (-sources +target):\n%s", k, diff)
		}
		if err := e.DestroyShard(target); err != nil {
			t.Fatal(err)
		}
	}
	failures := 0
	for k := int64(1); k <= 2000; k++ {
		inj.k = k
		inj.seen.Store(0)
		inj.hit.Store(false)
		inj.armed.Store(true)
		c, _, err := e.CreateMergeTarget(src, target, span)
		inj.armed.Store(false)
		if err == nil {
			if inj.hit.Load() {
				t.Logf("k=%d: injected, creation succeeded", k) // e.g. a failed link falls back to a copy
			}
			check(k, c)
		} else {
			if !errors.Is(err, errInjected) {
				t.Fatalf("k=%d: CreateMergeTarget = %v, want the injected error", k, err)
			}
			failures++
			if _, statErr := fs.Stat(targetDir); statErr == nil {
				t.Fatalf("k=%d: CreateMergeTarget failed (%v) and left %s behind", k, err, targetDir)
			}
			if left := treeHas(t, fs, "/data", mergeTableDir); len(left) > 0 {
				t.Fatalf("k=%d: CreateMergeTarget failed (%v) and left %v behind", k, err, left)
			}
			if _, ok := e.Shard(target); ok {
				t.Fatalf("k=%d: CreateMergeTarget failed (%v) and left shard %d registered", k, err, target)
			}
			for _, s := range src {
				if diff := diffDocs(before[s], docsOf(t, s)); diff != "" {
					t.Fatalf("k=%d: source %d changed:\n%s", k, s.ID(), diff)
				}
			}
			if c, _, err = e.CreateMergeTarget(src, target, span); err != nil {
				t.Fatalf("k=%d: CreateMergeTarget after a failed one: %v", k, err)
			}
			check(k, c)
		}
		if !inj.hit.Load() {
			t.Logf("%d operations on the tables counted; %d injected failures failed the creation", inj.seen.Load(), failures)
			if failures == 0 {
				t.Fatal("no injected failure failed a creation: the test tests nothing")
			}
			return
		}
	}
	t.Fatal("the creation never ran through without reaching the injected operation")
}

// createHookFS calls onCreate (if set) before every file it creates.
type createHookFS struct {
	vfs.FS
	onCreate func(name string)
}

func (f *createHookFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if f.onCreate != nil {
		f.onCreate(name)
	}
	return f.FS.Create(name, category)
}

// twoMergeSources opens two adjacent sources of root 2 on e, the first the
// larger (so the second is copied by buildSource), flushed and holding
// their logs.
func twoMergeSources(t *testing.T, e *Engine) (a, b *Shard) {
	t.Helper()
	lo, hi := routing.Span{Start: 256, End: 320}, routing.Span{Start: 320, End: 384}
	a, _ = e.OpenShard(9, 2, []routing.Span{lo})
	b, _ = e.OpenShard(10, 2, []routing.Span{hi})
	nb := 0
	for i, id := range idsInRoot(2, 600) {
		op := opFor(id, OpIndex, fmt.Sprintf("v-%d", i))
		s := a
		if hi.Contains(op.Key) {
			if nb++; nb > 50 {
				continue
			}
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
	return a, b
}

// A merge target's copied side is read from a snapshot of each source
// (buildSource), registered with the source's store so that an engine
// closing meanwhile does not close the source under it. Close must return
// nil, and the merge must fail with ErrShardClosed or succeed, without a
// panic.
func TestMergeCopyRacingCloseFinishesOrStops(t *testing.T) {
	fs := &createHookFS{FS: vfs.NewMem()}
	e := openEngine(t, Options{FS: fs})
	a, b := twoMergeSources(t, e)
	closeErr, opErr, p := closeDuring(t, e, func(block func()) error {
		fs.onCreate = func(name string) {
			if strings.Contains(name, mergeTableDir) {
				block() // buildSource is writing a table, its snapshot and iterator open
			}
		}
		_, _, err := e.CreateMergeTarget([]*Shard{a, b}, 11, routing.Span{Start: 256, End: 384})
		return err
	})
	if p != nil {
		t.Fatalf("a merge target's copy racing Close panicked: %v", p)
	}
	if closeErr != nil {
		t.Errorf("Close while a merge copies a source = %v, want nil", closeErr)
	}
	if opErr != nil && !errors.Is(opErr, ErrShardClosed) {
		t.Errorf("CreateMergeTarget racing Close = %v, want nil or ErrShardClosed", opErr)
	}
}

// mergeShard opens shard id of keyspace 7 owning sp, with n
// documents per routing key (ids "a", "b", …), flushed and holding its log.
func mergeShard(t *testing.T, e *Engine, id routing.ShardID, sp routing.Span, n int) *Shard {
	t.Helper()
	s := openShard(t, e, id, 7, sp)
	for k := sp.Start; k < sp.End; k++ {
		for j := range n {
			if _, err := s.Write([]Op{{Kind: OpIndex, Root: 7, Key: routing.Key(k), ID: string(rune('a' + j)), Source: make([]byte, 100)}}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.HoldLog()
	return s
}

// A merge target takes its sources' documents by checkpoint and ingest,
// past the span check every write passes (INV-6), so it must refuse a
// span that does not hold a source's span, and sources that overlap: made
// anyway, it would hold documents it does not own (no marker excuses them,
// INV-10) or two sources' versions of one document, one of them silently
// dropped.
func TestMergeTargetRefusesSourcesItCannotHold(t *testing.T) {
	for _, c := range []struct {
		name    string
		sources []routing.Span
		target  routing.Span
	}{
		{"a source outside the target", []routing.Span{{Start: 0, End: 10}, {Start: 10, End: 20}}, routing.Span{Start: 0, End: 15}},
		{"the largest overlapping another", []routing.Span{{Start: 0, End: 10}, {Start: 5, End: 15}}, routing.Span{Start: 0, End: 15}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
			defer e.Close()
			var sources []*Shard
			for i, sp := range c.sources {
				n := 1
				if i == 0 {
					n = 5 // the largest: its checkpoint is the target's base
				}
				sources = append(sources, mergeShard(t, e, routing.ShardID(10+i), sp, n))
			}
			tg, _, err := e.CreateMergeTarget(sources, 99, c.target)
			if err == nil {
				n, _ := tg.ForeignDocs()
				t.Fatalf("CreateMergeTarget(%v into %s) made a target (%d documents outside its span), want an error", c.sources, c.target, n)
			}
			if _, statErr := e.opts.FS.Stat(e.ShardDir(99)); statErr == nil {
				t.Errorf("the refused target's directory is left")
			}
		})
	}
}
