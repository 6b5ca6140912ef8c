package findings

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
)

func TestStaleTables(t *testing.T) {
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		tables, err := staleTables(mode, childrenSettings(1))
		if err != nil {
			t.Fatal(err)
		}
		// The sequence: root 0, a child of root 0, root 1.
		got := []bool{len(tables[3].Leaves(0)) == 3, len(tables[3].Leaves(1)) == 2, len(tables) == staleSplits+1}
		if diff := cmp.Diff([]bool{true, true, true}, got); diff != "" {
			t.Errorf("%s: root 0 has 3 leaves, root 1 has 2, %d tables (-want +got):\n%s", mode, staleSplits+1, diff)
		}
	}
}

// TestStaleClientWrong checks the smart client against our routing: it
// agrees before any split (unpartitioned), and afterwards is wrong exactly
// for the documents of split roots, always naming the retired root.
func TestStaleClientWrong(t *testing.T) {
	docs := staleDocs(8000, 0, 1)
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		tables, err := staleTables(mode, childrenSettings(1))
		if err != nil {
			t.Fatal(err)
		}
		var got, want []clientWrong
		for _, tab := range tables {
			got = append(got, staleClientWrong(tab, docs))
			// Expected: the documents whose root has been split.
			w := clientWrong{Docs: len(docs)}
			for _, d := range docs {
				p, _ := tab.Route(d.id, "")
				if len(tab.Leaves(p.Root)) > 1 {
					w.Wrong++
					w.Retired++
				}
			}
			want = append(want, w)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", mode, diff)
		}
		if got[0].Wrong != 0 || got[1].Wrong == 0 {
			t.Errorf("%s: wrong %d before any split, %d after one", mode, got[0].Wrong, got[1].Wrong)
		}
	}
	// routing_partition_size > 1: the client ignores the _id's offset.
	tab, err := routing.NewTable(routing.ModePartition, childrenSettings(8))
	if err != nil {
		t.Fatal(err)
	}
	if w := staleClientWrong(tab, staleDocs(8000, 100, 1)); w.Wrong == 0 || w.Retired != 0 {
		t.Errorf("partitioned, no split: %+v, want some wrong, none retired", w)
	}
}

func TestStalePercentile(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		q    float64
		want float64
	}{
		{nil, 0.5, 0},
		{[]float64{3}, 0.5, 3},
		{[]float64{4, 1, 3, 2}, 0.5, 2},
		{[]float64{4, 1, 3, 2}, 1, 4},
		{[]float64{5, 1, 4, 2, 3}, 0.5, 3},
	} {
		if got := stalePercentile(tc.v, tc.q); got != tc.want {
			t.Errorf("stalePercentile(%v, %v) = %v, want %v", tc.v, tc.q, got, tc.want)
		}
	}
}

// TestStaleNode splits a node three times and checks that a router any
// number of splits behind needs at most one retry per request, finds every
// document, and that rewrites from the first table land where they belong.
func TestStaleNode(t *testing.T) {
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		t.Run(mode.String(), func(t *testing.T) {
			res, err := staleNode(context.Background(), t.TempDir(), mode, staleDocs(400, 0, 1))
			if err != nil {
				t.Fatal(err)
			}
			if !res.Placement.OK() || res.Fenced == 0 || res.FencedMax != 1 {
				t.Errorf("placement %+v, %d rewrites fenced, at most %d times", res.Placement, res.Fenced, res.FencedMax)
			}
			for _, h := range res.Hops {
				if h.MaxRetries > 1 || h.NotFound != 0 || (h.Behind > 0 && (h.Retried == 0 || h.SharedTotal != 1)) || (h.Behind == 0 && h.Retried != 0) {
					t.Errorf("%+v", h)
				}
			}
		})
	}
}

// TestStaleQuick runs question 8 in quick mode.
func TestStaleQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs splits under load")
	}
	cfg := testConfig678(t)
	a, err := runStale(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAnswer678(t, cfg, a)
	logAnswer678(t, a)
}
