package findings

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/lab/crashpoint"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/storage"
)

func TestRatioGoal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		measured float64
		limit    float64
		atMost   bool
		met      bool
	}{
		{"at most, under", 1.1, 1.25, true, true},
		{"at most, equal", 1.25, 1.25, true, true},
		{"at most, over", 1.3, 1.25, true, false},
		{"at least, over", 0.97, 0.95, false, true},
		{"at least, under", 0.9, 0.95, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := ratioGoal("g", tc.measured, tc.limit, tc.atMost, "detail")
			if g.Met != tc.met || (g.Why == "") != tc.met {
				t.Fatalf("ratioGoal(%v, %v, %v) = %+v, want met %v with a reason when not", tc.measured, tc.limit, tc.atMost, g, tc.met)
			}
		})
	}
}

func TestSelect(t *testing.T) {
	qs, err := Select([]int{11, 1, 9})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, q := range qs {
		ids = append(ids, q.ID)
	}
	if diff := cmp.Diff([]int{1, 9, 11}, ids); diff != "" {
		t.Errorf("Select (-want +got):\n%s", diff)
	}
	for _, bad := range [][]int{{0}, {14}, {3, 3}} {
		if _, err := Select(bad); err == nil {
			t.Errorf("Select(%v): no error", bad)
		}
	}
	if all, _ := Select(nil); len(all) != 13 {
		t.Errorf("Select(nil): %d questions, want 13", len(all))
	}
}

// Question 1's cases: the goal case first (the large parent), one factor
// varied at a time around the small one, the held variant beside the goal
// case (and, in the full run, the small base and the shared layout).
func TestHandoffCases(t *testing.T) {
	for _, quick := range []bool{true, false} {
		cfg := Config{Quick: quick}
		goal, cases := cfg.handoffCases()
		_, large := cfg.parentSizes()
		if goal.Size != large || goal.Layout != storage.LayoutPerShard || goal.Rate != 5000 || goal.Ways != 2 || goal.Hold {
			t.Errorf("quick=%v: goal case %s", quick, goal)
		}
		held := goal
		held.Hold = true
		if cases[0] != goal || cases[1] != held {
			t.Errorf("quick=%v: first cases %s, %s; want the goal case and its held variant", quick, cases[0], cases[1])
		}
		holds, want := 0, 3
		if quick {
			want = 1
		}
		for _, k := range cases {
			if k.Hold {
				holds++
			}
		}
		if len(cases) != 6+want || holds != want {
			t.Errorf("quick=%v: %d cases, %d held; want %d, %d", quick, len(cases), holds, 6+want, want)
		}
	}
}

func TestHandoffAnswerAndGoals(t *testing.T) {
	goal, _ := Config{}.handoffCases()
	held := goal
	held.Hold = true
	worst := goal
	worst.Ways = 8
	rows := []handoffRow{
		{Case: goal, Stall: 12, Steady: 10, Node: 0.5, Window: 900, TputRate: 0.97},
		{Case: held, Stall: 30, Steady: 10, Node: 25, Window: 950, TputRate: 0.9},
		{Case: worst, Stall: 50, Steady: 10, Node: 1, Window: 2000, TputRate: 0.8},
	}
	a := handoffAnswer(goal, rows)
	for _, want := range []string{"12.0 ms", "10.0 ms", "1.20×", "0.5 ms", "8-way", "50.0 ms", "10.0× below MongoDB's 500 ms", "held the lock 25.0 ms instead of 0.5 ms", "stalled writes 30.0 ms instead of 12.0 ms"} {
		if !strings.Contains(a, want) {
			t.Errorf("answer lacks %q:\n%s", want, a)
		}
	}
	g := handoffGoals(goal, rows, false)
	if len(g) != 2 || !g[0].Met || !g[1].Met {
		t.Errorf("goals %+v, want both met (1.2 ≤ 1.25, 0.97 ≥ 0.95)", g)
	}
	rows[0].Stall = 20
	if g := handoffGoals(goal, rows, false); g[0].Met {
		t.Errorf("stall goal met at 2.0×: %+v", g[0])
	}
	rows[0].Stall = 12
	if g := handoffGoals(goal, rows, true); g[0].Met || !strings.Contains(g[0].Why, "quick run") {
		t.Errorf("quick goal %+v, want not met: not the goal's case", g[0])
	}
}

func TestScaleAnswerAndGoal(t *testing.T) {
	row := func(sz size, mib, window float64) scaleRow {
		return scaleRow{Case: splitCase{Layout: storage.LayoutPerShard, Size: sz, Rate: 5000, Ways: 2}, ParentMiB: mib, Window: window, Stall: 10, Steady: 8,
			P99First: 15, P99Steady: 10, Throughput: 0.97}
	}
	small, large, huge := size{"100 MiB", 100 << 10}, size{"1 GiB", 1 << 20}, size{"4 GiB", 4 << 20}
	for _, tc := range []struct {
		name    string
		rows    []scaleRow
		verdict string
		met     bool
		why     string
	}{
		{"flat", []scaleRow{row(small, 150, 400), row(large, 1200, 500), row(huge, 4800, 560)}, "close to flat", true, ""},
		{"growing", []scaleRow{row(small, 150, 400), row(huge, 4800, 1200)}, "growing, well below proportional", false, "above 1.50"},
		{"proportional", []scaleRow{row(small, 150, 400), row(huge, 4800, 9000)}, "roughly proportional", false, "above 1.50"},
		{"no 4 GiB", []scaleRow{row(small, 150, 400), row(large, 1200, 450)}, "close to flat", false, "not measured at 4 GiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a := scaleAnswer(tc.rows); !strings.Contains(a, tc.verdict) {
				t.Errorf("answer %q lacks %q", a, tc.verdict)
			}
			g := scaleGoals(tc.rows, false, "at the request")
			if len(g) != 1+4*len(tc.rows) || g[0].Met != tc.met || !strings.Contains(g[0].Why, tc.why) {
				t.Errorf("goal %+v, want met %v, why containing %q", g, tc.met, tc.why)
			}
			// Every row stalls 10 ms against 8 ms steady (1.25×), its first
			// second's p99 is 1.5× a steady second's, its throughput 0.97:
			// each at its bound, met.
			for _, sg := range g[1:] {
				if !sg.Met {
					t.Errorf("stall goal %+v not met", sg)
				}
			}
		})
	}
}

func TestScaleStallGoals(t *testing.T) {
	k := splitCase{Layout: storage.LayoutPerShard, Size: size{"4 GiB", 4 << 20}, Rate: 5000, Ways: 2, Align: true}
	small := k
	small.Size = size{"100 MiB", 100 << 10}
	g := scaleGoals([]scaleRow{{Case: small, ParentMiB: 150, Window: 100, Stall: 9, Steady: 1.5, P99First: 16, P99Steady: 10, Throughput: 0.96},
		{Case: k, ParentMiB: 4800, Window: 120, Stall: 21, Steady: 20, P99First: 14, P99Steady: 10, Throughput: 0.98}}, false, "after the parent's own flush")
	var got []string
	for _, x := range g {
		got = append(got, fmt.Sprintf("%s: %v", x.Goal, x.Met))
	}
	want := []string{
		"4 GiB parent, split after the parent's own flush: split time ≤ 1.5× the 100 MiB split: true",
		"100 MiB parent, split after the parent's own flush: longest stall ≤ 20 ms: true",
		"100 MiB parent, split after the parent's own flush: longest stall ≤ 1.25× the steady windows as long: false",
		"100 MiB parent, split after the parent's own flush: write p99 of the first second ≤ 1.5× a steady second's: false",
		"100 MiB parent, split after the parent's own flush: throughput during ≥ 0.97 of steady: false",
		"4 GiB parent, split after the parent's own flush: longest stall ≤ 20 ms: false",
		"4 GiB parent, split after the parent's own flush: longest stall ≤ 1.25× the steady windows as long: true",
		"4 GiB parent, split after the parent's own flush: write p99 of the first second ≤ 1.5× a steady second's: true",
		"4 GiB parent, split after the parent's own flush: throughput during ≥ 0.97 of steady: true",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("goals (-want +got):\n%s", diff)
	}
}

func TestMergeAnswer(t *testing.T) {
	k := splitCase{Layout: storage.LayoutPerShard, Size: size{"1 GiB", 1 << 20}, Rate: 5000, Merge: true}
	a := mergeAnswer([]mergeRow{{Case: k, Window: 2500, Stall: 40, Steady: 20, Tput: 0.9, Copied: 512}})
	for _, want := range []string{"merge of 2 siblings", "2500 ms", "40.0 ms against 20.0 ms steady (2.00×)", "0.90 of steady", "512 MiB copied"} {
		if !strings.Contains(a, want) {
			t.Errorf("answer lacks %q:\n%s", want, a)
		}
	}
}

func TestCrashTallyAndAnswer(t *testing.T) {
	boom := errors.New("boom")
	results := []crashpoint.Result{
		{Seed: 1, Points: []crashpoint.Point{
			{Index: 1, Op: crashpoint.OpSplit},
			{Index: 2, Op: crashpoint.OpSplit, Recovered: []string{"split roll-back"}},
			{Index: 3, Op: crashpoint.OpNestedSplit, Recovered: []string{"split roll-forward"}},
			{Index: 4, Op: crashpoint.OpMerge, Recovered: []string{"merge roll-back"}, Err: boom},
		}},
		{Seed: 2, Points: []crashpoint.Point{{Index: 1, Op: crashpoint.OpMerge, Recovered: []string{"merge roll-forward"}}}},
	}
	tl := tallyCrash(results)
	want := crashTally{Scenarios: 2, Points: 5, Clean: 1, Failed: 1,
		ByOp:      map[string]int{"split": 2, "nested split": 1, "merge": 2},
		Recovered: map[string]int{"split roll-back": 1, "split roll-forward": 1, "merge roll-back": 1, "merge roll-forward": 1}}
	if diff := cmp.Diff(want, tl, cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "Examples" }, cmp.Ignore())); diff != "" {
		t.Errorf("tally (-want +got):\n%s", diff)
	}
	a := crashAnswer(tl, 3, 2, 2, nil)
	for _, want := range []string{"5 crash points", "2 during splits, 1 during nested splits, 2 during merges", "4 recovered", "back 2 times and forward 2 times", "1 clones had nothing", "3 real kill -9s", "2 left a directory", "2 of those verified"} {
		if !strings.Contains(a, want) {
			t.Errorf("answer lacks %q:\n%s", want, a)
		}
	}
	if a := crashAnswer(tl, 0, 0, 0, errors.New("no splitdemo binary to run")); !strings.Contains(a, "No kill -9 run was made (no splitdemo binary to run)") {
		t.Errorf("answer without kills: %s", a)
	}
}

// The steady stall is the median over windows as long as the split's; a
// split window longer than the steady span measures the whole span (it
// read 0 for an 8-way split of 2.1 s against a 2 s span).
func TestSteadyStall(t *testing.T) {
	ms := time.Millisecond
	// One write at a time, acknowledged 10 ms after it starts, back to
	// back, except one that takes 50 ms starting at 1,000 ms.
	var recs []loadgen.Record
	for at := time.Duration(0); at < 2000*ms; {
		d := 10 * ms
		if at == 1000*ms {
			d = 50 * ms
		}
		recs = append(recs, loadgen.Record{Start: at, End: at + d, OK: true, Moving: true})
		at += d
	}
	for _, tc := range []struct {
		w, want time.Duration
	}{
		{100 * ms, 10 * ms},  // most 100 ms windows hold no slow write
		{3000 * ms, 50 * ms}, // cut to the 2 s span: the slow write is in it
	} {
		if got := steadyStall(recs, 0, 2000*ms, tc.w); got != tc.want {
			t.Errorf("steadyStall(w=%v) = %v, want %v", tc.w, got, tc.want)
		}
	}
}
