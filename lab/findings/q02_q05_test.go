package findings

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
)

// strategyRunOf on a hand-made outcome: reads per window, the writes/s
// while the cleanup ran and in the second after the split window, and
// the disk series on the split request's clock.
func TestStrategyRunOf(t *testing.T) {
	sec, ms := time.Second, time.Millisecond
	var recs []loadgen.Record
	// A write every 10 ms, 1 ms long, from 0 to 6 s; none acknowledged in
	// [4.5 s, 4.6 s) while the cleanup runs (they end at 4.6 s).
	for at := time.Duration(0); at < 6*sec; at += 10 * ms {
		end := at + ms
		if at >= 4500*ms && at < 4600*ms {
			end = 4600 * ms
		}
		recs = append(recs, loadgen.Record{Start: at, End: end, OK: true, Moving: true})
	}
	reads := &loadgen.ReadResult{}
	for at := time.Duration(0); at < 6*sec; at += 100 * ms {
		d := 2 * ms
		if at >= 4*sec && at < 4100*ms { // the split window
			d = 20 * ms
		}
		reads.Records = append(reads.Records, loadgen.ReadRecord{Kind: loadgen.ReadSearch, Start: at, End: at + d, OK: true})
	}
	reads.Records = append(reads.Records, loadgen.ReadRecord{Kind: loadgen.ReadCount, Start: 5 * sec, End: 5300 * ms, OK: true})
	o := &experiment.Outcome{Strategy: "rfc", Load: &loadgen.Result{Records: recs}, Reads: reads,
		WindowStart: 4 * sec, WindowEnd: 4100 * ms, End: 6 * sec, CleanupStart: 4500 * ms, CleanupEnd: 5 * sec,
		DiskBefore: 1 << 20, DiskAfter: 1 << 20,
		Disk: []experiment.DiskSample{{At: 3 * sec, Bytes: 1 << 20}, {At: 4500 * ms, Bytes: 3 << 20}, {At: 6 * sec, Bytes: 1 << 20}}}
	r := strategyRunOf(o)
	got := map[string]float64{
		"search steady n": float64(r.Reads["search"]["steady"].N), "search steady p99": r.Reads["search"]["steady"].P99,
		"search during n": float64(r.Reads["search"]["during"].N), "search during p99": r.Reads["search"]["during"].P99,
		"search after n": float64(r.Reads["search"]["after"].N), "count after p50": r.Reads["count"]["after"].P50,
		"get steady n": float64(r.Reads["get"]["steady"].N),
		"cleanup ops":  r.CleanupOps, "after handoff ops": r.AfterHandoffOps,
		"cleanup start": r.CleanupStartS, "cleanup end": r.CleanupEndS, "window end": r.WindowEndS,
		"disk first t": r.Disk[0].T, "disk peak MiB": r.Disk[1].MiB,
	}
	want := map[string]float64{
		// steady: reads ending in [1 s, 4 s); during: in flight in [4 s, 4.1 s); after: ending in [4.1 s, 6 s).
		"search steady n": 30, "search steady p99": 2, "search during n": 1, "search during p99": 20,
		"search after n": 19, "count after p50": 300, "get steady n": 0,
		// [4.5 s, 5 s): the 10 held writes at 4.6 s and 40 more, in 0.5 s; [4.1 s, 5.1 s): 100.
		"cleanup ops": 100, "after handoff ops": 100,
		"cleanup start": 0.5, "cleanup end": 1, "window end": 0.1,
		"disk first t": -1, "disk peak MiB": 3,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("strategyRunOf (-want +got):\n%s", diff)
	}
}

// rounds makes three-strategy rounds whose summary fields f sets per run.
func rounds(n int, f func(i int, s string, r *strategyRun)) []strategyRound {
	var out []strategyRound
	for i := range n {
		round := strategyRound{}
		for _, s := range strategies {
			r := strategyRun{Strategy: s, Reads: map[string]map[string]readStat{}}
			f(i, s, &r)
			round[s] = r
		}
		out = append(out, round)
	}
	return out
}

func TestCleanupRowAndAnswer(t *testing.T) {
	rs := rounds(3, func(i int, s string, r *strategyRun) {
		r.Summary.DiskBeforeBytes = 256 << 20
		r.Summary.ThroughputSteadyOps = 1000
		r.SteadyWriteP99Ms, r.Summary.SearchP99SteadyMs = 10, 2
		if s == "rfc" {
			r.Summary.CleanupDurationMs = float64(8000 + 1000*i) // median 9000
			r.Summary.CleanupDocsDeleted = 131072
			r.Summary.CleanupBytesWritten = 300 << 20
			r.Summary.CleanupWriteP99Ms, r.Summary.CleanupSearchP99Ms = 20, 3
			r.CleanupOps = 900
			r.Summary.ReclaimMs = 9500
		}
	})
	row := cleanupRowOf(rs, "rfc")
	want := cleanupRow{Strategy: "rfc", DurationMs: 9000, WrittenMiB: 300, Deleted: 131072, ReclaimMs: 9500,
		WriteP99Steady: 10, WriteP99Cleanup: 20, TputRatio: 0.9, SearchP99Steady: 2, SearchP99Cleanup: 3, ParentMiB: 256}
	if diff := cmp.Diff(want, row); diff != "" {
		t.Errorf("cleanupRowOf (-want +got):\n%s", diff)
	}
	a := cleanupAnswer(Config{}.strategySetup(), []cleanupRow{row})
	// 9 s for 0.25 GB: 36 s per GB.
	for _, w := range []string{"131072 documents one by one in 9000 ms", "300 MiB", "back within 10 % of its settled size 9500 ms after the request", "3 ms against 2 ms steady (1.50×)",
		"writes/s 0.90 of steady", "36.0 s per GB", "90–108 s per GB", "outside the spans searches scan"} {
		if !strings.Contains(a, w) {
			t.Errorf("answer lacks %q:\n%s", w, a)
		}
	}
}

func TestReadCellAndSearchGoal(t *testing.T) {
	for _, tc := range []struct {
		name        string
		during      float64
		quick, met  bool
		whyContains string
	}{
		{"under", 2.4, false, true, ""},
		{"over", 2.6, false, false, "above 1.25"},
		{"quick", 2.4, true, false, "quick run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := rounds(3, func(i int, s string, r *strategyRun) {
				r.Reads["search"] = map[string]readStat{
					"steady": {N: 40, P50: 0.1, P99: 2},
					"during": {N: 5, P50: 0.2, P99: tc.during},
				}
				if i == 2 { // a run with no search in the split window does not count
					r.Reads["search"]["during"] = readStat{}
				}
			})
			cells := searchCells{}
			for _, s := range strategies {
				cells[s] = map[string]map[string]readCell{"search": {}}
				for _, w := range readWindows {
					cells[s]["search"][w], _, _ = readCellOf(rs, s, "search", w)
				}
			}
			if diff := cmp.Diff(readCell{P50: 0.2, P99: tc.during, N: 10, Runs: 2}, cells["inplace"]["search"]["during"]); diff != "" {
				t.Errorf("during cell (-want +got):\n%s", diff)
			}
			g := searchGoals(cells, tc.quick, "8 MiB")
			if len(g) != 1 || g[0].Met != tc.met || !strings.Contains(g[0].Why, tc.whyContains) {
				t.Errorf("goals %+v, want one, met %v, why containing %q", g, tc.met, tc.whyContains)
			}
		})
	}
}

func TestDiskRowAndFloor(t *testing.T) {
	rs := rounds(1, func(i int, s string, r *strategyRun) {
		r.Summary.DiskBeforeBytes = 100 << 20
		r.Summary.DiskAfterBytes = 120 << 20
		r.ParentMiB = 100
		r.Summary.DiskPeakBytes = map[string]int64{"inplace": 120 << 20, "rfc": 250 << 20, "newindex": 180 << 20}[s]
		// The writers grew the disk by 0.1 of the parent before the
		// request, and one of their compactions peaked before it (not the
		// split's peak).
		r.Disk = []diskPoint{{T: -2, MiB: 100}, {T: -1, MiB: 500}, {T: -0.05, MiB: 110}, {T: 0.5, MiB: float64(r.Summary.DiskPeakBytes >> 20)}, {T: 2, MiB: 120}}
	})
	var got []string
	for _, s := range strategies {
		r := diskRowOf(rs, s)
		got = append(got, floorVerdict(r.ExtraAtPeak))
		if r.ExtraSettled < 0.099 || r.ExtraSettled > 0.101 {
			t.Errorf("%s: extra settled %v, want 0.1", s, r.ExtraSettled)
		}
	}
	// Peaks from the request on over the 110 MiB at the request.
	want := []string{"10 % of the floor", "at or above the floor (1.40)", "below the floor (0.70)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
}

func TestAfterHandoffRowAndGoals(t *testing.T) {
	goal, _ := Config{}.handoffCases()
	runs := []splitRun{
		{Steady1sStallMs: 12, AfterHandoffStallMs: 36, AfterHandoffOps: 4800, SteadySecondOps: 5000, PhaseMs: map[string]float64{"cleanup": 300}},
		{Steady1sStallMs: 15, AfterHandoffStallMs: 15, AfterHandoffOps: 5000, SteadySecondOps: 5000, PhaseMs: map[string]float64{"cleanup": 350}},
		{Steady1sStallMs: 10, AfterHandoffStallMs: 11, AfterHandoffOps: 4900, SteadySecondOps: 4900, PhaseMs: map[string]float64{"cleanup": 320}},
	}
	r := afterRowOfCase(goal, runs)
	// ratios 3, 1, 1.1 (median 1.1); 0.96, 1, 1 (median 1).
	if r.StallRatio < 1.099 || r.StallRatio > 1.101 || r.TputRatio != 1 || r.Retire != 320 || r.After != 15 || r.Steady1s != 12 {
		t.Errorf("row %+v", r)
	}
	g := afterGoals(r, false, goal.Size.Name)
	if len(g) != 2 || !g[0].Met || !g[1].Met {
		t.Errorf("goals %+v, want both met", g)
	}
	runs[2].AfterHandoffStallMs, runs[1].AfterHandoffOps = 30, 4000
	r = afterRowOfCase(goal, runs)
	if g := afterGoals(r, false, goal.Size.Name); g[0].Met || g[1].Met {
		t.Errorf("goals %+v, want neither met (stall 2.0×, throughput 0.96)", g)
	}
	if g := afterGoals(afterRowOfCase(goal, runs[1:2]), true, "16 MiB"); g[0].Met || !strings.Contains(g[0].Why, "quick run") {
		t.Errorf("quick goal %+v, want not met: not the goal's case", g[0])
	}
	a := afterAnswer(r, nil)
	for _, w := range []string{"1 GiB per-shard", "retiring the parent took 320 ms", "made cheap instead", "close abandons the compaction"} {
		if !strings.Contains(a, w) {
			t.Errorf("answer lacks %q:\n%s", w, a)
		}
	}
}
