// Package crashpoint enumerates crash points (after Pebble's
// TestDBWALRotationCrash): a split, a nested split and a merge of the
// nested split's children run under concurrent acknowledged writes on a
// crashable in-memory disk (storage/crashfs), which is cloned — as a
// power loss would leave it, unsynced data dropped or half of it kept at
// random — at every operation that can change durable state. Every clone
// is then recovered and checked: the table is valid, no split or merge is
// left unfinished, every document is on the shard the table names exactly
// once, no store holds a key outside its span (recovery.Check), and every
// id is in a state the write model allows at the crash: its last write
// acknowledged before the clone, or one attempted before the clone and not
// hidden by it (model.Model's rule).
//
// Each id is written under several routing values (none among them), all
// of which reach one shard in every table of the scenario: a shard keeps
// one document per _id, so each id is one document throughout, and a
// clone holding two documents of an id, or a shard whose `_id` entries are
// not exactly its routed documents (recovery.Check), fails its point.
//
// tests/crash_test.go runs it as a test; splitdemo findings (question 9)
// reports its counts and what recovery did.
package crashpoint

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
)

// The operations a scenario runs, in order; a crash point belongs to the
// one running when it was taken.
const (
	OpSplit       = "split"
	OpNestedSplit = "nested split"
	OpMerge       = "merge"
)

// Point is one crash point: what recovery did with its clone and whether
// the clone passed the checks.
type Point struct {
	Index int
	Op    string // OpSplit, OpNestedSplit or OpMerge
	Phase string // the operation's phase when the clone was taken
	// Recovered are recovery's decisions, as "split roll-back" or "merge
	// roll-forward"; none when nothing was unfinished.
	Recovered []string
	Err       error // nil: the clone recovered and passed every check
}

// Result is one scenario's enumeration.
type Result struct {
	Mode   routing.Mode
	Seed   uint64
	Points []Point
	// WriterErrs are errors the concurrent writers saw (none expected).
	WriterErrs []error
	// Routed counts the writes made with a routing value, Moved those of
	// them under a routing value other than the id's previous write's (each
	// replaced the id's document under another key of its shard).
	Routed, Moved int
	// FromHistory counts the children made from their parent's last
	// flushed state and retained history (storage.ChildStats.Unflushed),
	// History the writes they took from that history; Flushed the
	// children whose parent was flushed first (a nested split's parent,
	// a new child, holds writes its history never saw until it flushes).
	FromHistory, History, Flushed int
}

// Failures returns the points whose clone failed a check.
func (r Result) Failures() []Point {
	var f []Point
	for _, p := range r.Points {
		if p.Err != nil {
			f = append(f, p)
		}
	}
	return f
}

type clone struct {
	disk  *crashfs.Disk
	at    model.Cut // the model's clock read before and after the clone
	index int
	op    string
	phase string
}

// Run runs one scenario in mode with seed and checks every crash point it
// passes. The error is set when the scenario itself could not run (the
// split or merge did not complete); failed points are in the Result.
func Run(mode routing.Mode, seed uint64) (Result, error) {
	res := Result{Mode: mode, Seed: seed}
	disk := crashfs.New()
	m := model.New(model.Options{})
	var armed atomic.Bool
	// armMu is held (shared) from the armed check to the send; disarming
	// takes it, so once disarmed no clone is in flight and clones may be
	// closed (Pebble's background work goes on doing durable operations
	// after the run: obsolete-file deletion sent on the closed channel).
	var armMu sync.RWMutex
	var op, phase atomic.Value
	op.Store("")
	phase.Store("")
	clones := make(chan clone, 64)
	var index atomic.Int64
	rng := rand.New(rand.NewPCG(seed, 3))
	var rngMu sync.Mutex
	fs := disk.FS(func() {
		armMu.RLock()
		defer armMu.RUnlock()
		if !armed.Load() {
			return
		}
		rngMu.Lock()
		keep, cloneSeed := 0, uint64(0)
		if rng.IntN(2) == 0 { // half the clones keep a random part of the unsynced data
			keep, cloneSeed = 50, rng.Uint64()
		}
		rngMu.Unlock()
		// Writes go on concurrently: every write acknowledged before the
		// clone must be in it, and none attempted after it can be.
		before := m.Now()
		c := disk.Crash(keep, cloneSeed)
		at := model.Cut{Acked: before, Attempted: m.Now()}
		clones <- clone{disk: c, at: at, index: int(index.Add(1)), op: op.Load().(string), phase: phase.Load().(string)}
	})
	tab, err := routing.NewTable(mode, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	if err != nil {
		return res, err
	}
	opts := storage.Options{Dir: "/data", FS: fs, Durability: storage.DurabilityRequest, CacheBytes: 1 << 20}
	n, j, _, err := recovery.Open(opts, tab, nil)
	if err != nil {
		return res, err
	}

	// Check clones as they come, concurrently with the run.
	var points []Point
	var wgCheck sync.WaitGroup
	wgCheck.Add(1)
	go func() {
		defer wgCheck.Done()
		for c := range clones {
			p := Point{Index: c.index, Op: c.op, Phase: c.phase}
			p.Recovered, p.Err = check(c, tab, m)
			points = append(points, p)
		}
	}()

	var stop atomic.Bool
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var routed, moved atomic.Int64
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := node.NewRouter(n, tab, node.RouterConfig{MaxRetries: 16})
			wr := rand.New(rand.NewPCG(seed, uint64(w)))
			last := map[string]string{}
			routes := map[string][]string{}
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("w%d-%d", w, wr.IntN(30))
				rs, ok := routes[id]
				if !ok {
					rs = sameShardRoutings(tab, id)
					routes[id] = rs
				}
				rv := rs[wr.IntN(len(rs))]
				if rv != "" {
					routed.Add(1)
				}
				if prev, ok := last[id]; ok && prev != rv {
					moved.Add(1)
				}
				last[id] = rv
				source := fmt.Appendf(nil, "w%d-v%d", w, i)
				if wr.IntN(5) == 0 {
					source = nil // a delete
				}
				var mw *model.Write
				var err error
				if source == nil {
					mw = m.Attempt(id, model.Absent)
					_, err = r.Delete(id, rv)
				} else {
					mw = m.Attempt(id, model.Doc(source))
					_, err = r.Index(id, rv, source)
				}
				if err != nil {
					m.Fail(mw)
					errMu.Lock()
					res.WriterErrs = append(res.WriterErrs, fmt.Errorf("writer %d: %w", w, err))
					errMu.Unlock()
					return
				}
				m.Ack(mw)
				time.Sleep(200 * time.Microsecond)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	d := splitter.NewDriver(n, splitter.Config{Journal: j, Hook: func(p splitter.Phase, _ splitter.Intent) { phase.Store(p.String()) }})
	runErr := func() error {
		op.Store(OpSplit)
		armed.Store(true)
		r1, err := d.Run(splitter.SplitPlan(0, 2))
		if err != nil || r1.Phase != splitter.PhaseDone {
			return fmt.Errorf("split: %v %v", err, r1.Err)
		}
		res.countBuilds(r1)
		op.Store(OpNestedSplit)
		r2, err := d.Run(splitter.SplitPlan(r1.SortedTargets()[1], 2))
		if err != nil || r2.Phase != splitter.PhaseDone {
			return fmt.Errorf("nested split: %v %v", err, r2.Err)
		}
		res.countBuilds(r2)
		op.Store(OpMerge)
		r3, err := d.Run(splitter.MergePlan(r2.SortedTargets()...))
		if err != nil || r3.Phase != splitter.PhaseDone {
			return fmt.Errorf("merge: %v %v", err, r3.Err)
		}
		return nil
	}()
	armMu.Lock()
	armed.Store(false)
	armMu.Unlock()
	stop.Store(true)
	wg.Wait()
	close(clones)
	wgCheck.Wait()
	_ = n.Close()
	res.Points = points
	res.Routed, res.Moved = int(routed.Load()), int(moved.Load())
	return res, runErr
}

// countBuilds counts how a split's children were made.
func (r *Result) countBuilds(rep splitter.Report) {
	for _, c := range rep.ChildStats {
		if c.Unflushed {
			r.FromHistory++
			r.History += c.History
		} else {
			r.Flushed++
		}
	}
}

// sameShardRoutings returns the routing values an id is written under:
// none, and two that route it, under keys of their own, into the quarter of
// its root's span its _id alone routes to. The scenario's splits halve a
// span and halve one half again, and its merge joins two quarters, so no
// table of it puts two of them on different shards.
func sameShardRoutings(tab *routing.Table, id string) []string {
	quarter := func(r string) (routing.ShardID, uint64, routing.Key) {
		p, _ := tab.Route(id, r)
		sp, k := tab.RootSpan(p.Root), tab.KeyOf(p)
		return p.Root, (uint64(k) - sp.Start) * 4 / (sp.End - sp.Start), k
	}
	root, q, home := quarter("")
	out := []string{""}
	keys := map[routing.Key]bool{home: true}
	for i := 0; len(out) < 3; i++ {
		rv := fmt.Sprintf("%s-r%d", id, i)
		if r, rq, k := quarter(rv); r == root && rq == q && !keys[k] {
			keys[k] = true
			out = append(out, rv)
		}
	}
	return out
}

// check recovers a clone and checks it: recovery.Check's invariants (a
// valid table with no split in progress, no unfinished split in the
// journal, no store holding keys outside its span, every document once on
// the shard the table names), then every id against the model at the
// crash. It returns what recovery decided.
func check(c clone, initial *routing.Table, m *model.Model) ([]string, error) {
	opts := storage.Options{Dir: "/data", FS: c.disk.FS(nil), Durability: storage.DurabilityRequest, CacheBytes: 1 << 20}
	n, j, rec, err := recovery.Open(opts, initial, nil)
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	defer n.Close()
	var recovered []string
	for _, d := range rec.Decisions {
		recovered = append(recovered, Describe(d))
	}
	found := map[string]model.Value{}
	var twice []string
	rep := recovery.Check(n, j, func(_ routing.ShardID, d storage.Doc) {
		if _, ok := found[d.ID]; ok {
			twice = append(twice, d.ID)
		}
		found[d.ID] = model.Doc(d.Source)
	})
	if !rep.OK() {
		return recovered, fmt.Errorf("invariants after recovery: %q", rep.Violations)
	}
	if len(twice) > 0 {
		return recovered, fmt.Errorf("two documents of _ids %v, whose routing values all reach one shard", twice)
	}
	r, err := m.Check(c.at, found)
	if err != nil {
		return recovered, err
	}
	if !r.OK() {
		return recovered, fmt.Errorf("%d lost, %d unexpected, %d wrong of %d ids at cut %+v: %v", r.Lost, r.Unexpected, r.Wrong, r.Checked, c.at, r.Mismatches)
	}
	return recovered, nil
}

// Describe names a recovery decision as "split roll-back" or "merge
// roll-forward".
func Describe(d recovery.Decision) string {
	return d.Kind.String() + " " + d.Action.String()
}
