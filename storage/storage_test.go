package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/routing"
)

// testIndex is an 8-shard index in partition mode: root r owns partitions
// [128r, 128r+128).
var testSettings = routing.Settings{Shards: 8, RoutingShards: 1024, PartitionSize: 1}

func rootSpan(r routing.ShardID) routing.Span {
	return routing.Span{Start: uint64(r) * 128, End: uint64(r+1) * 128}
}

// opFor builds an index op for id in root 2 (or whatever root it routes to).
func opFor(id string, kind OpKind, source string) Op {
	p := testSettings.Place(id, "")
	return Op{Kind: kind, Root: p.Root, Key: routing.Key(p.Partition), ID: id, Source: []byte(source)}
}

// idsInRoot returns n ids that route to root r.
func idsInRoot(r routing.ShardID, n int) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("doc-%d", i)
		if testSettings.Place(id, "").Root == r {
			ids = append(ids, id)
		}
	}
	return ids
}

// openEngine opens an engine on opts, failing t if it cannot. Unset fields
// take the tests' defaults: Dir /data, a new in-memory FS, a 1 MiB cache.
// The caller closes it: many tests close it mid-test on purpose.
func openEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = "/data"
	}
	if opts.FS == nil {
		opts.FS = vfs.NewMem()
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 1 << 20
	}
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// openTestEngine opens an engine of layout on fs that logs to t.
func openTestEngine(t *testing.T, fs vfs.FS, layout Layout) *Engine {
	t.Helper()
	return openEngine(t, Options{FS: fs, Layout: layout, Logger: zaptest.NewLogger(t), CacheBytes: 8 << 20})
}

// openShard opens shard id of root owning spans on e, failing t if it
// cannot.
func openShard(t testing.TB, e *Engine, id, root routing.ShardID, spans ...routing.Span) *Shard {
	t.Helper()
	s, err := e.OpenShard(id, root, spans)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func forLayouts(t *testing.T, fn func(t *testing.T, layout Layout)) {
	for _, l := range []Layout{LayoutPerShard, LayoutShared} {
		t.Run("layout="+l.String(), func(t *testing.T) { fn(t, l) })
	}
}

func TestRoundTripEveryOperation(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout Layout) {
		e := openTestEngine(t, vfs.NewMem(), layout)
		defer e.Close()
		s := openShard(t, e, 2, 2, rootSpan(2))
		ids := idsInRoot(2, 20)
		for i, id := range ids {
			op := opFor(id, OpIndex, "v1-"+id)
			op.Routing = ""
			if seq, err := s.Write([]Op{op}, nil); err != nil || seq != uint64(i+1) {
				t.Fatalf("Write(%s) = %d, %v; want seq %d", id, seq, err, i+1)
			}
		}
		// update, delete, and a batch.
		if _, err := s.Write([]Op{opFor(ids[0], OpIndex, "v2"), opFor(ids[1], OpDelete, "")}, nil); err != nil {
			t.Fatal(err)
		}
		d, ok, err := s.Get(2, opFor(ids[0], 0, "").Key, ids[0])
		if err != nil || !ok || string(d.Source) != "v2" || d.Seq != 21 {
			t.Errorf("Get(updated) = %+v, %v, %v; want v2 at seq 21", d, ok, err)
		}
		if _, ok, _ := s.Get(2, opFor(ids[1], 0, "").Key, ids[1]); ok {
			t.Errorf("Get(deleted) found the document")
		}
		var scanned []string
		if err := s.Scan(func(d Doc) error { scanned = append(scanned, d.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(scanned) != 19 {
			t.Errorf("Scan found %d documents, want 19", len(scanned))
		}
		// A key of another root is refused, with nothing applied.
		foreign := opFor(idsInRoot(3, 1)[0], OpIndex, "x")
		_, err = s.Write([]Op{opFor(ids[2], OpIndex, "x"), foreign}, nil)
		var oos *OutOfSpanError
		if !errors.As(err, &oos) || oos.Root != 3 {
			t.Fatalf("Write(foreign key) = %v, want *OutOfSpanError for root 3", err)
		}
		if d, _, _ := s.Get(2, opFor(ids[2], 0, "").Key, ids[2]); string(d.Source) != "v1-"+ids[2] {
			t.Errorf("a refused batch applied part of itself: %q", d.Source)
		}
		// A guard error aborts the write.
		guardErr := errors.New("fenced")
		if _, err := s.Write([]Op{opFor(ids[2], OpIndex, "x")}, func() error { return guardErr }); !errors.Is(err, guardErr) {
			t.Errorf("Write with failing guard = %v, want %v", err, guardErr)
		}
	})
}

func TestSeqSurvivesReopen(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout Layout) {
		fs := vfs.NewMem()
		e := openTestEngine(t, fs, layout)
		s, _ := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
		for _, id := range idsInRoot(2, 7) {
			if _, err := s.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = openTestEngine(t, fs, layout)
		defer e.Close()
		s, _ = e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
		if got := s.Seq(); got != 7 {
			t.Fatalf("Seq after reopen = %d, want 7", got)
		}
		if seq, _ := s.Write([]Op{opFor(idsInRoot(2, 1)[0], OpDelete, "")}, nil); seq != 8 {
			t.Errorf("next seq after reopen = %d, want 8", seq)
		}
	})
}

// state is a model of a span's documents: id -> source.
type state map[string]string

func scanState(t *testing.T, s *Shard) state {
	t.Helper()
	st := state{}
	if err := s.Scan(func(d Doc) error { st[d.ID] = string(d.Source); return nil }); err != nil {
		t.Fatal(err)
	}
	return st
}

type appliedOp struct {
	seq uint64
	op  Op
}

// TestChildUnderConcurrentWrites: a child made from a parent under
// concurrent writes holds exactly its span's documents as of the
// checkpoint's sequence number S, and after replaying the log it holds
// exactly the parent's documents of that span.
func TestChildUnderConcurrentWrites(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout Layout) {
		e := openTestEngine(t, vfs.NewMem(), layout)
		defer e.Close()
		parent, _ := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
		ids := idsInRoot(2, 300)
		for _, id := range ids {
			if _, err := parent.Write([]Op{opFor(id, OpIndex, "v0")}, nil); err != nil {
				t.Fatal(err)
			}
		}
		parent.HoldLog()
		var mu sync.Mutex
		var applied []appliedOp
		var stop atomic.Bool
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				for i := 0; !stop.Load(); i++ {
					op := opFor(ids[rng.IntN(len(ids))], OpIndex, fmt.Sprintf("w%d-%d", w, i))
					if rng.IntN(4) == 0 {
						op.Kind, op.Source = OpDelete, nil
					}
					seq, err := parent.Write([]Op{op}, nil)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					applied = append(applied, appliedOp{seq, op})
					mu.Unlock()
				}
			}()
		}
		for parent.Seq() < uint64(len(ids))+200 {
		}
		childSpan := routing.Span{Start: 256 + 64, End: 384}
		child, stats, err := e.CreateChild(parent, 9, childSpan)
		if err != nil {
			t.Fatal(err)
		}
		childAtS := scanState(t, child)
		foreign, _ := child.CountKeys(routing.Span{Start: 256, End: 256 + 64})
		for parent.Seq() < stats.Seq+300 {
		}
		stop.Store(true)
		wg.Wait()
		if layout == LayoutPerShard {
			// The child is a point-in-time copy: exactly the model as of S.
			// (The model is built after the writers stop, when every
			// acknowledged op has been recorded.)
			if want := modelAt(ids, applied, &mu, stats.Seq, childSpan); !equalState(childAtS, want) {
				t.Fatalf("child at S=%d differs from the model: %d vs %d docs", stats.Seq, len(childAtS), len(want))
			}
			if foreign != 0 {
				t.Errorf("child sees %d foreign keys of its root", foreign)
			}
		}
		if _, _, err := e.CatchUp(parent, []*Shard{child}, stats.Seq); err != nil {
			t.Fatal(err)
		}
		want := modelAt(ids, applied, &mu, parent.Seq(), childSpan)
		if got := scanState(t, child); !equalState(got, want) {
			t.Fatalf("child after catch-up: %d docs, parent span has %d", len(got), len(want))
		}
		if err := parent.ReleaseLog(); err != nil {
			t.Fatal(err)
		}
		if n := countLog(t, parent); n != 0 {
			t.Errorf("operation log holds %d entries after the last release, want 0", n)
		}
	})
}

// modelAt replays the initial load and every applied op up to seq, keeping
// only documents in span.
func modelAt(ids []string, applied []appliedOp, mu *sync.Mutex, seq uint64, span routing.Span) state {
	mu.Lock()
	defer mu.Unlock()
	m := state{}
	for _, id := range ids {
		m[id] = "v0"
	}
	ops := append([]appliedOp(nil), applied...)
	for i := range ops { // sort by seq
		for j := i; j > 0 && ops[j].seq < ops[j-1].seq; j-- {
			ops[j], ops[j-1] = ops[j-1], ops[j]
		}
	}
	for _, a := range ops {
		if a.seq > seq {
			break
		}
		if a.op.Kind == OpDelete {
			delete(m, a.op.ID)
		} else {
			m[a.op.ID] = string(a.op.Source)
		}
	}
	for id := range m {
		if !span.Contains(routing.Key(testSettings.Place(id, "").Partition)) {
			delete(m, id)
		}
	}
	return m
}

func equalState(a, b state) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func countLog(t *testing.T, s *Shard) int {
	n := 0
	lo, hi := logBounds(s.id)
	it, err := s.st.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.SeekGE(lo); it.Valid() && bytes.Compare(it.Key(), hi) < 0; it.Next() {
		n++
	}
	return n
}

// TestExciseLeavesNoForeignKey: after the child is made and the parent drops
// the child's span, neither store holds a document of the other's span.
func TestExciseLeavesNoForeignKey(t *testing.T) {
	for _, how := range []DropMethod{DropExcise, DropRangeDeleteCompact} {
		t.Run(fmt.Sprint(how), func(t *testing.T) {
			e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
			defer e.Close()
			parent, _ := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
			var ops []Op
			for _, id := range idsInRoot(2, 2000) {
				ops = append(ops, opFor(id, OpIndex, "payload"))
			}
			if _, err := parent.Write(ops, nil); err != nil {
				t.Fatal(err)
			}
			lo, hi := routing.Span{Start: 256, End: 320}, routing.Span{Start: 320, End: 384}
			parent.HoldLog()
			child, _, err := e.CreateChild(parent, 9, hi)
			if err != nil {
				t.Fatal(err)
			}
			parent.SetOwned([]routing.Span{lo})
			if err := e.DropSpans(parent, []routing.Span{hi}, how); err != nil {
				t.Fatal(err)
			}
			nChildForeign, _ := child.CountKeys(lo)
			nParentForeign, _ := parent.CountKeys(hi)
			nChild, _ := child.CountKeys(hi)
			nParent, _ := parent.CountKeys(lo)
			if nChildForeign != 0 || nParentForeign != 0 || nChild+nParent != 2000 || nChild == 0 || nParent == 0 {
				t.Errorf("child %d (+%d foreign), parent %d (+%d foreign), want 2000 in all and 0 foreign",
					nChild, nChildForeign, nParent, nParentForeign)
			}
			// Every key the child's store holds at all is its own or metadata.
			it, _ := child.st.db.NewIter(nil)
			for it.First(); it.Valid(); it.Next() {
				if k := it.Key(); k[0] == tagDoc {
					if _, key, _, _ := DecodeDocKey(k); !hi.Contains(key) {
						t.Errorf("child store holds foreign document key %x", k)
					}
				} else if k[0] == tagLog {
					t.Errorf("child store holds parent log key %x", k)
				}
			}
			_ = it.Close()
		})
	}
}

func TestDestroyShardRemovesOnlyItsFiles(t *testing.T) {
	fs := vfs.NewMem()
	e := openTestEngine(t, fs, LayoutPerShard)
	defer e.Close()
	parent, _ := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	var ops []Op
	for _, id := range idsInRoot(2, 500) {
		ops = append(ops, opFor(id, OpIndex, "payload"))
	}
	if _, err := parent.Write(ops, nil); err != nil {
		t.Fatal(err)
	}
	parent.HoldLog()
	if _, _, err := e.CreateChild(parent, 9, routing.Span{Start: 320, End: 384}); err != nil {
		t.Fatal(err)
	}
	if err := e.DestroyShard(9); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(e.ShardDir(9)); err == nil {
		t.Errorf("child directory still exists")
	}
	if got := len(scanState(t, parent)); got != 500 {
		t.Errorf("parent lost documents when its child was destroyed: %d left", got)
	}
}

func TestAsyncDurability(t *testing.T) {
	e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), Durability: DurabilityAsync, SyncEvery: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s, _ := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	for _, id := range idsInRoot(2, 50) {
		if _, err := s.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := len(scanState(t, s)); n != 50 {
		t.Errorf("async store holds %d documents, want 50", n)
	}
}

func TestKeyEncodingExample(t *testing.T) {
	k := DocKey(nil, 2, 361, "user-42")
	want := []byte{0x10, 0, 0, 0, 2, 0, 0, 0x01, 0x69, 'u', 's', 'e', 'r', '-', '4', '2'}
	if !bytes.Equal(k, want) {
		t.Fatalf("DocKey(2, 361, user-42) = %x, want %x", k, want)
	}
	lo, hi := SpanBounds(2, routing.Span{Start: 256, End: 384})
	if bytes.Compare(lo, k) > 0 || bytes.Compare(k, hi) >= 0 {
		t.Errorf("key %x outside its span bounds [%x, %x)", k, lo, hi)
	}
	// The opensearch-mode span of a whole root ends at the next root.
	lo, hi = SpanBounds(2, routing.Span{Start: 0, End: 1 << 32})
	if !bytes.Equal(hi, DocKey(nil, 3, 0, "")) || !bytes.Equal(lo, DocKey(nil, 2, 0, "")) {
		t.Errorf("whole-root bounds = [%x, %x)", lo, hi)
	}
}

// Exclusive's drain deadline runs on the engine's clock.
func TestExclusiveTimesOutOnTheEngineClock(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	e := openEngine(t, Options{Clock: clk})
	defer e.Close()
	s := openShard(t, e, 2, 2, rootSpan(2))
	holding, release := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.Exclusive(0, func() error { close(holding); <-release; return nil })
	}()
	<-holding
	base := clk.Waiters()
	done := make(chan error, 1)
	go func() { done <- s.Exclusive(time.Millisecond, func() error { return nil }) }()
	for i := 0; ; i++ {
		clk.BlockUntil(base + 1) // Exclusive polls: one Sleep at a time
		select {
		case err := <-done:
			t.Fatalf("Exclusive returned %v before the clock passed its wait", err)
		default:
		}
		clk.Advance(500 * time.Microsecond)
		if i == 2 {
			break
		}
	}
	if err := <-done; !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("Exclusive = %v, want ErrLockTimeout", err)
	}
	close(release)
}
