package sim

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/tests/simkit"
)

// defaultSeeds is how many seeds `go test ./tests/sim` runs; under the race
// detector (about 10x slower) raceSeeds.
const (
	defaultSeeds = 300
	raceSeeds    = 100
	// traceTail is how many trace lines a failing seed prints.
	traceTail = 30
	// detailed is how many failing seeds print their trace tail (the rest
	// print their one-line reproduction and finding only).
	detailed = 5
)

// runSeeds runs n seeds from first on parallel workers and returns the
// results in seed order.
func runSeeds(first uint64, n int) []result { return simkit.RunSeeds("sim", first, n, runSeed) }

// report is how TestSim reports its failed seeds.
var report = simkit.Report{Repro: reproLine, Detailed: detailed, TraceTail: traceTail, FullFinding: true, TraceUnit: "steps",
	Mask: simkit.MaskDigits}

func (r result) outcome() simkit.Outcome {
	return simkit.Outcome{Seed: r.seed, Finding: r.finding, Trace: r.trace}
}

func reproLine(seed uint64) string {
	return fmt.Sprintf("SHARDSPLIT_SIM_SEED=%d SHARDSPLIT_SIM_SEEDS=1 go test ./tests/sim -run 'TestSim$' -v", seed)
}

// TestSim runs the seeded simulation: each seed is one run with its own
// swarm of workload and faults (see the package doc).
func TestSim(t *testing.T) {
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
	t.Logf("%s; exercised: %d steps, %d client ops, %d splits done, %d aborted, %d merges done, %d aborted (%d bad plans), %d refused at reserve, "+
		"%d crashes, %d restarts, %d Pebble fatals, %d held readers, %d refused locks, %d hook cancels",
		simkit.Ran("seeds", n, first, elapsed, len(failed)), total.steps, total.clientOps,
		total.splitsDone, total.splitsAborted, total.mergesDone, total.mergesAborted, total.badMerges, total.refused, total.crashes, total.restarts, total.fatals, total.readers, total.locks, total.hookCancels)
	report.Summarize(t, failed)
}

// TestSimDeterminism runs the first 50 seeds (or SHARDSPLIT_SIM_SEEDS)
// twice each and reports how many produced the identical step trace. Set
// SHARDSPLIT_SIM_DETERMINISM=1 to run it (it doubles the cost).
func TestSimDeterminism(t *testing.T) {
	if os.Getenv("SHARDSPLIT_SIM_DETERMINISM") == "" {
		t.Skip("set SHARDSPLIT_SIM_DETERMINISM=1 to measure determinism")
	}
	first, n := simkit.SeedRange(t, 50)
	a, b := runSeeds(first, n), runSeeds(first, n)
	same := 0
	for i := range a {
		if slices.Equal(a[i].trace, b[i].trace) {
			same++
			continue
		}
		t.Logf("seed %d: %s", a[i].seed, simkit.Divergence(a[i].trace, b[i].trace))
	}
	t.Logf("%d of %d seeds produced the identical step trace twice", same, n)
}
