package findings

import (
	"context"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
)

var refusalRE = regexp.MustCompile(`\[[0-9]+\]`)

func TestChildrenDepthLimits(t *testing.T) {
	type limits struct {
		Depth    int
		Refusal  string
		MinWidth uint64
		MaxWays  int
	}
	for _, tc := range []struct {
		mode routing.Mode
		s    routing.Settings
		want limits
	}{
		// Partition mode: a root of f = R/N partitions splits down to one
		// partition, log2(f) levels, f children at most.
		{routing.ModePartition, routing.Settings{Shards: 8, RoutingShards: 1024, PartitionSize: 1},
			limits{7, "Cannot split shard [N] further.", 1, 128}},
		{routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 1024, PartitionSize: 1},
			limits{10, "Cannot split shard [N] further.", 1, 1024}},
		// OpenSearch mode: children wider than 1,000 hashes, whatever R:
		// 2^(31-d) >= 1001 for d <= 21, so 22 levels; 2^32/1001 children.
		{routing.ModeOpenSearch, routing.Settings{Shards: 8, RoutingShards: 1024, PartitionSize: 1},
			limits{22, "Cannot split shard [N] further.", 1001, 4290676}},
		{routing.ModeOpenSearch, routing.Settings{Shards: 8, RoutingShards: 8, PartitionSize: 1},
			limits{22, "Cannot split shard [N] further.", 1001, 4290676}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			var got limits
			d, err := childrenDepth(tc.mode, tc.s)
			got.Depth = d
			if re, ok := err.(*routing.Error); ok {
				got.Refusal = refusalRE.ReplaceAllString(re.Message, "[N]")
			} else {
				t.Fatalf("depth: %v", err)
			}
			if got.MinWidth, err = childrenMinWidth(tc.mode, tc.s); err != nil {
				t.Fatal(err)
			}
			if got.MaxWays, _, err = childrenMaxWays(tc.mode, tc.s, got.MinWidth); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%+v (-want +got):\n%s", tc.s, diff)
			}
		})
	}
	// Partition mode with R = N has one partition per root: no split.
	if d, err := childrenDepth(routing.ModePartition, routing.Settings{Shards: 8, RoutingShards: 8, PartitionSize: 1}); d != 0 || err == nil {
		t.Errorf("partition mode, R = N: depth %d, %v; want 0 and a refusal", d, err)
	}
}

func TestChildrenResize(t *testing.T) {
	ids := make([]string, 4000)
	for i := range ids {
		ids[i] = "doc-" + string(rune('a'+i%26)) + "-" + string(rune('a'+i/26%26)) + "-" + string(rune('a'+i/676))
	}
	for _, tc := range []struct {
		mode routing.Mode
		c    resizeCase
		want resizeOutcome
	}{
		// Root 0 split once: its two partition-aligned children are
		// exactly the two target shards of a _split x2.
		{routing.ModePartition, resizeCase{routing.Split, 16},
			resizeOutcome{Verdict: "accepted", Sources: 8, Retired: 1, LeavesSplitRoots: 2, LeavesOneTarget: 2, MaxTargetsPerLeaf: 1, MaxLeavesPerTarget: 1}},
		// Hash-range children divide the hash magnitude: each feeds both.
		{routing.ModeOpenSearch, resizeCase{routing.Split, 16},
			resizeOutcome{Verdict: "accepted", Sources: 8, Retired: 1, LeavesSplitRoots: 2, LeavesOneTarget: 0, MaxTargetsPerLeaf: 2, MaxLeavesPerTarget: 2}},
		{routing.ModePartition, resizeCase{routing.Shrink, 4},
			resizeOutcome{Verdict: "accepted", Sources: 8, Retired: 1, LeavesSplitRoots: 2, LeavesOneTarget: 2, MaxTargetsPerLeaf: 1, MaxLeavesPerTarget: 3}},
		{routing.ModeOpenSearch, resizeCase{routing.Split, 24},
			resizeOutcome{Verdict: "refused: the number of routing shards [1024] must be a multiple of the target shards [24]"}},
	} {
		t.Run(tc.mode.String()+"/"+tc.c.op.String(), func(t *testing.T) {
			tab, err := childrenSplitTable(tc.mode, childrenSettings(1), [][]int{{0}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := childrenResize(tab, tc.c, ids)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestChildrenTenantSpread(t *testing.T) {
	spread := func(mode routing.Mode, p, depth int) tenantSpread {
		t.Helper()
		tab, err := childrenFullTable(mode, childrenSettings(p), depth)
		if err != nil {
			t.Fatal(err)
		}
		return childrenTenantSpread(tab, 200, 64, 1)
	}
	// Unpartitioned tenants sit on one shard whatever the split.
	for _, mode := range childrenModes {
		if got := spread(mode, 1, 7); got.MaxShards != 1 {
			t.Errorf("%s, P=1, depth 7: %+v, want every tenant on one shard", mode, got)
		}
	}
	// One-partition leaves: a tenant's 8 consecutive partitions are 8 shards.
	if got := spread(routing.ModePartition, 8, 7); got.MaxShards != 8 || got.MeanShards < 7 {
		t.Errorf("partition, P=8, depth 7: %+v, want about 8 shards per tenant", got)
	}
	// Hash-range leaves of 2^25 hashes hold a tenant's 8 consecutive sums:
	// splitting changes nothing (tenants on two shards straddle two roots).
	if d0, d7 := spread(routing.ModeOpenSearch, 8, 0), spread(routing.ModeOpenSearch, 8, 7); d0 != d7 {
		t.Errorf("opensearch, P=8: depth 0 %+v, depth 7 %+v, want the same", d0, d7)
	}
}

func TestChildrenHotRun(t *testing.T) {
	for _, tc := range []struct {
		mode      routing.Mode
		p         int
		unsplit   bool
		minShare  float64 // the hot leaf's share of writes at the end, at least
		maxShare  float64 // and at most
		minSplits int
	}{
		// One routing value, one partition or one hash: no split divides it.
		{routing.ModePartition, 1, true, hotShare - 0.01, 1, 1},
		{routing.ModeOpenSearch, 1, true, hotShare - 0.01, 1, 20},
		// Partitioned: partition-aligned children divide the tenant's
		// partitions until no leaf is over the threshold.
		{routing.ModePartition, 8, false, 0, hotShare - 0.05, 1},
		// Hash-range children cannot: its 8 hashes stay in one leaf.
		{routing.ModeOpenSearch, 8, true, hotShare - 0.01, 1, 20},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			s := childrenSettings(tc.p)
			tab, err := routing.NewTable(tc.mode, s)
			if err != nil {
				t.Fatal(err)
			}
			steps, d, err := childrenHotRun(context.Background(), tab, childrenHotWrites(s, 20_000, 1))
			if err != nil {
				t.Fatal(err)
			}
			last := steps[len(steps)-1]
			if (len(d.Unsplittable) > 0) != tc.unsplit || last.HotShare < tc.minShare || last.HotShare > tc.maxShare || last.Splits < tc.minSplits {
				t.Errorf("P=%d: %d splits, hot leaf %.3f of writes, unsplittable %v; want unsplittable %v, share in [%.2f, %.2f], >= %d splits",
					tc.p, last.Splits, last.HotShare, d.Unsplittable, tc.unsplit, tc.minShare, tc.maxShare, tc.minSplits)
			}
		})
	}
}

// TestChildrenQuick runs question 6 in quick mode.
func TestChildrenQuick(t *testing.T) {
	cfg := testConfig678(t)
	a, err := runChildren(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAnswer678(t, cfg, a)
	logAnswer678(t, a)
}
