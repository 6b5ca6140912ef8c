package clustersim

import (
	"fmt"
	"hash/fnv"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/tests/simkit"
)

// defaultSeeds is how many seeds `go test ./tests/sim/cluster` runs; under
// the race detector raceSeeds.
const (
	defaultSeeds = 300
	raceSeeds    = 60
	traceTail    = 40
	detailed     = 5
)

// Bounds of the phases, in rounds.
const (
	formRounds  = 400  // the cluster forms, the index goes green
	quietRounds = 1500 // after the faults: green, every request answered, nothing in flight
)

type result struct {
	seed    uint64
	finding string
	trace   []string
	hash    uint64
	stats   stats
	split   splitResult
	// took is the seed's wall time (reported, never in the trace).
	took time.Duration
}

func runSeeds(first uint64, n int) []result { return runSeedsWith(first, n, runSeed) }

// runSeedsWith runs n seeds of runSeed from first on parallel workers and
// returns the results in seed order, each with its wall time.
func runSeedsWith(first uint64, n int, runSeed func(uint64) result) []result {
	return simkit.RunSeeds("clustersim", first, n, func(seed uint64) result {
		start := time.Now()
		r := runSeed(seed)
		r.took = time.Since(start)
		return r
	})
}

// report is how the tests report their failed seeds; TestClusterSplitSim
// reruns with its own line.
var report = simkit.Report{Repro: reproLine, Detailed: detailed, TraceTail: traceTail, TraceUnit: "lines", Mask: maskFinding}

func (r result) outcome() simkit.Outcome {
	return simkit.Outcome{Seed: r.seed, Finding: r.finding, Trace: r.trace}
}

func reproLine(seed uint64) string {
	return fmt.Sprintf("SHARDSPLIT_SIM_SEED=%d SHARDSPLIT_SIM_SEEDS=1 go test ./tests/sim/cluster -run 'TestClusterSim$' -v", seed)
}

// runSeed runs one seed to its end or its first finding.
func runSeed(seed uint64) result { return runWorld(newWorld(seed)) }

// runWorld runs a world to its end or its first finding.
func runWorld(w *world) (res result) {
	seed := w.seed
	defer func() {
		if p := recover(); p != nil {
			w.fail("panic: %v", p)
		}
		for _, sn := range w.live() {
			_ = sn.n.Close()
		}
		h := fnv.New64a()
		for _, line := range w.trace {
			_, _ = h.Write([]byte(line))
			_, _ = h.Write([]byte{'\n'})
		}
		w.stats.steps = w.step
		res = result{seed: seed, finding: w.finding, trace: w.trace, hash: h.Sum64(), stats: w.stats}
		if w.split != nil {
			res.split = w.split.result()
		}
	}()
	w.run()
	return
}

func (w *world) run() {
	if !w.form() {
		return
	}
	if w.split != nil {
		w.split.begin()
	}
	for w.step = 1; w.step <= w.sw.steps && w.finding == ""; w.step++ {
		w.safetyStep()
	}
	if w.finding != "" {
		return
	}
	w.quiet()
}

// form starts the cluster and creates the index, with no faults.
func (w *world) form() bool {
	for i := 0; ; i++ {
		if i == formRounds {
			w.fail("liveness: no cluster of %d nodes after %d rounds", len(w.names), formRounds)
			return false
		}
		if st := w.latest(); st != nil && len(st.Nodes) == len(w.names) {
			break
		}
		w.round(100, 0, 0)
	}
	var created *error
	creator := w.nodes[w.names[w.rng.IntN(len(w.names))]].n
	settings := map[string]string{"index.number_of_shards": fmt.Sprint(w.sw.shards),
		"index.number_of_replicas": fmt.Sprint(w.sw.replicas)}
	if w.split != nil {
		// Room for the split: each shard holds 8 routing partitions.
		settings["index.number_of_routing_shards"] = fmt.Sprint(8 * w.sw.shards)
		settings[cluster.SettingReplicaSplit] = w.split.strategy
	}
	creator.CreateIndex(index, settings, nil, 0, func(err error) { created = &err })
	creator.Flush()
	for i := 0; ; i++ {
		if i == formRounds {
			w.fail("liveness: index %s not green after %d rounds (created: %v)", index, formRounds, created)
			return false
		}
		if created != nil && *created != nil {
			w.fail("create index %s: %v", index, *created)
			return false
		}
		if st := w.latest(); created != nil && st.Indices[index] != nil && st.Health().Indices[index].Status == cluster.Green {
			w.logf("formed", "state v%d, %s green", st.Version, index)
			return true
		}
		w.round(100, 0, 0)
	}
}

// safetyStep is one step under faults: clients call, a fault may strike,
// some traffic moves, every node ticks, and the checks run.
func (w *world) safetyStep() {
	for _, c := range w.clients {
		if !c.busy && w.rng.IntN(2) == 0 {
			w.clientOp(c)
		}
	}
	if w.split != nil {
		w.split.step()
	}
	w.maybeFault()
	w.round(w.sw.deliverPct, w.sw.dropPct, w.sw.dupPct)
	if w.finding == "" {
		w.checkStep()
	}
}

func (w *world) maybeFault() {
	hold := w.split != nil && w.split.holdFaults()
	if !hold && w.rng.IntN(100) < w.sw.crashPct {
		dead := w.dead()
		live := w.live()
		if len(dead) > 0 && (len(live) <= 1 || w.rng.IntN(2) == 0) {
			w.restart(dead[w.rng.IntN(len(dead))])
		} else if len(live) > 1 {
			w.crash(live[w.rng.IntN(len(live))].name, "node crash")
		}
	}
	if !hold && w.rng.IntN(100) < w.sw.leaderKillPct && len(w.live()) > 1 {
		for _, sn := range w.live() {
			if sn.n.Manager().IsLeader() {
				w.stats.leaderKills++
				w.crash(sn.name, "the cluster manager's leader")
				break
			}
		}
	}
	if !hold && w.rng.IntN(100) < w.sw.partitionPct {
		w.partition()
	}
	if w.rng.IntN(100) < w.sw.diskPct {
		sn := w.nodes[w.names[w.rng.IntN(len(w.names))]]
		pct, steps := []int{10, 30, 60}[w.rng.IntN(3)], 1+w.rng.IntN(8)
		sn.faults.arm(pct)
		sn.faultsUntil = w.step + steps
		w.stats.diskFaults++
		w.logf("disk", "%s fails %d%% of its COPY and recovery writes for %d steps", sn.name, pct, steps)
	}
	for _, name := range w.names {
		sn := w.nodes[name]
		if n := sn.faults.take(); n > 0 {
			w.stats.ioErrors += n
			w.logf("disk", "%s: %d writes failed", name, n)
		}
		if sn.faultsUntil == w.step {
			sn.faults.arm(0)
		}
	}
}

// partition cuts links (a node isolated, a pair both ways, one way) or
// heals them all.
func (w *world) partition() {
	a := w.names[w.rng.IntN(len(w.names))]
	b := w.names[w.rng.IntN(len(w.names))]
	switch r := w.rng.IntN(4); {
	case r == 0 || len(w.cuts) >= 3:
		w.net.Heal()
		w.logf("heal", "every link (was %v)", w.cuts)
		w.cuts = nil
	case r == 1:
		w.net.Isolate(a)
		w.cuts = append(w.cuts, a+"|*")
		w.logf("partition", "%s isolated", a)
	case a == b:
		w.logf("partition", "none (%s to itself)", a)
	case r == 2:
		w.net.CutBoth(a, b)
		w.cuts = append(w.cuts, a+"|"+b)
		w.logf("partition", "%s and %s cut both ways", a, b)
	default:
		w.net.Cut(a, b)
		w.cuts = append(w.cuts, a+">"+b)
		w.logf("partition", "%s to %s cut (one way)", a, b)
	}
	w.stats.partitions++
}

// quiet removes every fault, waits for the cluster to settle, reads every
// key, and runs the end checks.
func (w *world) quiet() {
	w.net.Heal()
	w.cuts = nil
	if w.split != nil {
		w.split.heal("quiet")
	}
	for _, name := range w.names {
		w.nodes[name].faults.arm(0)
	}
	for _, name := range w.dead() {
		w.restart(name)
	}
	w.logf("quiet", "faults off")
	settled := func() bool {
		for _, c := range w.clients {
			if c.busy {
				return false
			}
		}
		st := w.latest()
		if st.Indices[index] == nil || st.Health().Indices[index].Status != cluster.Green || len(st.Nodes) != len(w.names) {
			return false
		}
		for _, sn := range w.live() {
			if sn.n.State().Version != st.Version {
				return false
			}
		}
		if w.split != nil && !w.split.settled(st) {
			return false
		}
		return w.caughtUp(st)
	}
	for i := 0; !settled(); i++ {
		if i == quietRounds {
			st := w.latest()
			if err := w.copiesEqual(); err != nil {
				w.fail("copies differ once quiet (not caught up %d rounds after the faults ended): %v", quietRounds, err)
				w.logf("state", "%s", w.describeState(st))
				return
			}
			w.fail("liveness: not settled %d rounds after the faults ended: state v%d, %d nodes, health %v, %d messages pending, clients busy %v",
				quietRounds, st.Version, len(st.Nodes), st.Health().Indices[index], w.net.Pending(), w.busyClients())
			w.logf("state", "%s", w.describeState(st))
			return
		}
		w.round(100, 0, 0)
		w.checkStep()
		if w.finding != "" {
			return
		}
	}
	w.step++
	w.logf("settled", "state v%d", w.latest().Version)
	for _, key := range w.keys {
		c := w.clients[0]
		w.get(c, w.anyLive(), key)
		for i := 0; c.busy && i < 300; i++ {
			w.round(100, 0, 0)
		}
		if c.busy {
			w.fail("liveness: the final read of %s was not answered", key)
			return
		}
	}
	if w.finding != "" {
		return
	}
	if err := w.copiesEqual(); err != nil {
		w.fail("copies differ once quiet: %v", err)
		return
	}
	if w.split != nil {
		if w.split.checkEnd(); w.finding != "" {
			return
		}
	}
	switch w.hist.Check(20 * time.Second) {
	case porcupine.Illegal:
		w.fail("porcupine: the history of keys %v is not linearizable", w.hist.Sample)
	case porcupine.Unknown:
		w.logf("porcupine", "timed out (not counted as a pass or a finding)")
	default:
		w.logf("porcupine", "%d operations on %v linearizable", len(w.hist.Ops), w.hist.Sample)
	}
}

func (w *world) busyClients() []int {
	var out []int
	for _, c := range w.clients {
		if c.busy {
			out = append(out, c.id)
		}
	}
	return out
}

// TestClusterSim runs the seeded multi-node simulation (see doc.go).
func TestClusterSim(t *testing.T) {
	def := defaultSeeds
	if raceEnabled {
		def = raceSeeds
	}
	first, n := simkit.SeedRange(t, def)
	start := time.Now()
	results := runSeeds(first, n)
	elapsed := time.Since(start)
	var total stats
	for _, r := range results {
		total.add(r.stats)
	}
	failed := report.Failures(t, simkit.Outcomes(results, result.outcome), first)
	t.Logf("%s; exercised: %d steps, %d writes (%d acknowledged), %d reads, "+
		"%d crashes (%d of the leader), %d restarts, %d partition changes, %d drops, %d duplicates, %d promotions, %d disk faults armed (%d writes failed)",
		simkit.Ran("seeds", n, first, elapsed, len(failed)), total.steps, total.writes, total.acked,
		total.reads, total.crashes, total.leaderKills, total.restarts, total.partitions, total.drops, total.dups, total.promotions,
		total.diskFaults, total.ioErrors)
	report.Summarize(t, failed)
}

// idPattern matches allocation ids and index uuids (20-22 url-safe
// characters), which differ in every seed.
var idPattern = regexp.MustCompile(`[A-Za-z0-9_-]{20,22}`)

// maskFinding masks what differs from seed to seed in a finding: ids,
// then digits.
func maskFinding(s string) string { return simkit.MaskDigits(idPattern.ReplaceAllString(s, "ID")) }

// TestClusterSimDeterminism runs the first 50 seeds (or
// SHARDSPLIT_SIM_SEEDS) twice each and reports how many produced the
// identical trace (the same hash). Set SHARDSPLIT_SIM_DETERMINISM=1 to run
// it.
func TestClusterSimDeterminism(t *testing.T) {
	if os.Getenv("SHARDSPLIT_SIM_DETERMINISM") == "" {
		t.Skip("set SHARDSPLIT_SIM_DETERMINISM=1 to measure determinism")
	}
	first, n := simkit.SeedRange(t, 50)
	run := runSeed
	if os.Getenv("SHARDSPLIT_SIM_SPLIT") != "" {
		run = runSplitSeed
	}
	a, b := runSeedsWith(first, n, run), runSeedsWith(first, n, run)
	same := 0
	for i := range a {
		if a[i].hash == b[i].hash {
			same++
			continue
		}
		t.Logf("seed %d: %s", a[i].seed, simkit.Divergence(a[i].trace, b[i].trace))
	}
	t.Logf("%d of %d seeds produced the identical trace twice", same, n)
}
