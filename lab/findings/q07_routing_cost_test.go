package findings

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
)

// TestRouteChainTable checks routeChainTable builds routing's
// BenchmarkRoute table: the root of the bench id has depth+1 leaves and the
// id's leaf halves at every level.
func TestRouteChainTable(t *testing.T) {
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		t.Run(mode.String(), func(t *testing.T) {
			var widths []uint64
			var leaves []int
			for d := 0; d <= routeMaxDepth; d++ {
				tab, err := routeChainTable(mode, d)
				if err != nil {
					t.Fatal(err)
				}
				p, owner := tab.Route(routeBenchID, "")
				loc, ok := tab.Shard(owner)
				if !ok {
					t.Fatalf("depth %d: owner %d not in the table", d, owner)
				}
				widths = append(widths, loc.Span.Width())
				leaves = append(leaves, len(tab.Leaves(p.Root)))
			}
			var wantLeaves []int
			var wantWidths []uint64
			for d := 0; d <= routeMaxDepth; d++ {
				wantLeaves = append(wantLeaves, d+1)
				wantWidths = append(wantWidths, widths[0]>>d)
			}
			if diff := cmp.Diff(wantLeaves, leaves); diff != "" {
				t.Errorf("leaves of the routed root (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantWidths, widths); diff != "" {
				t.Errorf("width of the routed leaf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRouteFullTables(t *testing.T) {
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		tabs, err := routeFullTables(mode, routeMaxDepth)
		if err != nil {
			t.Fatal(err)
		}
		var got, want []int
		for d, tab := range tabs {
			got = append(got, len(tab.Leaves(0)))
			want = append(want, 1<<d)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: leaves per depth (-want +got):\n%s", mode, diff)
		}
	}
}

func TestRerunCommand(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Seed: 1}, "splitdemo findings --only 7 --seed 1"},
		{Config{Seed: 3, Quick: true, Runs: 4}, "splitdemo findings --only 7 --seed 3 --quick --runs 4"},
	} {
		if got := rerunCommand(tc.cfg, 7); got != tc.want {
			t.Errorf("rerunCommand(%+v) = %q, want %q", tc.cfg, got, tc.want)
		}
	}
}

// TestRoutingCostQuick runs question 7 in quick mode with one run and
// checks the answer is complete.
func TestRoutingCostQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("times routing for a few seconds")
	}
	cfg := testConfig678(t)
	if cfg.Quick {
		cfg.Runs = 1
	}
	a, err := runRoutingCost(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAnswer678(t, cfg, a)
	logAnswer678(t, a)
	if want := 2*2*(routeMaxDepth+1) + 1; len(a.Numbers) != want {
		t.Errorf("%d numbers, want %d", len(a.Numbers), want)
	}
	for _, n := range a.Numbers {
		if n.Median <= 0 {
			t.Errorf("%s: median %v", n.Name, n.Median)
		}
	}
}

// testConfig678 is a quick configuration writing into a temporary
// directory; FINDINGS_OUT=dir keeps the charts, FINDINGS_FULL=1 runs the
// full experiment (not quick) instead.
func testConfig678(t *testing.T) Config {
	cfg := Config{Quick: os.Getenv("FINDINGS_FULL") == "", Seed: 1, Out: t.TempDir(), Scratch: t.TempDir()}
	if d := os.Getenv("FINDINGS_OUT"); d != "" {
		cfg.Out = d
	}
	return cfg
}

// checkAnswer678 checks an answer has every part a question must give and
// its charts exist.
func checkAnswer678(t *testing.T, cfg Config, a Answer) {
	t.Helper()
	if a.Answer == "" || a.Command == "" || a.NotMeasured == "" || len(a.Numbers) == 0 || len(a.Tables) == 0 {
		t.Errorf("incomplete answer: answer %q, command %q, not measured %q, %d numbers, %d tables",
			a.Answer, a.Command, a.NotMeasured, len(a.Numbers), len(a.Tables))
	}
	for _, c := range a.Charts {
		if st, err := os.Stat(filepath.Join(cfg.Out, c)); err != nil || st.Size() == 0 {
			t.Errorf("chart %s: %v", c, err)
		}
	}
	for _, tab := range a.Tables {
		for i, row := range tab.Rows {
			if len(row) != len(tab.Header) {
				t.Errorf("table %v: row %d has %d cells, want %d", tab.Header, i, len(row), len(tab.Header))
			}
		}
	}
}

// logAnswer678 logs an answer's sentence and tables (go test -v shows them).
func logAnswer678(t *testing.T, a Answer) {
	t.Helper()
	t.Logf("answer: %s", a.Answer)
	for _, tab := range a.Tables {
		t.Logf("%v", tab.Header)
		for _, r := range tab.Rows {
			t.Logf("%v", r)
		}
	}
}
