package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
)

// openRoot2 opens shard 2, root 2's whole span, on e.
func openRoot2(t *testing.T, e *Engine) *Shard {
	t.Helper()
	return openShard(t, e, 2, 2, rootSpan(2))
}

// openParentOn opens an engine in dir on fs with o's choice of child
// build (an 8 MiB cache, no logs; closed when the test ends) and shard 2
// on it, root 2's whole span.
func openParentOn(t *testing.T, dir string, fs vfs.FS, o Options) (*Engine, *Shard) {
	t.Helper()
	o.Dir, o.FS, o.Logger, o.CacheBytes = dir, fs, zap.NewNop(), 8<<20
	e := openEngine(t, o)
	t.Cleanup(func() { _ = e.Close() })
	return e, openRoot2(t, e)
}

// halves returns the two halves of root 2's span as the specs of a split
// into shards 3 and 4.
func halves() []ChildSpec {
	root := rootSpan(2)
	mid := root.Start + (root.End-root.Start)/2
	return []ChildSpec{{Shard: 3, Span: routing.Span{Start: root.Start, End: mid}}, {Shard: 4, Span: routing.Span{Start: mid, End: root.End}}}
}

// sameAsParent fails t unless each child holds as many documents of its
// span as the parent and none of its sibling's.
func sameAsParent(t *testing.T, parent *Shard, children []*Shard, specs []ChildSpec) {
	t.Helper()
	for i, c := range children {
		want, err := parent.CountKeys(specs[i].Span)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.CountKeys(specs[i].Span); err != nil || got != want {
			t.Errorf("child %d holds %d documents of its span (%v), the parent %d", c.ID(), got, err, want)
		}
		if got, err := c.CountKeys(specs[1-i].Span); err != nil || got != 0 {
			t.Errorf("child %d holds %d documents of its sibling's span (%v), want none", c.ID(), got, err)
		}
	}
}

// A split's children copy none of the parent's WAL: the tables hold every
// write up to their sequence number, the retained history every write
// from there to the log hold's start, the log every write after it, and
// the catch-up brings the children to the parent. With the WAL copied (Pebble's Checkpoint), each
// child copied the parent's unflushed writes, both halves of the keyspace,
// and its open replayed and flushed them again (up to 15.5 MB per child of
// a 4 GiB parent).
func TestChildrenCopyNoWAL(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) {
			e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
			defer e.Close()
			parent := openRoot2(t, e)
			// ~1.5 MiB unflushed, below flushBeforeCheckpoint: copying
			// children would not have flushed the parent first.
			writeRandomDocs(t, parent, "before", 1500, 1024)
			parent.HoldLog()
			writeDocs(t, parent, "held", 300, 512) // logged, and in the WAL
			specs := halves()
			children, stats, err := e.CreateChildren(parent, specs, ChildExcise, concurrent)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range stats {
				if !st.OmittedWAL || st.Copied > 64<<10 {
					t.Errorf("child %d copied %d bytes (WAL omitted: %v), want only its MANIFEST and OPTIONS", specs[i].Shard, st.Copied, st.OmittedWAL)
				}
				// From the flushed state and the retained history, up to
				// the log's start.
				if logged, _ := parent.loggedAfter(); st.Seq != logged {
					t.Errorf("child %d starts from sequence number %d, want the log's start %d", specs[i].Shard, st.Seq, logged)
				}
			}
			writeDocs(t, parent, "after", 300, 512) // after the checkpoints: only in the log
			if _, _, err := e.CatchUp(parent, children, min(stats[0].Seq, stats[1].Seq)); err != nil {
				t.Fatal(err)
			}
			sameAsParent(t, parent, children, specs)
		})
	}
}

// A child without WAL loses the writes its parent had not flushed unless
// the log holds them: a parent whose log is not held is refused, and no
// directory is left behind.
func TestAChildWithoutWALNeedsTheLogHeld(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent := openRoot2(t, e)
	writeDocs(t, parent, "d", 200, 512)
	_, _, err := e.CreateChildren(parent, halves(), ChildExcise, true)
	if err == nil || !strings.Contains(err.Error(), "operation log is not held") {
		t.Fatalf("children of a parent whose log is not held: err %v, want a refusal", err)
	}
	for _, c := range halves() {
		if _, err := e.opts.FS.Stat(e.ShardDir(c.Shard)); err == nil {
			t.Errorf("%s left behind", e.ShardDir(c.Shard))
		}
	}
}

// A checkpoint without WAL reflects what the parent had flushed; if that
// ends before the log begins (the flush came before the hold), the writes
// between are in neither, and the child is refused rather than made
// without them.
func TestAChildWithoutWALRefusesAGapBeforeTheLog(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent := openRoot2(t, e)
	writeDocs(t, parent, "flushed", 100, 512)
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	writeDocs(t, parent, "unflushed", 100, 512) // in neither the tables nor the log
	parent.HoldLog()
	spec := halves()[0]
	c, _, err := e.makeChild(parent, spec.Shard, spec.Span, ChildExcise, childFlush{omitWAL: true}, siblings{})
	if err == nil || !strings.Contains(err.Error(), "are in neither") {
		t.Fatalf("a child without the writes between the flush and the hold: made %v, err %v; want a refusal", c != nil, err)
	}
	if _, err := e.opts.FS.Stat(e.ShardDir(spec.Shard)); err == nil {
		t.Errorf("%s left behind", e.ShardDir(spec.Shard))
	}
}

// windowWriter writes documents into the parent from inside each child's
// checkpoint, when Pebble creates the checkpoint's OPTIONS file: after the
// split's flush, before the checkpoint copies the WAL. Those writes are in
// the parent's live WAL when it is copied, so a checkpoint that copies the
// WAL carries them and one that leaves it empty does not.
type windowWriter struct {
	parent atomic.Pointer[Shard]
	fired  sync.Map // checkpoint directory → true
	docs   int      // documents per checkpoint
	wrote  atomic.Int64
	mu     sync.Mutex
	err    error
}

func (w *windowWriter) String() string { return "windowWriter" }

func (w *windowWriter) MaybeError(op errorfs.Op) error {
	p := w.parent.Load()
	if p == nil || op.Kind != errorfs.OpCreate || !strings.HasPrefix(filepath.Base(op.Path), "OPTIONS") {
		return nil
	}
	dir := filepath.Dir(op.Path)
	if _, loaded := w.fired.LoadOrStore(dir, true); loaded {
		return nil
	}
	src := strings.Repeat("w", 1024)
	var ops []Op
	for i := range w.docs {
		ops = append(ops, Op{Kind: OpIndex, Root: 2, Key: routing.Key(256 + uint64(i%128)), ID: fmt.Sprintf("window-%s-%d", filepath.Base(dir), i), Source: []byte(src)})
		if len(ops) == 50 || i == w.docs-1 {
			if _, err := p.Write(ops, nil); err != nil {
				w.mu.Lock()
				w.err = errors.Join(w.err, err)
				w.mu.Unlock()
				return nil
			}
			w.wrote.Add(int64(len(ops)))
			ops = ops[:0]
		}
	}
	return nil
}

// The writes that land between a split's flush and the checkpoint's WAL
// copy are left out of the child and brought by the catch-up.
// (TestChildrenCopyNoWAL's writes all come before CreateChildren's flush,
// so the WAL left to copy is empty whether or not omitWAL takes effect:
// its byte check alone cannot fail.) With the WAL left out a child copies
// only its MANIFEST and OPTIONS, and the catch-up still brings every one
// of those writes; the copying build is the control (the same writes show
// up as copied bytes). Both Pebble
// filesystems run, the OS one with a data directory spelled with "./" and
// doubled slashes (omitsWAL's directory must match Pebble's spelling of
// the checkpoint's paths).
func TestWritesBetweenTheFlushAndTheCheckpointAreNotCopiedButCaughtUp(t *testing.T) {
	type fsCase struct {
		name string
		fs   func(t *testing.T) (vfs.FS, string)
	}
	fss := []fsCase{
		{"mem", func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), "/data" }},
		{"os", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() + "/./data//" }},
	}
	for _, fc := range fss {
		for _, copyWAL := range []bool{false, true} {
			for _, concurrent := range []bool{false, true} {
				t.Run(fmt.Sprintf("fs=%s/copy=%v/concurrent=%v", fc.name, copyWAL, concurrent), func(t *testing.T) {
					base, dir := fc.fs(t)
					w := &windowWriter{docs: 400}
					e, parent := openParentOn(t, dir, errorfs.Wrap(base, w), Options{CopyChildWAL: copyWAL})
					writeDocs(t, parent, "before", 300, 512)
					parent.HoldLog()
					writeDocs(t, parent, "held", 300, 512)
					specs := halves()
					w.parent.Store(parent)
					children, stats, err := e.CreateChildren(parent, specs, ChildExcise, concurrent)
					w.parent.Store(nil)
					if err != nil {
						t.Fatal(err)
					}
					if w.err != nil {
						t.Fatal(w.err)
					}
					if got := w.wrote.Load(); got != int64(len(specs)*w.docs) {
						t.Fatalf("wrote %d documents inside the checkpoints, want %d", got, len(specs)*w.docs)
					}
					for i, st := range stats {
						t.Logf("child %d: omitted WAL %v, copied %d bytes, S %d (parent at %d)", specs[i].Shard, st.OmittedWAL, st.Copied, st.Seq, parent.Seq())
						if copyWAL {
							if st.OmittedWAL || st.Copied < 256<<10 {
								t.Errorf("copying build: child %d copied %d bytes (omitted %v), want the window's writes (>= 256 KiB)", specs[i].Shard, st.Copied, st.OmittedWAL)
							}
							continue
						}
						if !st.OmittedWAL || st.Copied > 64<<10 {
							t.Errorf("child %d copied %d bytes (omitted %v), want only its MANIFEST and OPTIONS: the WAL written after the flush was copied", specs[i].Shard, st.Copied, st.OmittedWAL)
						}
					}
					after := stats[0].Seq
					for _, st := range stats {
						after = min(after, st.Seq)
					}
					if _, _, err := e.CatchUp(parent, children, after); err != nil {
						t.Fatal(err)
					}
					sameAsParent(t, parent, children, specs)
				})
			}
		}
	}
}

// Children made without the WAL hold exactly the parent's documents after
// the catch-up, with writers racing every step: writers commit to the
// parent all through the hold, the flush, the checkpoints and the catch-up
// rounds (some deleting what they wrote), the parent flushes on its own
// beside the split's flush, and one batch is larger than half a memtable
// (Pebble queues it as a flushable of its own). After the last catch-up
// with the writers stopped, each child holds exactly the parent's documents
// of its span, with the parent's sequence numbers. Both builds, serial and
// concurrent children, excise and keep-all, both durabilities.
func TestChildrenWithoutWALMatchTheParentUnderRacingWrites(t *testing.T) {
	type tcase struct {
		concurrent bool
		build      ChildBuild
		dur        Durability
		copyWAL    bool
	}
	var cases []tcase
	for _, copyWAL := range []bool{false, true} {
		cases = append(cases,
			tcase{false, ChildExcise, DurabilityRequest, copyWAL},
			tcase{true, ChildExcise, DurabilityRequest, copyWAL},
			tcase{true, ChildKeepAll, DurabilityRequest, copyWAL},
			tcase{false, ChildKeepAll, DurabilityAsync, copyWAL},
			tcase{true, ChildExcise, DurabilityAsync, copyWAL})
	}
	rounds := 3
	if raceEnabled {
		rounds = 1 // 3 took about 190 s of CI's race pass; the ordinary pass runs 3
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("copy=%v/concurrent=%v/%s/%s", tc.copyWAL, tc.concurrent, tc.build, tc.dur), func(t *testing.T) {
			for round := range rounds {
				racingRound(t, uint64(round), tc.concurrent, tc.build, tc.dur, tc.copyWAL)
			}
		})
	}
}

func racingRound(t *testing.T, round uint64, concurrent bool, build ChildBuild, dur Durability, copyWAL bool) {
	e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), Logger: zap.NewNop(), CacheBytes: 8 << 20,
		Durability: dur, SyncEvery: time.Millisecond, SplitFlushRate: -1, CopyChildWAL: copyWAL})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	parent := openRoot2(t, e)
	writeDocs(t, parent, "pre", 400, 256)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(round, uint64(w)))
			for n := 0; !stop.Load(); n++ {
				k := rng.IntN(200)
				op := Op{Kind: OpIndex, Root: 2, Key: routing.Key(256 + uint64((k*37+w*11)%128)),
					ID: fmt.Sprintf("w%d-%d", w, k), Source: fmt.Appendf(nil, "w%d-n%d", w, n)}
				if rng.IntN(5) == 0 {
					op.Kind, op.Source = OpDelete, nil
				}
				if _, err := parent.Write([]Op{op}, nil); err != nil {
					report(fmt.Errorf("writer %d: %w", w, err))
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the parent's own flushes, racing the split's
		defer wg.Done()
		rng := rand.New(rand.NewPCG(round, 99))
		for !stop.Load() {
			if err := parent.st.db.Flush(); err != nil {
				report(fmt.Errorf("own flush: %w", err))
				return
			}
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		}
	}()
	wg.Add(1)
	go func() { // one batch larger than half a memtable
		defer wg.Done()
		time.Sleep(time.Duration(round) * 2 * time.Millisecond)
		big := strings.Repeat("B", 110<<10)
		var ops []Op
		for i := range 80 {
			ops = append(ops, Op{Kind: OpIndex, Root: 2, Key: routing.Key(256 + uint64(i%128)), ID: fmt.Sprintf("big-%d", i), Source: []byte(big)})
		}
		if _, err := parent.Write(ops, nil); err != nil {
			report(fmt.Errorf("large batch: %w", err))
		}
	}()
	time.Sleep(3 * time.Millisecond)
	parent.HoldLog()
	time.Sleep(time.Millisecond)
	specs := halves()
	children, stats, err := e.CreateChildren(parent, specs, build, concurrent)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatal(err)
	}
	after := stats[0].Seq
	for i, st := range stats {
		after = min(after, st.Seq)
		if !copyWAL && !st.OmittedWAL && !st.SkippedFlush {
			t.Errorf("round %d: child %d copied the WAL without skipping the flush", round, specs[i].Shard)
		}
	}
	for range 3 {
		upTo, _, err := e.CatchUp(parent, children, after)
		if err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
		after = upTo
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	upTo, _, err := e.CatchUp(parent, children, after)
	if err != nil {
		t.Fatal(err)
	}
	if upTo != parent.Seq() {
		t.Fatalf("round %d: last catch-up ended at %d, the parent is at %d", round, upTo, parent.Seq())
	}
	for i, c := range children {
		want := map[string]Doc{}
		if err := parent.ScanSpan(specs[i].Span, func(d Doc) error { d.Source = append([]byte(nil), d.Source...); want[d.ID] = d; return nil }); err != nil {
			t.Fatal(err)
		}
		got := map[string]Doc{}
		if err := c.ScanSpan(specs[i].Span, func(d Doc) error { d.Source = append([]byte(nil), d.Source...); got[d.ID] = d; return nil }); err != nil {
			t.Fatal(err)
		}
		bad := 0
		for id, w := range want {
			g, ok := got[id]
			if !ok || g.Seq != w.Seq || string(g.Source) != string(w.Source) {
				if bad++; bad <= 5 {
					t.Errorf("round %d: child %d (S %d): %s is (present %v, seq %d), the parent's (seq %d)", round, c.ID(), stats[i].Seq, id, ok, g.Seq, w.Seq)
				}
			}
		}
		for id := range got {
			if _, ok := want[id]; !ok {
				if bad++; bad <= 5 {
					t.Errorf("round %d: child %d holds %s, which the parent deleted", round, c.ID(), id)
				}
			}
		}
		if bad > 0 {
			t.Fatalf("round %d: child %d differs from the parent in %d documents (of %d)", round, c.ID(), bad, len(want))
		}
	}
}

// noNewFiles fails, once armed, every file creation: a disk with no room
// for a new file (the store's live WAL, already allocated, still takes
// writes), or a process out of file descriptors.
func noNewFiles() *failAlways {
	return &failAlways{
		match: func(op errorfs.Op) bool { return op.Kind == errorfs.OpCreate },
		fail:  func(op errorfs.Op) error { return fmt.Errorf("injected: create %s: %w", op.Path, syscall.ENOSPC) },
	}
}

const childProcessEnv = "SHARDSPLIT_SPLIT_CHILD_PROCESS"

// A split of a parent on a disk where no new file can be created must fail
// and leave the parent serving, as TestSplitAbortsOnIOError asks of a
// failure while the children are made (and as the copying build does: the
// checkpoint's first file fails). Without the WAL, CreateChildren first
// forces a flush of the parent; if its WAL rotation cannot create the new
// log, Pebble panics in DB.rotateWAL with DB.mu released, and the deferred
// unlock in DB.AsyncFlush turns the panic into "fatal error: sync: unlock
// of unlocked mutex": the process dies, no recover can stop it, so the
// split must find out before it flushes (store.probeCreate). The copying
// build forces the same flush only above 2 MiB of unflushed WAL; the
// omitting build, every split. The case runs in a child process so that
// the fatal error does not take this test binary with it.
func TestASplitOnADiskWithNoRoomForANewFileLeavesTheParentServing(t *testing.T) {
	if build := os.Getenv(childProcessEnv); build != "" {
		splitWithNoNewFiles(t, build == "copy")
		return
	}
	for _, build := range []string{"copy", "omit"} {
		t.Run(build, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestASplitOnADiskWithNoRoomForANewFileLeavesTheParentServing$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), childProcessEnv+"="+build)
			out, err := cmd.CombinedOutput()
			if err != nil {
				text := string(out)
				if i := strings.Index(text, "fatal error:"); i >= 0 {
					end := min(len(text), i+1500)
					text = text[i:end]
				} else if len(text) > 3000 {
					text = text[len(text)-3000:]
				}
				t.Fatalf("the process that made the children died (%v):\n%s", err, text)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "child process:") {
					t.Log(strings.TrimSpace(line))
				}
			}
		})
	}
}

func splitWithNoNewFiles(t *testing.T, copyWAL bool) {
	inj := noNewFiles()
	e, parent := openParentOn(t, "/data", errorfs.Wrap(vfs.NewMem(), inj), Options{CopyChildWAL: copyWAL})
	writeDocs(t, parent, "d", 200, 512) // ~100 KiB unflushed: the copying build would not flush
	parent.HoldLog()
	inj.armed.Store(true)
	children, _, err := e.CreateChildren(parent, halves(), ChildExcise, true)
	for _, c := range children {
		if c != nil {
			t.Errorf("child %d made on a disk with no room for a new file", c.ID())
		}
	}
	if err == nil {
		t.Fatal("CreateChildren succeeded on a disk with no room for a new file")
	}
	t.Logf("child process: CreateChildren failed with: %v", err)
	// The parent serves: its live WAL takes writes, its documents read.
	writeDocs(t, parent, "after", 10, 64)
	if n, err := parent.CountKeys(rootSpan(2)); err != nil || n != 210 {
		t.Fatalf("parent after the failed split: %d documents, %v; want 210", n, err)
	}
	t.Logf("child process: the parent still serves (%d creations refused)", inj.hits.Load())
	inj.armed.Store(false)
}
