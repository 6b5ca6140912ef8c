package findings

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// Question 12: one document per _id in a shard, and what it costs.
//
// OpenSearch keeps one document per _id in a shard; a partition-keyed
// store keeps it with an `_id` index of its routed documents (storage's
// idindex.go), which is ordered by _id, not by partition, so a split's
// child must take its own entries out of its parent's whole index: the
// price Lucene's split pays with ShardSplittingQuery, here only for the
// routed documents. Measured, every case of a run side by side, medians
// of Config.runs():
//
//  1. Writes through node.Router into a one-shard index on disk holding
//     idDocs documents (half the writes update one, half insert a new _id),
//     without the index (storage.IDIndexOff: the layout before it) and
//     with it; unrouted writes into a store that holds no routed document
//     and into one that holds some, routed writes; the five cases open at
//     once and write in turns (idWritesOnce). One writer at async
//     durability (the CPU and Pebble work alone), four writers at request
//     durability (each write waits for its WAL fsync).
//  2. An in-place split of that index's shard, every document routed (the
//     worst case: every one has an entry), then the merge of its two
//     children, per-shard and shared, without the index and with each way
//     a per-shard child drops its parent's other entries.

var idIndexQuestion = Question{ID: 12, Slug: "idindex", Title: "One document per _id in a shard, and its cost", Run: runIDIndex,
	RaisedIn: "#12918 (ShardSplittingQuery visits every document, its _id index is not ordered by partition); OpenSearch's one document per _id in a shard",
	Question: "What does keeping one document per _id in a shard cost a write with and without routing, and a split and a merge, against the layout without an _id index?"}

// idWriteCase is one write case.
type idWriteCase struct {
	Name         string
	Index        storage.IDIndexBuild
	RoutedLoad   bool // the documents loaded before are routed
	RoutedHeld   bool // one routed document among them
	RoutedWrites bool
}

var idWriteCases = []idWriteCase{
	{Name: "unrouted, no index", Index: storage.IDIndexOff},
	{Name: "unrouted, index, no routed document held", Index: storage.IDIndexRebuild},
	{Name: "unrouted, index, routed documents held", Index: storage.IDIndexRebuild, RoutedHeld: true},
	{Name: "routed, no index", Index: storage.IDIndexOff, RoutedLoad: true, RoutedWrites: true},
	{Name: "routed, index", Index: storage.IDIndexRebuild, RoutedLoad: true, RoutedWrites: true},
}

// idWriteRun is one run of a write case. CPUus is the process's CPU time
// over the case's turns per write (Pebble's background work included):
// unlike the wall-clock numbers, not what the machine's other load took.
type idWriteRun struct{ OpsPerSec, P50us, P99us, CPUus float64 }

// idSizes are question 12's sizes: documents loaded before the writes,
// writes at async and at request durability, documents of the split's
// parent.
func (c Config) idSizes() (docs, asyncWrites, requestWrites, splitDocs int) {
	if c.Quick {
		return 5_000, 5_000, 400, 10_000
	}
	return 50_000, 50_000, 4_000, 200_000
}

// idTenant is document i's routing value when it is routed: one of 1,000
// tenants, so that the documents spread over the whole shard.
func idTenant(i int) string { return fmt.Sprintf("tenant-%d", i%1000) }

// idIndexTable is the one-shard index both parts use (partition mode).
func idIndexTable() (*routing.Table, error) {
	return routing.NewTable(routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 1024, PartitionSize: 1})
}

// idDataset writes docs documents (256 random bytes each) through a
// router at async durability into dir, routed as routed says, reopens it
// (its WAL flushed into tables) and waits for its compactions to settle:
// clones of it start from a shard that has had time to compact.
func idDataset(dir string, layout storage.Layout, index storage.IDIndexBuild, docs int, routed func(i int) bool, seed uint64) error {
	tab, err := idIndexTable()
	if err != nil {
		return err
	}
	open := func() (*node.Node, error) {
		eng, err := storage.Open(storage.Options{Dir: dir, Layout: layout, Durability: storage.DurabilityAsync, CacheBytes: 64 << 20, IDIndex: index})
		if err != nil {
			return nil, err
		}
		n, err := node.Open(node.Config{Engine: eng, Table: tab})
		if err != nil {
			_ = eng.Close()
		}
		return n, err
	}
	n, err := open()
	if err != nil {
		return err
	}
	r := node.NewRouter(n, tab, node.RouterConfig{})
	rng := rand.New(rand.NewPCG(seed, 12))
	src := make([]byte, 256)
	for i := range docs {
		for j := range src {
			src[j] = byte(rng.Uint32())
		}
		rv := ""
		if routed(i) {
			rv = idTenant(i)
		}
		if _, err := r.Index(fmt.Sprintf("doc-%d", i), rv, src); err != nil {
			_ = n.Close()
			return err
		}
	}
	s, err := n.Store(0)
	if err == nil {
		err = s.Sync()
	}
	if cerr := n.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n, err = open(); err != nil {
		return err
	}
	if s, err = n.Store(0); err == nil {
		_, err = experiment.Settle([]*storage.Shard{s})
	}
	if cerr := n.Close(); err == nil {
		err = cerr
	}
	return err
}

// idWriter is one write case's node in a run, and what its writes
// measured.
type idWriter struct {
	k    idWriteCase
	n    *node.Node
	tab  *routing.Table
	rngs []*rand.Rand // one per writer
	next []int        // each writer's next new _id
	lat  []time.Duration
	busy time.Duration
	cpu  time.Duration
}

// idWritesOnce runs one run of every write case, side by side: a clone of
// each case's dataset under scratch, open at once, and the cases' writes
// in turns of slice writes (by writers writers), the case that goes first
// moving each turn, until each made writes. A case's writes per second are
// its writes over the time of its own turns, so a burst of load on the
// machine lands on every case alike.
func idWritesOnce(datasets map[string]string, scratch string, dur storage.Durability, docs, writes, writers, slice int, seed uint64) (map[string]idWriteRun, error) {
	tab, err := idIndexTable()
	if err != nil {
		return nil, err
	}
	var ws []*idWriter
	defer func() {
		for _, w := range ws {
			_ = w.n.Close()
		}
	}()
	for i, k := range idWriteCases {
		dir := filepath.Join(scratch, fmt.Sprintf("case-%d", i))
		if err := storage.CloneDir(nil, datasets[k.Name], dir); err != nil {
			return nil, err
		}
		eng, err := storage.Open(storage.Options{Dir: dir, Durability: dur, CacheBytes: 16 << 20, IDIndex: k.Index})
		if err != nil {
			return nil, err
		}
		n, err := node.Open(node.Config{Engine: eng, Table: tab})
		if err != nil {
			_ = eng.Close()
			return nil, err
		}
		w := &idWriter{k: k, n: n, tab: tab}
		for j := range writers {
			w.rngs = append(w.rngs, rand.New(rand.NewPCG(seed, uint64(j))))
			w.next = append(w.next, docs+j*writes)
		}
		ws = append(ws, w)
	}
	src := make([]byte, 256)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for turn := 0; turn*slice < writes; turn++ {
		for c := range ws {
			w := ws[(turn+c)%len(ws)]
			if err := w.turn(slice, writers, docs, src); err != nil {
				return nil, fmt.Errorf("%s: %w", w.k.Name, err)
			}
		}
	}
	out := map[string]idWriteRun{}
	for _, w := range ws {
		slices.Sort(w.lat)
		out[w.k.Name] = idWriteRun{OpsPerSec: float64(len(w.lat)) / w.busy.Seconds(),
			P50us: float64(w.lat[len(w.lat)/2].Microseconds()), P99us: float64(w.lat[len(w.lat)*99/100].Microseconds()),
			CPUus: float64(w.cpu.Microseconds()) / float64(len(w.lat))}
	}
	return out, nil
}

// turn makes slice writes by writers writers: half update one of the docs
// documents loaded, half insert a new _id.
func (w *idWriter) turn(slice, writers, docs int, src []byte) error {
	lat := make([][]time.Duration, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	cpu0, _ := experiment.ProcessCPU()
	start := time.Now()
	for j := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := node.NewRouter(w.n, w.tab, node.RouterConfig{})
			for q := range slice / writers {
				i := w.rngs[j].IntN(docs)
				if q%2 == 0 {
					i, w.next[j] = w.next[j], w.next[j]+1
				}
				rv := ""
				if w.k.RoutedWrites {
					rv = idTenant(i)
				}
				t0 := time.Now()
				if _, err := r.Index(fmt.Sprintf("doc-%d", i), rv, src); err != nil {
					errs[j] = err
					return
				}
				lat[j] = append(lat[j], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	w.busy += time.Since(start)
	cpu1, _ := experiment.ProcessCPU()
	w.cpu += cpu1 - cpu0
	for j := range writers {
		if errs[j] != nil {
			return errs[j]
		}
		w.lat = append(w.lat, lat[j]...)
	}
	return nil
}

// idSplitCase is one split case.
type idSplitCase struct {
	Layout storage.Layout
	Index  storage.IDIndexBuild
}

func (k idSplitCase) String() string {
	if k.Index == storage.IDIndexOff {
		return k.Layout.String() + ", no index"
	}
	if k.Layout == storage.LayoutShared {
		return "shared, index"
	}
	return fmt.Sprintf("%s, index (%s)", k.Layout, k.Index)
}

var idSplitCases = []idSplitCase{
	{storage.LayoutPerShard, storage.IDIndexOff},
	{storage.LayoutPerShard, storage.IDIndexRebuild},
	{storage.LayoutPerShard, storage.IDIndexScanDelete},
	{storage.LayoutShared, storage.IDIndexOff},
	{storage.LayoutShared, storage.IDIndexRebuild},
}

// idSplitRun is one split-and-merge of a case.
type idSplitRun struct {
	SplitMs, CloneMs, IDsMs, SplitWrittenMiB, IDWrittenMiB float64
	Kept, Dropped                                          int
	MergeMs, MergeWrittenMiB                               float64
}

// idSplitOnce splits the dataset's shard in two and merges the children
// back, on a clone of the dataset in dir.
func idSplitOnce(dataset, dir string, k idSplitCase) (idSplitRun, error) {
	var out idSplitRun
	if err := storage.CloneDir(nil, dataset, dir); err != nil {
		return out, err
	}
	eng, err := storage.Open(storage.Options{Dir: dir, Layout: k.Layout, CacheBytes: 64 << 20, IDIndex: k.Index})
	if err != nil {
		return out, err
	}
	n, err := node.Open(node.Config{Engine: eng})
	if err != nil {
		_ = eng.Close()
		return out, err
	}
	defer n.Close()
	d := splitter.NewDriver(n, splitter.Config{})
	rep, err := d.Run(splitter.SplitPlan(0, 2))
	if err == nil && rep.Phase != splitter.PhaseDone {
		err = fmt.Errorf("split ended %s: %v", rep.Phase, rep.Err)
	}
	if err != nil {
		return out, err
	}
	const mib = 1 << 20
	out.SplitMs, out.CloneMs = ms(rep.Total), ms(rep.Durations[splitter.PhaseClone])
	out.SplitWrittenMiB = float64(rep.Written) / mib
	for _, cs := range rep.ChildStats {
		out.IDsMs = max(out.IDsMs, ms(cs.IDs)) // the children are made at the same time
		out.IDWrittenMiB += float64(cs.IDIndex.Written) / mib
		out.Kept += cs.IDIndex.Kept
		out.Dropped += cs.IDIndex.Dropped
	}
	targets := slices.Clone(rep.Targets)
	slices.Sort(targets)
	mr, err := d.Run(splitter.MergePlan(targets...))
	if err == nil && mr.Phase != splitter.PhaseDone {
		err = fmt.Errorf("merge ended %s: %v", mr.Phase, mr.Err)
	}
	if err != nil {
		return out, err
	}
	out.MergeMs, out.MergeWrittenMiB = ms(mr.Total), float64(mr.Written)/mib
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runIDIndex answers question 12.
func runIDIndex(ctx context.Context, cfg Config) (Answer, error) {
	a := Answer{Command: cfg.reproduce(12)}
	if cfg.Scratch == "" { // Run always sets it; a direct call may not
		dir, err := os.MkdirTemp("", "findings-idindex-")
		if err != nil {
			return a, err
		}
		defer os.RemoveAll(dir)
		cfg.Scratch = dir
	}
	docs, asyncWrites, requestWrites, splitDocs := cfg.idSizes()
	type durCase struct {
		name                   string
		dur                    storage.Durability
		writes, writers, slice int
	}
	durs := []durCase{{"async, 1 writer", storage.DurabilityAsync, asyncWrites, 1, 1000}, {"request, 4 writers", storage.DurabilityRequest, requestWrites, 4, 200}}
	writeRuns := map[string][]idWriteRun{}
	writeData := map[string]string{}
	for _, k := range idWriteCases {
		ds := filepath.Join(cfg.Scratch, "writes-"+strings.NewReplacer(" ", "-", ",", "").Replace(k.Name))
		cfg.Progressf("q12: loading %d documents (%s)", docs, k.Name)
		if err := idDataset(ds, storage.LayoutPerShard, k.Index, docs, func(i int) bool { return k.RoutedLoad || k.RoutedHeld && i == 0 }, uint64(cfg.Seed)); err != nil {
			return a, fmt.Errorf("q12 dataset (%s): %w", k.Name, err)
		}
		writeData[k.Name] = ds
	}
	dir := filepath.Join(cfg.Scratch, "writes")
	for run := range cfg.runs() {
		for _, dc := range durs {
			if err := ctx.Err(); err != nil {
				return a, err
			}
			cfg.Progressf("q12: run %d, %s, every case in turns", run+1, dc.name)
			rs, err := idWritesOnce(writeData, dir, dc.dur, docs, dc.writes, dc.writers, dc.slice, uint64(cfg.Seed)+uint64(run))
			os.RemoveAll(dir)
			if err != nil {
				return a, fmt.Errorf("q12 writes (%s): %w", dc.name, err)
			}
			for name, r := range rs {
				writeRuns[dc.name+": "+name] = append(writeRuns[dc.name+": "+name], r)
			}
		}
	}
	wt := Table{Header: []string{"durability", "case", "writes/s", "× no index", "p50 (µs)", "p99 (µs)", "p99 × no index", "CPU per write (µs)", "CPU × no index"}}
	med := func(rs []idWriteRun, f func(idWriteRun) float64) float64 {
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		return Measured("", "", v...).Median
	}
	for _, dc := range durs {
		for _, k := range idWriteCases {
			key := dc.name + ": " + k.Name
			rs := writeRuns[key]
			base := writeRuns[dc.name+": unrouted, no index"]
			if k.RoutedWrites {
				base = writeRuns[dc.name+": routed, no index"]
			}
			var ops, p50, p99, cpu []float64
			for _, r := range rs {
				ops, p50, p99, cpu = append(ops, r.OpsPerSec), append(p50, r.P50us), append(p99, r.P99us), append(cpu, r.CPUus)
			}
			a.Numbers = append(a.Numbers, Measured(key+": writes per second", "writes/s", ops...),
				Measured(key+": p99 latency", "µs", p99...), Measured(key+": CPU per write", "µs", cpu...))
			wt.Rows = append(wt.Rows, []string{dc.name, k.Name, num(med(rs, func(r idWriteRun) float64 { return r.OpsPerSec })),
				ratio(med(rs, func(r idWriteRun) float64 { return r.OpsPerSec }), med(base, func(r idWriteRun) float64 { return r.OpsPerSec })),
				num(med(rs, func(r idWriteRun) float64 { return r.P50us })), num(med(rs, func(r idWriteRun) float64 { return r.P99us })),
				ratio(med(rs, func(r idWriteRun) float64 { return r.P99us }), med(base, func(r idWriteRun) float64 { return r.P99us })),
				num(med(rs, func(r idWriteRun) float64 { return r.CPUus })),
				ratio(med(rs, func(r idWriteRun) float64 { return r.CPUus }), med(base, func(r idWriteRun) float64 { return r.CPUus }))})
		}
	}

	// 2. Split and merge.
	datasets := map[idSplitCase]string{}
	for _, k := range idSplitCases {
		indexed := k.Index != storage.IDIndexOff
		key := idSplitCase{Layout: k.Layout, Index: storage.IDIndexOff}
		if indexed {
			key.Index = storage.IDIndexRebuild
		}
		if _, ok := datasets[key]; ok {
			continue
		}
		ds := filepath.Join(cfg.Scratch, fmt.Sprintf("dataset-%s-%v", k.Layout, indexed))
		cfg.Progressf("q12: loading %d routed documents (%s, index %v)", splitDocs, k.Layout, indexed)
		if err := idDataset(ds, k.Layout, key.Index, splitDocs, func(int) bool { return true }, uint64(cfg.Seed)); err != nil {
			return a, fmt.Errorf("q12 dataset: %w", err)
		}
		datasets[key] = ds
	}
	dataset := func(k idSplitCase) string {
		if k.Index == storage.IDIndexOff {
			return datasets[k]
		}
		return datasets[idSplitCase{Layout: k.Layout, Index: storage.IDIndexRebuild}]
	}
	size, err := dirSize(dataset(idSplitCases[0]))
	if err != nil {
		return a, err
	}
	splitRuns := map[idSplitCase][]idSplitRun{}
	for run := range cfg.runs() {
		for _, k := range idSplitCases {
			if err := ctx.Err(); err != nil {
				return a, err
			}
			cfg.Progressf("q12: run %d, split and merge, %s", run+1, k)
			rdir := filepath.Join(cfg.Scratch, "split")
			r, err := idSplitOnce(dataset(k), rdir, k)
			os.RemoveAll(rdir)
			if err != nil {
				return a, fmt.Errorf("q12 split (%s): %w", k, err)
			}
			splitRuns[k] = append(splitRuns[k], r)
		}
	}
	st := Table{Header: []string{"case", "split (ms)", "clone phase (ms)", "children's _id entries (ms)", "entries kept / dropped",
		"split wrote (MiB)", "of it _id entries (MiB)", "merge (ms)", "merge wrote (MiB)"}}
	var labels []string
	splitBars, idBars, mergeBars := bars{Name: "split (ms)"}, bars{Name: "children's _id entries (ms)"}, bars{Name: "merge (ms)"}
	fields := func(rs []idSplitRun, f func(idSplitRun) float64) []float64 {
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		return v
	}
	for _, k := range idSplitCases {
		rs := splitRuns[k]
		m := func(f func(idSplitRun) float64) float64 { return Measured("", "", fields(rs, f)...).Median }
		a.Numbers = append(a.Numbers,
			Measured(k.String()+": split", "ms", fields(rs, func(r idSplitRun) float64 { return r.SplitMs })...),
			Measured(k.String()+": children's _id entries", "ms", fields(rs, func(r idSplitRun) float64 { return r.IDsMs })...),
			Measured(k.String()+": bytes the split wrote", "MiB", fields(rs, func(r idSplitRun) float64 { return r.SplitWrittenMiB })...),
			Measured(k.String()+": merge", "ms", fields(rs, func(r idSplitRun) float64 { return r.MergeMs })...),
			Measured(k.String()+": bytes the merge wrote", "MiB", fields(rs, func(r idSplitRun) float64 { return r.MergeWrittenMiB })...))
		st.Rows = append(st.Rows, []string{k.String(), num(m(func(r idSplitRun) float64 { return r.SplitMs })),
			num(m(func(r idSplitRun) float64 { return r.CloneMs })), num(m(func(r idSplitRun) float64 { return r.IDsMs })),
			fmt.Sprintf("%d / %d", rs[0].Kept, rs[0].Dropped),
			num(m(func(r idSplitRun) float64 { return r.SplitWrittenMiB })), num(m(func(r idSplitRun) float64 { return r.IDWrittenMiB })),
			num(m(func(r idSplitRun) float64 { return r.MergeMs })), num(m(func(r idSplitRun) float64 { return r.MergeWrittenMiB }))})
		labels = append(labels, k.String())
		splitBars.Values = append(splitBars.Values, m(func(r idSplitRun) float64 { return r.SplitMs }))
		idBars.Values = append(idBars.Values, m(func(r idSplitRun) float64 { return r.IDsMs }))
		mergeBars.Values = append(mergeBars.Values, m(func(r idSplitRun) float64 { return r.MergeMs }))
	}
	a.Tables = []Table{wt, st}
	if err := groupedBars(cfg.Out, "q12-idindex.png", fmt.Sprintf("Split and merge of a %.0f MiB shard, every document routed (medians)", float64(size)/(1<<20)),
		"ms", labels, []bars{splitBars, idBars, mergeBars}); err != nil {
		return a, err
	}
	a.Charts = []string{"q12-idindex.png"}
	a.Answer = idAnswer(durs[0].name, durs[1].name, writeRuns, splitRuns, splitDocs, float64(size)/(1<<20))
	a.Summary = idSummary(idFactsOf(durs[0].name, durs[1].name, writeRuns, splitRuns, float64(size)/(1<<20)))
	none := Measured("", "", cpuOf(writeRuns[durs[0].name+": unrouted, index, no routed document held"])...).Median /
		nonzero(Measured("", "", cpuOf(writeRuns[durs[0].name+": unrouted, no index"])...).Median)
	a.Goals = []Goal{ratioGoal("an unrouted write into a store that holds no routed document costs what it did without the index (CPU per write ≤ 1.05×, async durability)",
		none, 1.05, true, "CPU per write with the index over without, medians")}
	a.NotMeasured = "splits and merges under load (question 1's and 10's method); the keep-all children's cleanup of the foreign entries (question 2's); " +
		"a parent whose documents are partly routed (the index's cost is proportional to the routed ones; none costs nothing); " +
		"gets (a routed get whose document is under its own key reads as before; one that is not reads the index); " +
		"the request-durability cases' writes are too few to read a p99 finer than the fsync's spread."
	return a, nil
}

func cpuOf(rs []idWriteRun) []float64 {
	var v []float64
	for _, r := range rs {
		v = append(v, r.CPUus)
	}
	return v
}

func opsOf(rs []idWriteRun) []float64 {
	var v []float64
	for _, r := range rs {
		v = append(v, r.OpsPerSec)
	}
	return v
}

// dirSize is the bytes of the files under dir.
func dirSize(dir string) (int64, error) {
	u, err := storage.DirUsage(dir)
	return u.Unique, err
}

// idAnswer writes question 12's answer from the medians.
func idAnswer(async, request string, writes map[string][]idWriteRun, splits map[idSplitCase][]idSplitRun, splitDocs int, mib float64) string {
	medOps := func(key string) float64 { return Measured("", "", opsOf(writes[async+": "+key])...).Median }
	medReq := func(key string) float64 { return Measured("", "", opsOf(writes[request+": "+key])...).Median }
	medCPU := func(key string) float64 { return Measured("", "", cpuOf(writes[async+": "+key])...).Median }
	medP99 := func(key string) float64 {
		var v []float64
		for _, r := range writes[async+": "+key] {
			v = append(v, r.P99us)
		}
		return Measured("", "", v...).Median
	}
	medSplit := func(k idSplitCase, f func(idSplitRun) float64) float64 {
		var v []float64
		for _, r := range splits[k] {
			v = append(v, f(r))
		}
		return Measured("", "", v...).Median
	}
	splitMs := func(r idSplitRun) float64 { return r.SplitMs }
	var b strings.Builder
	fmt.Fprintf(&b, "At async durability (one writer), an unrouted write into a store with no routed document takes %s× the CPU of a write without the index "+
		"(%s× the writes/s), %s× into one that holds routed documents (an index seek), and a routed write %s× a routed write without the index "+
		"(%s → %s µs; writes/s %s×, p99 %s → %s µs: a seek, the home's read, the entry). ",
		ratio(medCPU("unrouted, index, no routed document held"), medCPU("unrouted, no index")),
		ratio(medOps("unrouted, index, no routed document held"), medOps("unrouted, no index")),
		ratio(medCPU("unrouted, index, routed documents held"), medCPU("unrouted, no index")),
		ratio(medCPU("routed, index"), medCPU("routed, no index")), num(medCPU("routed, no index")), num(medCPU("routed, index")),
		ratio(medOps("routed, index"), medOps("routed, no index")), num(medP99("routed, no index")), num(medP99("routed, index")))
	fmt.Fprintf(&b, "At request durability (four writers, each write waiting for its fsync) the ratios are %s×, %s× and %s×. ",
		ratio(medReq("unrouted, index, no routed document held"), medReq("unrouted, no index")),
		ratio(medReq("unrouted, index, routed documents held"), medReq("unrouted, no index")),
		ratio(medReq("routed, index"), medReq("routed, no index")))
	off := idSplitCase{storage.LayoutPerShard, storage.IDIndexOff}
	rb := idSplitCase{storage.LayoutPerShard, storage.IDIndexRebuild}
	sd := idSplitCase{storage.LayoutPerShard, storage.IDIndexScanDelete}
	soff, son := idSplitCase{storage.LayoutShared, storage.IDIndexOff}, idSplitCase{storage.LayoutShared, storage.IDIndexRebuild}
	fmt.Fprintf(&b, "Splitting a %.0f MiB shard whose %d documents are all routed takes %s ms without the index, %s ms rebuilding the children's entries "+
		"(%s ms of it, %s MiB written) and %s ms deleting the parent's others (%s ms); in the shared layout %s ms against %s ms (nothing to drop).",
		mib, splitDocs, num(medSplit(off, splitMs)), num(medSplit(rb, splitMs)),
		num(medSplit(rb, func(r idSplitRun) float64 { return r.IDsMs })), num(medSplit(rb, func(r idSplitRun) float64 { return r.IDWrittenMiB })),
		num(medSplit(sd, splitMs)), num(medSplit(sd, func(r idSplitRun) float64 { return r.IDsMs })),
		num(medSplit(son, splitMs)), num(medSplit(soff, splitMs)))
	mergeMs := func(r idSplitRun) float64 { return r.MergeMs }
	fmt.Fprintf(&b, " Merging the two children back takes %s ms without the index, %s ms after rebuilt children and %s ms after children that kept their parent's deleted entries.",
		num(medSplit(off, mergeMs)), num(medSplit(rb, mergeMs)), num(medSplit(sd, mergeMs)))
	return b.String()
}
