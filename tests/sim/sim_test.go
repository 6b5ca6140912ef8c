package sim

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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

// seedRange reads SHARDSPLIT_SIM_SEED (first seed, default 1) and
// SHARDSPLIT_SIM_SEEDS (how many).
func seedRange(t *testing.T, def int) (first uint64, n int) {
	first, n = 1, def
	if s := os.Getenv("SHARDSPLIT_SIM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SHARDSPLIT_SIM_SEED=%q: %v", s, err)
		}
		first = v
	}
	if s := os.Getenv("SHARDSPLIT_SIM_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("SHARDSPLIT_SIM_SEEDS=%q: want a positive count", s)
		}
		n = v
	}
	return first, n
}

// runSeeds runs n seeds from first on parallel workers and returns the
// results in seed order.
func runSeeds(first uint64, n int) []result {
	results := make([]result, n)
	workers := max(1, min(runtime.GOMAXPROCS(0), n))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if progress {
					fmt.Fprintf(os.Stderr, "sim: seed %d\n", first+uint64(i))
				}
				results[i] = runSeed(first + uint64(i))
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}

// progress (SHARDSPLIT_SIM_PROGRESS=1) prints each seed as it starts, to
// find the seed when a Pebble goroutine's panic kills the test binary.
var progress = os.Getenv("SHARDSPLIT_SIM_PROGRESS") != ""

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
	first, n := seedRange(t, def)
	start := time.Now()
	results := runSeeds(first, n)
	elapsed := time.Since(start)
	var total stats
	var failed []result
	for _, r := range results {
		total.add(r.stats)
		if r.finding != "" {
			failed = append(failed, r)
		}
	}
	for i, r := range failed {
		msg := fmt.Sprintf("seed %d failed: %s\nrerun: %s", r.seed, firstLine(r.finding), reproLine(r.seed))
		if i < detailed || n == 1 {
			tail := r.trace[max(0, len(r.trace)-traceTail):]
			msg += fmt.Sprintf("\n%s\nlast %d steps of its trace:\n  %s", r.finding, len(tail), strings.Join(tail, "\n  "))
		}
		t.Error(msg)
	}
	if n == 1 && testing.Verbose() {
		t.Logf("trace of seed %d:\n  %s", first, strings.Join(results[0].trace, "\n  "))
	}
	t.Logf("%d seeds from %d in %v (%.1f seeds/s), %d failed; exercised: %d steps, %d client ops, %d splits done, %d aborted, %d merges done, %d aborted (%d bad plans), %d refused at reserve, "+
		"%d crashes, %d restarts, %d Pebble fatals, %d held readers, %d refused locks, %d hook cancels",
		n, first, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), len(failed), total.steps, total.clientOps,
		total.splitsDone, total.splitsAborted, total.mergesDone, total.mergesAborted, total.badMerges, total.refused, total.crashes, total.restarts, total.fatals, total.readers, total.locks, total.hookCancels)
	if len(failed) > 0 {
		t.Logf("failing seeds by finding:\n%s", summarize(failed))
	}
}

// summarize groups failing seeds by the first line of their finding with
// digits masked.
func summarize(failed []result) string {
	groups := map[string][]uint64{}
	var keys []string
	for _, r := range failed {
		k := maskDigits(firstLine(r.finding))
		if len(k) > 160 {
			k = k[:160]
		}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r.seed)
	}
	slices.SortFunc(keys, func(a, b string) int { return len(groups[b]) - len(groups[a]) })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %3d seeds (e.g. %v): %s\n", len(groups[k]), groups[k][:min(5, len(groups[k]))], k)
	}
	return b.String()
}

func maskDigits(s string) string {
	var b strings.Builder
	prev := false
	for _, r := range s {
		if r >= '0' && r <= '9' {
			if !prev {
				b.WriteByte('N')
			}
			prev = true
			continue
		}
		prev = false
		b.WriteRune(r)
	}
	return b.String()
}

// TestSimDeterminism runs the first 50 seeds (or SHARDSPLIT_SIM_SEEDS)
// twice each and reports how many produced the identical step trace. Set
// SHARDSPLIT_SIM_DETERMINISM=1 to run it (it doubles the cost).
func TestSimDeterminism(t *testing.T) {
	if os.Getenv("SHARDSPLIT_SIM_DETERMINISM") == "" {
		t.Skip("set SHARDSPLIT_SIM_DETERMINISM=1 to measure determinism")
	}
	first, n := seedRange(t, 50)
	a, b := runSeeds(first, n), runSeeds(first, n)
	same := 0
	for i := range a {
		if slices.Equal(a[i].trace, b[i].trace) {
			same++
			continue
		}
		j := 0
		for j < len(a[i].trace) && j < len(b[i].trace) && a[i].trace[j] == b[i].trace[j] {
			j++
		}
		diverge := func(tr []string) string {
			if j < len(tr) {
				return tr[j]
			}
			return "(end)"
		}
		t.Logf("seed %d: traces differ at line %d of %d/%d:\n  run 1: %s\n  run 2: %s", a[i].seed, j, len(a[i].trace), len(b[i].trace), diverge(a[i].trace), diverge(b[i].trace))
	}
	t.Logf("%d of %d seeds produced the identical step trace twice", same, n)
}
