package simkit

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

// SeedRange reads SHARDSPLIT_SIM_SEED (the first seed, default 1) and
// SHARDSPLIT_SIM_SEEDS (how many, default def), failing t on a value that
// is not a number.
func SeedRange(t testing.TB, def int) (first uint64, n int) {
	t.Helper()
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

// Progress (SHARDSPLIT_SIM_PROGRESS=1) prints each seed as it starts, to
// find the seed when a goroutine's panic (Pebble's, say) kills the test
// binary.
var Progress = os.Getenv("SHARDSPLIT_SIM_PROGRESS") != ""

// RunSeeds runs n seeds from first on parallel workers (GOMAXPROCS, at
// most n) and returns their results in seed order. With Progress it prints
// "<name>: seed N" to stderr as each starts.
func RunSeeds[R any](name string, first uint64, n int, run func(seed uint64) R) []R {
	results := make([]R, n)
	workers := max(1, min(runtime.GOMAXPROCS(0), n))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if Progress {
					fmt.Fprintf(os.Stderr, "%s: seed %d\n", name, first+uint64(i))
				}
				results[i] = run(first + uint64(i))
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

// Outcome is what the report reads of one seed's result.
type Outcome struct {
	Seed uint64
	// Finding is the seed's first finding, "" if it passed.
	Finding string
	Trace   []string
}

// Outcomes turns a simulation's results into the report's outcomes.
func Outcomes[R any](results []R, outcome func(R) Outcome) []Outcome {
	out := make([]Outcome, len(results))
	for i, r := range results {
		out[i] = outcome(r)
	}
	return out
}

// Report says how a simulation reports its failed seeds.
type Report struct {
	// Repro is the command line that reruns one seed alone.
	Repro func(seed uint64) string
	// Detailed is how many failed seeds print the tail of their trace,
	// TraceTail lines of it (the rest print their rerun line and the first
	// line of their finding only).
	Detailed, TraceTail int
	// FullFinding prints a detailed seed's whole finding above its trace's
	// tail.
	FullFinding bool
	// TraceUnit names the trace's lines in the tail's heading ("last 30
	// steps of its trace").
	TraceUnit string
	// Mask masks what differs from seed to seed in a finding's first line
	// (MaskDigits, at least), so that Summarize groups alike findings.
	Mask func(string) string
}

// Failures fails t once per failed seed of outcomes (the seeds from first
// on), with its rerun line and, for the first Detailed (or a single seed),
// its trace's tail; a single seed run verbosely logs its whole trace. It
// returns the failed seeds' outcomes.
func (rep Report) Failures(t testing.TB, outcomes []Outcome, first uint64) []Outcome {
	t.Helper()
	var failed []Outcome
	for _, o := range outcomes {
		if o.Finding != "" {
			failed = append(failed, o)
		}
	}
	n := len(outcomes)
	for i, o := range failed {
		msg := fmt.Sprintf("seed %d failed: %s\nrerun: %s", o.Seed, FirstLine(o.Finding), rep.Repro(o.Seed))
		if i < rep.Detailed || n == 1 {
			tail := o.Trace[max(0, len(o.Trace)-rep.TraceTail):]
			if rep.FullFinding {
				msg += "\n" + o.Finding
			}
			msg += fmt.Sprintf("\nlast %d %s of its trace:\n  %s", len(tail), rep.TraceUnit, strings.Join(tail, "\n  "))
		}
		t.Error(msg)
	}
	if n == 1 && testing.Verbose() {
		t.Logf("trace of seed %d:\n  %s", first, strings.Join(outcomes[0].Trace, "\n  "))
	}
	return failed
}

// Summarize logs, if any seed failed, the failed seeds grouped by the
// first line of their finding, masked (Mask), the largest group first.
func (rep Report) Summarize(t testing.TB, failed []Outcome) {
	t.Helper()
	if len(failed) == 0 {
		return
	}
	groups := map[string][]uint64{}
	var keys []string
	for _, o := range failed {
		k := rep.Mask(FirstLine(o.Finding))
		if len(k) > 160 {
			k = k[:160]
		}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], o.Seed)
	}
	slices.SortFunc(keys, func(a, b string) int { return len(groups[b]) - len(groups[a]) })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %3d seeds (e.g. %v): %s\n", len(groups[k]), groups[k][:min(5, len(groups[k]))], k)
	}
	t.Logf("failing seeds by finding:\n%s", b.String())
}

// Ran words the head of a run's summary line, "N seeds from S in D (R
// seeds/s), K failed" (other tools and docs grep it); what names the
// seeds ("seeds", "split seeds").
func Ran(what string, n int, first uint64, elapsed time.Duration, failed int) string {
	return fmt.Sprintf("%d %s from %d in %v (%.1f seeds/s), %d failed", n, what, first, elapsed.Round(time.Millisecond),
		float64(n)/elapsed.Seconds(), failed)
}

// Divergence says where two traces of one seed first differ, for the
// determinism checks.
func Divergence(a, b []string) string {
	j := 0
	for j < len(a) && j < len(b) && a[j] == b[j] {
		j++
	}
	at := func(tr []string) string {
		if j < len(tr) {
			return tr[j]
		}
		return "(end)"
	}
	return fmt.Sprintf("traces differ at line %d of %d/%d:\n  run 1: %s\n  run 2: %s", j, len(a), len(b), at(a), at(b))
}

// FirstLine is s up to its first newline.
func FirstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// MaskDigits replaces every run of digits in s with one N.
func MaskDigits(s string) string {
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
