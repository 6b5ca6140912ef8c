package findings

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/shardsplit/shardsplit/routing"
)

// childrenQuestion is question 6 of design/findings.md, answered by runChildren.
var childrenQuestion = Question{ID: 6, Slug: "children", Title: "Partition-aligned vs hash-range children", Run: runChildren,
	RaisedIn: "#13925 vs #20859 (equal-width hash ranges, min width 1,000), #18809 (hot keys)",
	Question: "How deep can each kind of child go, what does a later _split/_shrink do with each, how do routing_partition_size tenants spread, and what about a single hot routing value?"}

// Question 6 compares partition-aligned children (ModePartition) with
// OpenSearch's hash-range children (ModeOpenSearch, #20859) by pure
// computation over routing's own rules: how deep each can split, what
// OpenSearch's whole-index resize rules make of a table with in-place
// splits, how tenants with routing_partition_size spread over children,
// and the hot routing value no split can divide (policy's report). No
// timings: every number is exact for the seed.

// childrenSettings is the index the question uses: 8 shards with the
// create-index default number_of_routing_shards (1024, factor 128).
func childrenSettings(partitionSize int) routing.Settings {
	return routing.Settings{Shards: 8, RoutingShards: routing.DefaultRoutingShards(8), PartitionSize: partitionSize}
}

// childrenDepth splits the leaf holding routing key 0 of root 0 in two,
// again and again, until routing refuses; it returns how many splits it
// accepted and the refusal.
func childrenDepth(mode routing.Mode, s routing.Settings) (int, error) {
	t, err := routing.NewTable(mode, s)
	if err != nil {
		return 0, err
	}
	start := routing.Key(t.RootSpan(0).Start)
	for depth := 0; ; depth++ {
		next, err := routeSplit(t, t.Owner(0, start))
		if err != nil {
			var re *routing.Error
			if !errors.As(err, &re) {
				return depth, fmt.Errorf("depth %d: %w", depth, err)
			}
			return depth, re
		}
		t = next
	}
}

// childrenMinWidth is the narrowest child routing accepts, in routing keys
// (partitions, or hashes): the smallest w for which a split of root 0 at
// the point start+w is accepted (binary search; a refusal costs nothing).
func childrenMinWidth(mode routing.Mode, s routing.Settings) (uint64, error) {
	t, err := routing.NewTable(mode, s)
	if err != nil {
		return 0, err
	}
	span := t.RootSpan(0)
	if span.Width() < 2 {
		return 0, fmt.Errorf("root 0 is %d key wide: no split point", span.Width())
	}
	accepts := func(w uint64) bool {
		_, err := routing.Apply(t, routing.Edit{Kind: routing.BeginSplit, Shard: 0, Points: []routing.Key{routing.Key(span.Start + w)}})
		return err == nil
	}
	lo, hi := uint64(1), span.Width()/2 // accepts(hi) must hold: both halves at least as wide
	if !accepts(hi) {
		return 0, fmt.Errorf("a split of root 0 in halves is refused")
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if accepts(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// childrenMaxWays is the most equal children one split of a root may make:
// floor(root width / min width), checked against routing, which must
// refuse one more. ok reports whether routing also accepted n itself (only
// tried when n <= 4096: more children than that is a large table).
func childrenMaxWays(mode routing.Mode, s routing.Settings, minWidth uint64) (n int, accepted bool, err error) {
	t, err := routing.NewTable(mode, s)
	if err != nil {
		return 0, false, err
	}
	n = int(t.RootSpan(0).Width() / minWidth)
	if _, err := routing.Apply(t, routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: n + 1}); err == nil {
		return n, false, fmt.Errorf("routing accepted %d children of root 0", n+1)
	}
	if n <= 4096 {
		if _, err := routing.Apply(t, routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: n}); err != nil {
			return n, false, fmt.Errorf("routing refused %d children of root 0: %w", n, err)
		}
		accepted = true
	}
	return n, accepted, nil
}

// childrenSplitTable applies 2-way splits in order: each entry names a
// root and a path of child indexes below it (the split leaf is the root's
// leaf reached by taking child path[i] of each split so far).
func childrenSplitTable(mode routing.Mode, s routing.Settings, splits [][]int) (*routing.Table, error) {
	t, err := routing.NewTable(mode, s)
	if err != nil {
		return nil, err
	}
	for _, sp := range splits {
		id := routing.ShardID(sp[0])
		for _, c := range sp[1:] {
			rec, ok := t.Split(id)
			if !ok || c >= len(rec.Children) {
				return nil, fmt.Errorf("split path %v: shard %d has no child %d", sp, id, c)
			}
			id = rec.Children[c].Shard
		}
		if t, err = routeSplit(t, id); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// childrenFullTable splits every root into 2^depth equal leaves (the
// leaves of a full binary tree of that depth).
func childrenFullTable(mode routing.Mode, s routing.Settings, depth int) (*routing.Table, error) {
	t, err := routing.NewTable(mode, s)
	if err != nil {
		return nil, err
	}
	if depth == 0 {
		return t, nil
	}
	for r := range s.Shards {
		id := routing.ShardID(r)
		next, err := routing.Apply(t, routing.Edit{Kind: routing.BeginSplit, Shard: id, Ways: 1 << depth})
		if err != nil {
			return nil, fmt.Errorf("split %d into %d: %w", id, 1<<depth, err)
		}
		rec, _ := next.Split(id)
		ids := make([]routing.ShardID, len(rec.Children))
		for i, c := range rec.Children {
			ids[i] = c.Shard
		}
		if t, err = routing.Apply(next, routing.Edit{Kind: routing.CommitSplit, Shard: id, Children: ids}); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// resizeCase is one whole-index resize asked of a table with in-place
// splits.
type resizeCase struct {
	op     routing.ResizeOp
	target int
}

// resizeOutcome is what OpenSearch's resize rules and the documents say
// about one resize of a table with in-place splits.
type resizeOutcome struct {
	Verdict string // "accepted" or OpenSearch's refusal
	// Sources is how many distinct source shard ids the rules name (over
	// every target shard); Retired how many of them are no longer active
	// shards (split parents).
	Sources, Retired int
	// LeavesSplitRoots is the number of leaves of split roots;
	// LeavesOneTarget how many of them send all their documents to one
	// target shard; MaxTargetsPerLeaf the most target shards one leaf's
	// documents go to; MaxLeavesPerTarget the most source leaves one
	// target shard draws documents from.
	LeavesSplitRoots, LeavesOneTarget     int
	MaxTargetsPerLeaf, MaxLeavesPerTarget int
}

// childrenResize applies OpenSearch's resize rules (routing.PrepareResize:
// the source write-blocked, every other precondition met) to a resize of
// the index whose routing table is t, and routes ids through t and through
// the target's settings to see which leaves feed which target shards.
func childrenResize(t *routing.Table, c resizeCase, ids []string) (resizeOutcome, error) {
	src := t.Settings()
	req := routing.ResizeRequest{Op: c.op, Source: "source", Target: "target", SourceExists: true,
		SourceSettings: src, SourceWriteBlocked: true, AllShardsOnOneNode: true, TargetShards: c.target}
	target, err := routing.PrepareResize(req)
	if err != nil {
		var re *routing.Error
		if !errors.As(err, &re) {
			return resizeOutcome{}, err
		}
		return resizeOutcome{Verdict: fmt.Sprintf("refused: %s", re.Message)}, nil
	}
	out := resizeOutcome{Verdict: "accepted"}
	active := map[routing.ShardID]bool{}
	for _, id := range t.ActiveShards() {
		active[id] = true
	}
	named := map[routing.ShardID]bool{}
	for ts := range target.Shards {
		var ids []routing.ShardID
		switch c.op {
		case routing.Split:
			id, err := routing.SelectSplitShard(ts, src, target.Shards)
			if err != nil {
				return out, err
			}
			ids = []routing.ShardID{id}
		case routing.Shrink:
			if ids, err = routing.SelectShrinkShards(ts, src, target.Shards); err != nil {
				return out, err
			}
		case routing.Clone:
			id, err := routing.SelectCloneShard(ts, src, target.Shards)
			if err != nil {
				return out, err
			}
			ids = []routing.ShardID{id}
		}
		for _, id := range ids {
			named[id] = true
		}
	}
	out.Sources = len(named)
	for id := range named {
		if !active[id] {
			out.Retired++
		}
	}
	split := map[routing.ShardID]bool{} // leaves of split roots
	for r := range src.Shards {
		if leaves := t.Leaves(routing.ShardID(r)); len(leaves) > 1 {
			for _, l := range leaves {
				split[l.Shard] = true
			}
		}
	}
	targetsOf := map[routing.ShardID]map[routing.ShardID]bool{}
	leavesOf := map[routing.ShardID]map[routing.ShardID]bool{}
	for _, id := range ids {
		p := src.Place(id, "")
		leaf := t.Lookup(p)
		tgt := target.Place(id, "").Root
		if targetsOf[leaf] == nil {
			targetsOf[leaf] = map[routing.ShardID]bool{}
		}
		targetsOf[leaf][tgt] = true
		if leavesOf[tgt] == nil {
			leavesOf[tgt] = map[routing.ShardID]bool{}
		}
		leavesOf[tgt][leaf] = true
	}
	for leaf, tg := range targetsOf {
		if !split[leaf] {
			continue
		}
		out.LeavesSplitRoots++
		if len(tg) == 1 {
			out.LeavesOneTarget++
		}
		out.MaxTargetsPerLeaf = max(out.MaxTargetsPerLeaf, len(tg))
	}
	for _, lv := range leavesOf {
		out.MaxLeavesPerTarget = max(out.MaxLeavesPerTarget, len(lv))
	}
	return out, nil
}

// tenantSpread is how a set of tenants' documents spread over the shards
// of a table.
type tenantSpread struct {
	Tenants    int
	MeanShards float64 // distinct shards per tenant, mean
	MaxShards  int
	OneShard   float64 // share of tenants whose documents all sit on one shard
}

// childrenTenantSpread routes idsPerTenant documents of each tenant
// (routing value tenant-i) with t and counts the shards each tenant's
// documents land on.
func childrenTenantSpread(t *routing.Table, tenants, idsPerTenant int, seed int64) tenantSpread {
	out := tenantSpread{Tenants: tenants}
	total, one := 0, 0
	shards := map[routing.ShardID]bool{}
	for i := range tenants {
		clear(shards)
		tenant := fmt.Sprintf("tenant-%d-%d", seed, i)
		for k := range idsPerTenant {
			_, sh := t.Route(fmt.Sprintf("%s-doc-%d", tenant, k), tenant)
			shards[sh] = true
		}
		total += len(shards)
		out.MaxShards = max(out.MaxShards, len(shards))
		if len(shards) == 1 {
			one++
		}
	}
	if tenants > 0 {
		out.MeanShards = float64(total) / float64(tenants)
		out.OneShard = float64(one) / float64(tenants)
	}
	return out
}

// childrenSizes are the generated workloads' sizes.
type childrenSizes struct {
	resizeDocs         int
	tenants, perTenant int
	hotWrites          int
}

func (c Config) childrenSizes() childrenSizes {
	if c.Quick {
		return childrenSizes{resizeDocs: 20_000, tenants: 500, perTenant: 32, hotWrites: 40_000}
	}
	return childrenSizes{resizeDocs: 200_000, tenants: 5_000, perTenant: 64, hotWrites: 200_000}
}

var childrenModes = []routing.Mode{routing.ModePartition, routing.ModeOpenSearch}

func runChildren(ctx context.Context, cfg Config) (Answer, error) {
	sz := cfg.childrenSizes()
	a := Answer{Command: rerunCommand(cfg, 6)}

	// 1. How deep.
	cfg.Progressf("children: depth limits")
	depthTab := Table{Header: []string{"mode", "index (shards, routing shards)", "deepest 2-way chain", "refusal at the next split",
		"narrowest child (keys)", "most children of one root", "narrowest child's share of its root"}}
	depths := map[routing.Mode]int{}
	maxWays := map[routing.Mode]int{}
	for _, s := range []routing.Settings{childrenSettings(1), {Shards: 8, RoutingShards: 8, PartitionSize: 1}} {
		for _, m := range childrenModes {
			d, refusal := childrenDepth(m, s)
			var re *routing.Error
			if !errors.As(refusal, &re) {
				return a, fmt.Errorf("depth (%s, %+v): %w", m, s, refusal)
			}
			minW, n, share := "—", "1 (no split)", "1"
			if w, err := childrenMinWidth(m, s); err == nil {
				ways, accepted, err := childrenMaxWays(m, s, w)
				if err != nil {
					return a, fmt.Errorf("max children (%s, %+v): %w", m, s, err)
				}
				minW = fmt.Sprint(w)
				n = fmt.Sprintf("%d (%d refused", ways, ways+1)
				if accepted {
					n += fmt.Sprintf(", %d accepted", ways)
				}
				n += ")"
				t, _ := routing.NewTable(m, s)
				share = fmt.Sprintf("%.3g", float64(w)/float64(t.RootSpan(0).Width()))
				if s == childrenSettings(1) {
					maxWays[m] = ways
				}
			}
			if s == childrenSettings(1) {
				depths[m] = d
			}
			depthTab.Rows = append(depthTab.Rows, []string{m.String(), fmt.Sprintf("%d, %d", s.Shards, s.RoutingShards),
				fmt.Sprint(d), re.Message, minW, n, share})
			a.Numbers = append(a.Numbers, Measured(fmt.Sprintf("deepest 2-way chain, %s, %d shards, R=%d", m, s.Shards, s.RoutingShards), "splits", float64(d)))
		}
	}
	a.Tables = append(a.Tables, depthTab)

	// 2. A later whole-index resize.
	cfg.Progressf("children: whole-index resize of a split table")
	if err := ctx.Err(); err != nil {
		return a, err
	}
	splits := [][]int{{0}, {0, 0}, {3}} // root 0 two levels deep, root 3 one
	docIDs := make([]string, sz.resizeDocs)
	for i := range docIDs {
		docIDs[i] = fmt.Sprintf("doc-%d-%d", cfg.Seed, i)
	}
	resizeTab := Table{Header: []string{"mode", "resize", "OpenSearch's rules", "source shards named (of them retired)",
		"leaves of split roots feeding one target shard", "most target shards one leaf feeds", "most leaves one target shard draws from"}}
	retired, accepted, asked := 0, 0, 0
	var refused []string
	split2 := map[routing.Mode]resizeOutcome{} // the _split x2
	for _, m := range childrenModes {
		t, err := childrenSplitTable(m, childrenSettings(1), splits)
		if err != nil {
			return a, fmt.Errorf("split table (%s): %w", m, err)
		}
		for _, c := range []resizeCase{{routing.Split, 16}, {routing.Split, 32}, {routing.Split, 24}, {routing.Shrink, 4}, {routing.Clone, 8}} {
			o, err := childrenResize(t, c, docIDs)
			if err != nil {
				return a, fmt.Errorf("%s to %d (%s): %w", c.op, c.target, m, err)
			}
			row := []string{m.String(), fmt.Sprintf("_%s 8 → %d", c.op, c.target), o.Verdict}
			asked++
			if o.Verdict != "accepted" {
				if m == routing.ModePartition {
					refused = append(refused, fmt.Sprintf("_%s 8 → %d: %s", c.op, c.target, strings.TrimPrefix(o.Verdict, "refused: ")))
				}
				row = append(row, "—", "—", "—", "—")
			} else {
				row = append(row, fmt.Sprintf("%d (%d)", o.Sources, o.Retired),
					fmt.Sprintf("%d of %d", o.LeavesOneTarget, o.LeavesSplitRoots),
					fmt.Sprint(o.MaxTargetsPerLeaf), fmt.Sprint(o.MaxLeavesPerTarget))
				retired = max(retired, o.Retired)
				accepted++
			}
			if c == (resizeCase{routing.Split, 16}) {
				split2[m] = o
			}
			resizeTab.Rows = append(resizeTab.Rows, row)
		}
	}
	a.Tables = append(a.Tables, resizeTab)

	// 3. Tenants with routing_partition_size.
	cfg.Progressf("children: tenants with routing_partition_size over %d tenants", sz.tenants)
	const partitionSize = 8
	spreadTab := Table{Header: []string{"depth (every root split into 2^depth)", "shards"}}
	for _, m := range childrenModes {
		spreadTab.Header = append(spreadTab.Header, fmt.Sprintf("%s: shards per tenant, mean (max)", m), fmt.Sprintf("%s: tenants on one shard", m))
	}
	first, last := map[routing.Mode]tenantSpread{}, map[routing.Mode]tenantSpread{}
	for d := 0; d <= depths[routing.ModePartition]; d++ {
		if err := ctx.Err(); err != nil {
			return a, err
		}
		row := []string{fmt.Sprint(d), fmt.Sprint(8 << d)}
		for _, m := range childrenModes {
			t, err := childrenFullTable(m, childrenSettings(partitionSize), d)
			if err != nil {
				return a, fmt.Errorf("full table (%s, depth %d): %w", m, d, err)
			}
			sp := childrenTenantSpread(t, sz.tenants, sz.perTenant, cfg.Seed)
			row = append(row, fmt.Sprintf("%.2f (%d)", sp.MeanShards, sp.MaxShards), fmt.Sprintf("%.1f%%", 100*sp.OneShard))
			a.Numbers = append(a.Numbers, Measured(fmt.Sprintf("shards per tenant (P=%d), %s, depth %d", partitionSize, m, d), "shards", sp.MeanShards))
			if d == 0 {
				first[m] = sp
			}
			last[m] = sp
		}
		spreadTab.Rows = append(spreadTab.Rows, row)
	}
	a.Tables = append(a.Tables, spreadTab)

	// 4. The hot routing value.
	hot, err := childrenHotKey(ctx, cfg, sz, &a)
	if err != nil {
		return a, err
	}

	const chart = "children-hot-key.png"
	if err := childrenHotChart(filepath.Join(cfg.Out, chart), hot); err != nil {
		return a, err
	}
	a.Charts = []string{chart}

	pm, om := routing.ModePartition, routing.ModeOpenSearch
	hp1, ho1 := hot[hotKeyOf(pm, 1)], hot[hotKeyOf(om, 1)]
	hp8, ho8 := hot[hotKeyOf(pm, 8)], hot[hotKeyOf(om, 8)]
	a.Answer = fmt.Sprintf("On 8 shards with the default 1,024 routing shards, partition-aligned children go %d levels deep (one partition; %d children of a root at most, fixed by routing shards / shards) and hash-range children %d (%d hashes; %d children of a root at most); "+
		"OpenSearch's resize rules accept %d of %d later whole-index resizes of the two layouts (%s), reading only number_of_shards, routing shards and the write block, yet name %d split parents that no longer exist as sources; "+
		"and a _split 8 → 16 fills each target from whole partition-aligned leaves (%d of %d leaves feed one target) but from every hash-range leaf of its root (%d of %d). "+
		"A tenant with routing_partition_size %d spreads over %.2f shards once every root is split %d levels into partition-aligned children but stays at %.2f (%.2f before any split) with hash-range children; "+
		"a single routing value taking %.0f%% of writes leaves %.1f%% of writes on one shard after %d partition-aligned splits and %.1f%% after %d hash-range splits (from %.1f%%), "+
		"and with routing_partition_size %d %.1f%% after %d partition-aligned split%s against %.1f%% after %d hash-range splits.",
		depths[pm], maxWays[pm], depths[om], childrenHashMinWidth(om), maxWays[om],
		accepted, asked, childrenRefused(refused), retired,
		split2[pm].LeavesOneTarget, split2[pm].LeavesSplitRoots, split2[om].LeavesOneTarget, split2[om].LeavesSplitRoots,
		partitionSize, last[pm].MeanShards, depths[pm], last[om].MeanShards, first[om].MeanShards,
		100*hotShare, 100*hp1.last.HotShare, hp1.splits, 100*ho1.last.HotShare, ho1.splits, 100*hp1.first.HotShare,
		8, 100*hp8.last.HotShare, hp8.splits, childrenPlural(hp8.splits), 100*ho8.last.HotShare, ho8.splits)
	a.Summary = childrenSummary(childrenFacts{
		DepthPartition: depths[pm], DepthHash: depths[om], PartitionSize: partitionSize,
		SpreadPartition: last[pm].MeanShards, SpreadHash: last[om].MeanShards,
		HotShare: hotShare, HotPartition: hp1.last.HotShare, HotHash: ho1.last.HotShare, SplitsPartition: hp1.splits, SplitsHash: ho1.splits,
	})
	a.NotMeasured = "Nothing here is timed or stored: tables, resize rules and placements are computed with routing/ and policy/ over generated ids and tenants (seeded). " +
		"The resize rows apply OpenSearch's validation as routing/ reproduces it; whether upstream will refuse a resize of an index with in-place splits is not settled in the merged code we read (#20859, #20979), and our own new-index resize refuses one (baseline.Prepare). " +
		"The hash-range root's largest split (4,290,676 children) is derived from the narrowest child routing accepts and checked only by the refusal of one more; it was not built. " +
		"The hot-key runs feed policy.Decide one 10 s interval per step from the generated writes (a stride sample of at most 2,000 per leaf), not a live load."
	return a, nil
}

// childrenHashMinWidth is the narrowest child of mode on childrenSettings(1) (0
// when routing refuses every split).
func childrenHashMinWidth(m routing.Mode) uint64 {
	w, _ := childrenMinWidth(m, childrenSettings(1))
	return w
}

func childrenPlural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// childrenRefused lists the refused resizes (the same in both modes).
func childrenRefused(refused []string) string {
	if len(refused) == 0 {
		return "none refused"
	}
	return "refused: " + strings.Join(refused, "; ")
}
