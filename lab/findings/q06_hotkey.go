package findings

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/shardsplit/shardsplit/policy"
	"github.com/shardsplit/shardsplit/routing"
)

// The hot routing value of question 6: one tenant takes hotShare of an
// index's writes; policy.Decide is asked, step after step, what to do with
// the generated writes, and its splits are applied, until it does nothing
// or reports the hot leaf as unsplittable.

const (
	hotShare      = 0.30   // the hot tenant's share of all writes
	hotTenants    = 2000   // other tenants, uniform over the rest
	hotIndexRate  = 10_000 // writes/s the index takes (the hot tenant alone: 3,000/s, over policy's 2,500)
	hotSampleCap  = 2000   // sampled keys per leaf handed to policy
	hotMaxSteps   = 64
	hotTenantName = "tenant-hot"
)

// hotWrite is one generated write, placed once (placement does not depend
// on the table).
type hotWrite struct {
	routing string
	p       routing.Placement
}

// childrenHotWrites generates n writes to an index with settings s: a
// share hotShare to the hot tenant, the rest to hotTenants others, each
// with a fresh _id (partitioned indices spread a tenant by _id).
func childrenHotWrites(s routing.Settings, n int, seed int64) []hotWrite {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	out := make([]hotWrite, n)
	for i := range out {
		r := hotTenantName
		if rng.Float64() >= hotShare {
			r = fmt.Sprintf("tenant-%d", rng.IntN(hotTenants))
		}
		out[i] = hotWrite{routing: r, p: s.Place(fmt.Sprintf("w-%d", i), r)}
	}
	return out
}

// hotStep is the state before one decision.
type hotStep struct {
	Splits      int // splits applied so far
	Leaves      int // active shards of the index
	HotShard    routing.ShardID
	HotWidth    uint64  // of the leaf with most of the hot tenant's writes, in routing keys
	HotShare    float64 // that leaf's share of all writes
	TenantShare float64 // the hot tenant's share of that leaf's writes
	Decision    string
}

// childrenHotRun asks policy.Decide what to do with writes under table t
// and applies its splits until it returns none; it returns every step and
// the last decision.
func childrenHotRun(ctx context.Context, t *routing.Table, writes []hotWrite) ([]hotStep, policy.Decision, error) {
	now := time.Unix(1_000_000, 0)
	th := policy.DefaultThresholds()
	window := th.SplitSustain
	scale := hotIndexRate * window.Seconds() / float64(len(writes)) // writes in the window per generated write
	var steps []hotStep
	for step := 0; ; step++ {
		if err := ctx.Err(); err != nil {
			return steps, policy.Decision{}, err
		}
		count := map[routing.ShardID]int{}
		hot := map[routing.ShardID]int{}
		keys := map[routing.ShardID][]policy.KeySample{}
		for _, w := range writes {
			sh := t.Lookup(w.p)
			count[sh]++
			if w.routing == hotTenantName {
				hot[sh]++
			}
			keys[sh] = append(keys[sh], policy.KeySample{Key: t.KeyOf(w.p), Value: w.routing})
		}
		in := policy.Input{Now: now, Table: t, Shards: map[routing.ShardID]policy.ShardStats{}}
		for sh, n := range count {
			ks := keys[sh]
			if len(ks) > hotSampleCap { // a stride sample, as a bounded reservoir would keep
				sample := make([]policy.KeySample, 0, hotSampleCap)
				for i := range hotSampleCap {
					sample = append(sample, ks[i*len(ks)/hotSampleCap])
				}
				ks = sample
			}
			in.Shards[sh] = policy.ShardStats{Intervals: []policy.Interval{{From: now.Add(-window), To: now,
				Writes: uint64(float64(n)*scale + 0.5), Keys: ks}}}
		}
		var hs routing.ShardID
		for sh, n := range hot {
			if n > hot[hs] || (n == hot[hs] && sh < hs) {
				hs = sh
			}
		}
		loc, _ := t.Shard(hs)
		st := hotStep{Splits: step, Leaves: len(t.ActiveShards()), HotShard: hs, HotWidth: loc.Span.Width(),
			HotShare: float64(count[hs]) / float64(len(writes)), TenantShare: float64(hot[hs]) / float64(count[hs])}
		d := policy.Decide(in, th)
		switch {
		case d.Action.Kind == policy.Split:
			st.Decision = d.Action.String()
		case len(d.Unsplittable) > 0:
			st.Decision = d.Unsplittable[0].String()
		default:
			st.Decision = d.Action.String()
		}
		steps = append(steps, st)
		if d.Action.Kind != policy.Split || step == hotMaxSteps {
			return steps, d, nil
		}
		next, err := routing.Apply(t, routing.Edit{Kind: routing.BeginSplit, Shard: d.Action.Shard, Ways: d.Action.Ways, Points: d.Action.Points})
		if err != nil {
			return steps, d, fmt.Errorf("policy's split %v: %w", d.Action, err)
		}
		rec, _ := next.Split(d.Action.Shard)
		ids := make([]routing.ShardID, len(rec.Children))
		for i, c := range rec.Children {
			ids[i] = c.Shard
		}
		if t, err = routing.Apply(next, routing.Edit{Kind: routing.CommitSplit, Shard: d.Action.Shard, Children: ids}); err != nil {
			return steps, d, err
		}
	}
}

// hotResult is one hot-key run: its first and last step.
type hotResult struct {
	steps       []hotStep
	first, last hotStep
	splits      int
	unsplit     bool
}

func hotKeyOf(m routing.Mode, p int) string { return fmt.Sprintf("%s/%d", m, p) }

// childrenHotKey runs the hot-key experiment for both modes with
// routing_partition_size 1 and 8, adds a table per run and its numbers to
// a, and returns the runs by hotKeyOf.
func childrenHotKey(ctx context.Context, cfg Config, sz childrenSizes, a *Answer) (map[string]hotResult, error) {
	res := map[string]hotResult{}
	for _, p := range []int{1, 8} {
		s := childrenSettings(p)
		writes := childrenHotWrites(s, sz.hotWrites, cfg.Seed)
		for _, m := range childrenModes {
			cfg.Progressf("children: hot routing value, %s mode, routing_partition_size %d", m, p)
			t, err := routing.NewTable(m, s)
			if err != nil {
				return nil, err
			}
			steps, d, err := childrenHotRun(ctx, t, writes)
			if err != nil {
				return nil, fmt.Errorf("hot key (%s, P=%d): %w", m, p, err)
			}
			tab := Table{Header: []string{fmt.Sprintf("%s, routing_partition_size %d: splits so far", m, p), "shards",
				"hot leaf (width in keys)", "hot leaf's share of all writes", "hot tenant's share of the hot leaf", "policy.Decide"}}
			for _, st := range steps {
				tab.Rows = append(tab.Rows, []string{fmt.Sprint(st.Splits), fmt.Sprint(st.Leaves),
					fmt.Sprintf("%d (%d)", st.HotShard, st.HotWidth), fmt.Sprintf("%.1f%%", 100*st.HotShare),
					fmt.Sprintf("%.1f%%", 100*st.TenantShare), st.Decision})
			}
			a.Tables = append(a.Tables, tab)
			first, last := steps[0], steps[len(steps)-1]
			res[hotKeyOf(m, p)] = hotResult{steps: steps, first: first, last: last, splits: last.Splits, unsplit: len(d.Unsplittable) > 0}
			a.Numbers = append(a.Numbers,
				Measured(fmt.Sprintf("hot leaf's share of writes before splitting, %s, P=%d", m, p), "%", 100*first.HotShare),
				Measured(fmt.Sprintf("hot leaf's share of writes after the policy's splits, %s, P=%d", m, p), "%", 100*last.HotShare),
				Measured(fmt.Sprintf("splits the policy made, %s, P=%d", m, p), "splits", float64(last.Splits)))
		}
	}
	return res, nil
}

// childrenHotChart draws the hot leaf's share of writes against the
// policy's splits, one line per mode and routing_partition_size.
func childrenHotChart(file string, res map[string]hotResult) error {
	var series []chartSeries678
	for _, p := range []int{1, 8} {
		for _, m := range childrenModes {
			var xys plotter.XYs
			for _, st := range res[hotKeyOf(m, p)].steps {
				xys = append(xys, plotter.XY{X: float64(st.Splits), Y: 100 * st.HotShare})
			}
			series = append(series, chartSeries678{Name: fmt.Sprintf("%s children, routing_partition_size %d", m, p), XYs: xys, Dashed: p > 1})
		}
	}
	return lineChart678(file, fmt.Sprintf("One tenant takes %.0f%% of writes: the hottest shard under the load policy's splits", 100*hotShare),
		"splits the policy made", "hottest shard's share of writes (%)", series)
}
