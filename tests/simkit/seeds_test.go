package simkit

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestSeedRangeReadsTheEnvironment(t *testing.T) {
	t.Setenv("SHARDSPLIT_SIM_SEED", "")
	t.Setenv("SHARDSPLIT_SIM_SEEDS", "")
	if first, n := SeedRange(t, 300); first != 1 || n != 300 {
		t.Errorf("defaults: %d, %d; want 1, 300", first, n)
	}
	t.Setenv("SHARDSPLIT_SIM_SEED", "1047")
	t.Setenv("SHARDSPLIT_SIM_SEEDS", "3")
	if first, n := SeedRange(t, 300); first != 1047 || n != 3 {
		t.Errorf("SHARDSPLIT_SIM_SEED=1047 SHARDSPLIT_SIM_SEEDS=3: %d, %d", first, n)
	}
}

func TestRunSeedsReturnsResultsInSeedOrder(t *testing.T) {
	got := RunSeeds("simkit", 40, 25, func(seed uint64) string { return fmt.Sprint(seed) })
	for i, r := range got {
		if want := fmt.Sprint(40 + i); r != want {
			t.Fatalf("result %d is seed %s's, want seed %s's", i, r, want)
		}
	}
}

// recorder is a testing.TB that keeps what a report says.
type recorder struct {
	testing.TB
	errors, logs []string
}

func (r *recorder) Helper()           {}
func (r *recorder) Error(args ...any) { r.errors = append(r.errors, fmt.Sprint(args...)) }
func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}
func (r *recorder) Failed() bool                      { return len(r.errors) > 0 }
func (r *recorder) Errorf(format string, args ...any) { r.Error(fmt.Sprintf(format, args...)) }
func (r *recorder) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Every failed seed fails the test with its rerun line; the first
// Detailed show their trace's tail; the summary groups alike findings.
func TestReportFailsOncePerFailedSeed(t *testing.T) {
	outcomes := []Outcome{
		{Seed: 7, Trace: []string{"a"}},
		{Seed: 8, Finding: "shard 3 lost doc k12\ndetail", Trace: []string{"x", "y", "z"}},
		{Seed: 9, Finding: "shard 4 lost doc k7", Trace: []string{"p"}},
		{Seed: 10, Finding: "hang", Trace: nil},
	}
	rep := Report{Repro: func(seed uint64) string { return fmt.Sprintf("rerun %d", seed) }, Detailed: 1, TraceTail: 2,
		FullFinding: true, TraceUnit: "steps", Mask: MaskDigits}
	r := &recorder{TB: t}
	failed := rep.Failures(r, outcomes, 7)
	if len(failed) != 3 || len(r.errors) != 3 {
		t.Fatalf("%d failed, %d errors; want 3 each: %q", len(failed), len(r.errors), r.errors)
	}
	if want := "seed 8 failed: shard 3 lost doc k12\nrerun: rerun 8\nshard 3 lost doc k12\ndetail\nlast 2 steps of its trace:\n  y\n  z"; r.errors[0] != want {
		t.Errorf("first failure:\n%s\nwant:\n%s", r.errors[0], want)
	}
	if want := "seed 9 failed: shard 4 lost doc k7\nrerun: rerun 9"; r.errors[1] != want {
		t.Errorf("second failure (not detailed):\n%s\nwant:\n%s", r.errors[1], want)
	}
	rep.Summarize(r, failed)
	if len(r.logs) != 1 || !strings.Contains(r.logs[0], "    2 seeds (e.g. [8 9]): shard N lost doc kN\n") ||
		!strings.Contains(r.logs[0], "    1 seeds (e.g. [10]): hang\n") {
		t.Errorf("summary: %q", r.logs)
	}
	quiet := &recorder{TB: t}
	rep.Summarize(quiet, nil)
	if len(quiet.logs) != 0 {
		t.Errorf("a run without failures logged %q", quiet.logs)
	}
}

// Ran's line is what other tools and the docs grep.
func TestRanWordsTheSummaryLine(t *testing.T) {
	got := Ran("seeds", 200, 1, 4*time.Second+1234567*time.Nanosecond, 0)
	if want := "200 seeds from 1 in 4.001s (50.0 seeds/s), 0 failed"; got != want {
		t.Errorf("Ran = %q, want %q", got, want)
	}
}

func TestDivergenceNamesTheFirstDifferingLine(t *testing.T) {
	got := Divergence([]string{"a", "b", "c"}, []string{"a", "x"})
	if want := "traces differ at line 1 of 3/2:\n  run 1: b\n  run 2: x"; got != want {
		t.Errorf("Divergence = %q, want %q", got, want)
	}
	if got := Divergence([]string{"a"}, []string{"a", "b"}); !strings.HasSuffix(got, "run 1: (end)\n  run 2: b") {
		t.Errorf("a trace that ends first: %q", got)
	}
}

func TestMaskDigitsMasksEachRunOnce(t *testing.T) {
	if got := MaskDigits("seed 1047: shard 3 v12"); got != "seed N: shard N vN" {
		t.Errorf("MaskDigits = %q", got)
	}
}
