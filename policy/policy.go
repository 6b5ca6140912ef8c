// Package policy decides load-based automatic splits and merges: a pure
// function (Decide) from per-shard statistics, the routing table and the
// time to at most one action — split one leaf at a point, or merge two
// adjacent leaves of a root — plus the hot keys it refuses to split.
//
// It imports routing only, and does no I/O, reads no clock (the time is an
// argument) and uses no randomness, so every rule is a table test. The
// statistics come from storage's always-on counters and key sample
// (storage.Shard.LoadSample, EstimateSize); Recorder turns periodic
// readings of them into the per-interval history Decide reads.
//
// # Thresholds and their anchors
//
// The defaults (DefaultThresholds) follow the systems that split and merge
// by load in production (see /work/shared/reference/rfc-and-peers.md,
// "Load-based split and merge"):
//
//   - split when a shard's write rate stays above SplitWritesPerSec for
//     SplitSustain: CockroachDB's kv.range_split.load_qps_threshold is
//     2,500 QPS; TiKV's Load Base Split fires at 3,000 QPS sustained 10 s.
//     We take CockroachDB's rate and TiKV's window.
//   - the split point halves the sampled load (CockroachDB finds the split
//     key from a reservoir sample of request keys; TiKV picks a key that
//     balances the halves), not the midpoint — in partition mode. In
//     opensearch mode children have equal hash widths (OpenSearch's rule),
//     and the decision reports the load imbalance that leaves.
//   - merge two adjacent leaves when their combined load over MergeWindow
//     is under MergeLoadFraction of the split threshold and their combined
//     size is under the size limit: CockroachDB merges when the combined
//     maximum QPS over the last 5 minutes is under half the split
//     threshold. A load-based split is sticky for MergeDelay before its
//     children may merge (CockroachDB's kv.range_split.by_load_merge_delay,
//     5 minutes).
//   - one action at a time per index: nothing while a split or a merge is
//     in progress.
//   - an action that failed is not proposed again for RetryAfter: no
//     action involving one of its shards is, so one that keeps failing
//     neither runs at every tick nor starves the next hottest leaf. This
//     one is ours, not an anchor's: 10 s, one sustain window.
//   - a leaf that cannot be split further (one partition; in opensearch
//     mode, too narrow for two children wider than 1,000 hashes) is never
//     split: Decide reports its hottest routing value and that value's
//     share of the leaf's writes, with a remedy: in partition mode
//     index.routing_partition_size (it spreads one routing value over
//     several partitions); in opensearch mode none by splitting (see
//     RemedyHashRange).
package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

// Thresholds are the policy's named knobs.
type Thresholds struct {
	// SplitWritesPerSec: a shard whose write rate stays above this for
	// SplitSustain is split (CockroachDB: 2,500 QPS; TiKV: 3,000 QPS).
	SplitWritesPerSec float64
	// SplitSustain: how long the rate must stay above the threshold
	// (TiKV: 10 s).
	SplitSustain time.Duration
	// MaxShardBytes: a shard larger than this is split; two leaves merge
	// only if together they are smaller.
	MaxShardBytes uint64
	// MergeWindow: the load of a merge candidate is its peak over this
	// window, which must be covered by statistics (CockroachDB: 5 min).
	MergeWindow time.Duration
	// MergeLoadFraction: merge only if the combined peak load is under this
	// fraction of SplitWritesPerSec (CockroachDB: one half).
	MergeLoadFraction float64
	// MergeDelay: the children of a load-based split may not merge until
	// this long after it (CockroachDB: 5 min).
	MergeDelay time.Duration
	// MinKeySamples: fewer sampled writes than this and a split falls back
	// to equal widths (the sample says too little to place the point).
	MinKeySamples int
	// RetryAfter: after an action fails, no action involving one of its
	// shards is proposed for this long (0: at once, at the next tick).
	RetryAfter time.Duration
}

// DefaultThresholds returns the anchors' values (see the package comment).
// MaxShardBytes is 50 GiB, the top of OpenSearch's usual shard-size advice
// (10–50 GB); the anchors' range sizes (CockroachDB 512 MiB, TiKV 96 and
// later 256 MiB) are for units meant to be far more numerous than shards.
func DefaultThresholds() Thresholds {
	return Thresholds{
		SplitWritesPerSec: 2500,
		SplitSustain:      10 * time.Second,
		MaxShardBytes:     50 << 30,
		MergeWindow:       5 * time.Minute,
		MergeLoadFraction: 0.5,
		MergeDelay:        5 * time.Minute,
		MinKeySamples:     20,
		RetryAfter:        10 * time.Second,
	}
}

// Validate names the first threshold that makes no sense.
func (th Thresholds) Validate() error {
	switch {
	case !(th.SplitWritesPerSec > 0) || math.IsInf(th.SplitWritesPerSec, 1):
		// +Inf would never split by load and, through MergeLoadFraction,
		// merge every adjacent pair however hot.
		return fmt.Errorf("policy: split threshold %v writes/s must be positive and finite", th.SplitWritesPerSec)
	case th.SplitSustain <= 0:
		return fmt.Errorf("policy: split sustain window %v must be positive", th.SplitSustain)
	case th.MaxShardBytes == 0:
		return fmt.Errorf("policy: max shard size must be positive")
	case th.MergeWindow <= 0:
		return fmt.Errorf("policy: merge window %v must be positive", th.MergeWindow)
	case !(th.MergeLoadFraction > 0 && th.MergeLoadFraction < 1):
		return fmt.Errorf("policy: merge load fraction %v must be in (0, 1)", th.MergeLoadFraction)
	case th.MergeDelay < 0:
		return fmt.Errorf("policy: merge delay %v must not be negative", th.MergeDelay)
	case th.RetryAfter < 0:
		return fmt.Errorf("policy: retry delay %v must not be negative", th.RetryAfter)
	case th.MinKeySamples < 0:
		return fmt.Errorf("policy: minimum key samples %d must not be negative", th.MinKeySamples)
	}
	return nil
}

// KeySample is one sampled write: its routing key and its routing value
// (or _id when unrouted).
type KeySample struct {
	Key   routing.Key
	Value string
}

// Interval is one shard's load over [From, To).
type Interval struct {
	From, To      time.Time
	Writes, Reads uint64
	// Keys is a uniform sample of the interval's writes; each entry stands
	// for Writes/len(Keys) of them.
	Keys []KeySample
}

// WritesPerSec is the interval's write rate.
func (iv Interval) WritesPerSec() float64 { return perSec(iv.Writes, iv.To.Sub(iv.From)) }

// ReadsPerSec is the interval's read rate.
func (iv Interval) ReadsPerSec() float64 { return perSec(iv.Reads, iv.To.Sub(iv.From)) }

func perSec(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// ShardStats is what Decide knows of one shard.
type ShardStats struct {
	Intervals []Interval // ascending and contiguous (each From is the previous To)
	Size      uint64     // estimated bytes on disk
}

// LoadSplit records a split the policy caused, for the merge delay.
type LoadSplit struct {
	Parent   routing.ShardID
	Children []routing.ShardID
	At       time.Time
}

// Failure records an action that failed, for RetryAfter.
type Failure struct {
	Shards []routing.ShardID // the split's parent, or the merge's sources
	At     time.Time
}

// Input is everything Decide reads.
type Input struct {
	Now        time.Time
	Table      *routing.Table
	Shards     map[routing.ShardID]ShardStats
	LoadSplits []LoadSplit // load-based splits so far (older ones may be dropped)
	Failures   []Failure   // failed actions so far (older ones may be dropped)
}

// retrying returns the shards of actions that failed less than RetryAfter
// before now.
func (in Input) retrying(th Thresholds) map[routing.ShardID]bool {
	out := map[routing.ShardID]bool{}
	for _, f := range in.Failures {
		if age := in.Now.Sub(f.At); age >= 0 && age < th.RetryAfter {
			for _, s := range f.Shards {
				out[s] = true
			}
		}
	}
	return out
}

// ActionKind is what an Action does.
type ActionKind uint8

const (
	// None: nothing to do.
	None ActionKind = iota
	// Split one leaf.
	Split
	// Merge adjacent leaves of one root.
	Merge
)

func (k ActionKind) String() string {
	switch k {
	case None:
		return "none"
	case Split:
		return "split"
	case Merge:
		return "merge"
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Reason is why a split was chosen.
type Reason uint8

const (
	ReasonNone Reason = iota
	// ReasonLoad: the write rate stayed above the threshold.
	ReasonLoad
	// ReasonSize: the shard is over the size limit.
	ReasonSize
)

func (r Reason) String() string {
	switch r {
	case ReasonLoad:
		return "load"
	case ReasonSize:
		return "size"
	}
	return "none"
}

// Action is at most one table change.
type Action struct {
	Kind ActionKind
	// Split: the leaf, and either one explicit point (partition mode, load
	// split with enough samples) or Ways equal children.
	Shard  routing.ShardID
	Points []routing.Key
	Ways   int
	Reason Reason
	// Merge: the leaves, adjacent and in key order.
	Shards []routing.ShardID
	// WritesPerSec: the split leaf's mean rate over the sustain window, or
	// the merge candidates' combined peak over the merge window.
	WritesPerSec float64
	// LeftShare is the share of the leaf's sampled writes below the split
	// point, Imbalance = |left − right| / (left + right) of the sample (0:
	// halves exactly; 1: everything on one side). Both are NaN when the
	// sample was too small to say.
	LeftShare, Imbalance float64
}

func (a Action) String() string {
	switch a.Kind {
	case Split:
		where := fmt.Sprintf("into %d", a.Ways)
		if len(a.Points) > 0 {
			where = fmt.Sprintf("at %v", a.Points)
		}
		return fmt.Sprintf("split %d %s (%s, %.0f writes/s, imbalance %.2f)", a.Shard, where, a.Reason, a.WritesPerSec, a.Imbalance)
	case Merge:
		return fmt.Sprintf("merge %v (%.0f writes/s combined peak)", a.Shards, a.WritesPerSec)
	}
	return "none"
}

// HotKey is a leaf over the split threshold that cannot be split: its
// hottest routing value and that value's share of the leaf's writes.
type HotKey struct {
	Shard        routing.ShardID
	Key          routing.Key // the routing key (partition, or biased hash) of Value
	Value        string      // the routing value (or _id when unrouted)
	Share        float64     // of the leaf's sampled writes over the sustain window
	WritesPerSec float64     // the leaf's mean rate over the sustain window
	Remedy       string
}

// The remedies a HotKey names. In partition mode a routing value's
// routing_partition_size offsets land in as many consecutive partitions,
// which partition-aligned children can separate. In opensearch mode the
// offsets are added to the hash, so a routing value's hashes are
// consecutive and stay inside one hash-range child (every child is wider
// than 1,000 hashes): routing_partition_size cannot help there.
const (
	RemedyPartitionSize = "set index.routing_partition_size > 1 (at index creation) so one routing value spreads over several partitions"
	RemedyHashRange     = "none by splitting: a routing value's routing_partition_size hashes are consecutive and stay in one hash-range child; route it by _id, or use partition-aligned children"
)

// remedy is the remedy for an unsplittable hot key in mode m with
// routing_partition_size p. Where p is already above 1 the setting is in
// force and the remedy is more of it (a new index: the setting is fixed at
// creation), not RemedyPartitionSize, which would name what is set.
func remedy(m routing.Mode, p int) string {
	switch {
	case m == routing.ModeOpenSearch:
		return RemedyHashRange
	case p > 1:
		return fmt.Sprintf("raise index.routing_partition_size above %d (at index creation: a new index) so one routing value spreads over more partitions", p)
	}
	return RemedyPartitionSize
}

func (h HotKey) String() string {
	return fmt.Sprintf("shard %d cannot be split: routing value %q takes %.0f%% of its %.0f writes/s; %s",
		h.Shard, h.Value, 100*h.Share, h.WritesPerSec, h.Remedy)
}

// Decision is Decide's answer.
type Decision struct {
	Action       Action
	Unsplittable []HotKey // leaves over the threshold that cannot be split, hottest first
}

// Decide returns at most one action for the index, and the hot keys it
// refuses to split. Splits come first (hottest leaf first, then the
// largest over the size limit); a merge is proposed only when no split is.
// No action involves a shard whose action failed within RetryAfter.
func Decide(in Input, th Thresholds) Decision {
	var d Decision
	t := in.Table
	if len(t.InProgress()) > 0 || len(t.MergesInProgress()) > 0 {
		return d // one action at a time per index
	}
	type candidate struct {
		id     routing.ShardID
		span   routing.Span
		reason Reason
		rate   float64
		size   uint64
		keys   []weighted
	}
	var cands []candidate
	for r := range t.Settings().Shards {
		for _, l := range t.Leaves(routing.ShardID(r)) {
			st, ok := in.Shards[l.Shard]
			if !ok {
				continue
			}
			rate, sustained := sustainedRate(st.Intervals, in.Now, th)
			switch {
			case sustained:
				cands = append(cands, candidate{l.Shard, l.Span, ReasonLoad, rate, st.Size, keysSince(st.Intervals, in.Now.Add(-th.SplitSustain))})
			case st.Size > th.MaxShardBytes:
				cands = append(cands, candidate{l.Shard, l.Span, ReasonSize, rate, st.Size, keysSince(st.Intervals, in.Now.Add(-th.SplitSustain))})
			}
		}
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if a.reason != b.reason {
			return cmp.Compare(a.reason, b.reason) // load before size
		}
		if a.reason == ReasonLoad {
			return cmp.Compare(b.rate, a.rate)
		}
		return cmp.Compare(b.size, a.size)
	})
	retrying := in.retrying(th)
	for _, c := range cands {
		if !splittable(t, c.span) {
			if c.reason == ReasonLoad {
				d.Unsplittable = append(d.Unsplittable, hotKey(remedy(t.Mode(), t.Settings().PartitionSize), c.id, c.rate, c.keys))
			}
			continue
		}
		if d.Action.Kind == None && !retrying[c.id] {
			d.Action = splitAction(t, c.id, c.span, c.reason, c.rate, c.keys, th)
		}
	}
	if d.Action.Kind == None {
		d.Action = mergeAction(in, th, retrying)
	}
	return d
}

// sustainedRate reports whether every interval of the last SplitSustain is
// above the threshold and the intervals cover the whole window, and the
// mean rate over the intervals it looked at.
func sustainedRate(ivs []Interval, now time.Time, th Thresholds) (float64, bool) {
	from := now.Add(-th.SplitSustain)
	var writes uint64
	var span time.Duration
	covered, above := false, true
	for i := len(ivs) - 1; i >= 0; i-- {
		iv := ivs[i]
		if !iv.To.After(from) {
			break
		}
		if i < len(ivs)-1 && !iv.To.Equal(ivs[i+1].From) {
			break // a gap: the window is not covered
		}
		writes += iv.Writes
		span += iv.To.Sub(iv.From)
		if iv.WritesPerSec() <= th.SplitWritesPerSec {
			above = false
		}
		if !iv.From.After(from) {
			covered = true
			break
		}
	}
	return perSec(writes, span), covered && above && fresh(ivs, now, th)
}

// fresh reports whether a shard's statistics reach now: its last interval
// ends within half the sustain window of it. Both rules need it: a window
// covered at its start but not up to now says nothing of the latest load.
func fresh(ivs []Interval, now time.Time, th Thresholds) bool {
	return len(ivs) > 0 && !ivs[len(ivs)-1].To.Before(now.Add(-th.SplitSustain/2))
}

// weighted is a sampled key with the number of writes it stands for.
type weighted struct {
	KeySample
	w float64
}

// keysSince returns the sampled writes of the intervals ending after from.
func keysSince(ivs []Interval, from time.Time) []weighted {
	var out []weighted
	for _, iv := range ivs {
		if !iv.To.After(from) || len(iv.Keys) == 0 {
			continue
		}
		w := float64(iv.Writes) / float64(len(iv.Keys))
		for _, k := range iv.Keys {
			out = append(out, weighted{k, w})
		}
	}
	return out
}

// splittable reports whether a leaf can have two children.
func splittable(t *routing.Table, sp routing.Span) bool {
	if t.Mode() == routing.ModeOpenSearch {
		return sp.Width()/2 > 1000 // OpenSearch: every child wider than 1,000 hashes
	}
	return sp.Width() >= 2
}

// hotKey names the hottest routing value of an unsplittable leaf.
func hotKey(rem string, id routing.ShardID, rate float64, keys []weighted) HotKey {
	h := HotKey{Shard: id, WritesPerSec: rate, Remedy: rem}
	by := map[string]float64{}
	total := 0.0
	for _, k := range keys {
		by[k.Value] += k.w
		total += k.w
	}
	for _, k := range keys { // first-seen order breaks ties deterministically
		if v := by[k.Value]; v > by[h.Value] || h.Value == "" {
			h.Value, h.Key = k.Value, k.Key
		}
	}
	if total > 0 {
		h.Share = by[h.Value] / total
	}
	return h
}

// splitAction places the split: at the boundary that best halves the
// sampled load in partition mode (when the sample is big enough), else into
// two equal widths; it reports the sampled imbalance either way.
func splitAction(t *routing.Table, id routing.ShardID, sp routing.Span, reason Reason, rate float64, keys []weighted, th Thresholds) Action {
	a := Action{Kind: Split, Shard: id, Ways: 2, Reason: reason, WritesPerSec: rate, LeftShare: math.NaN(), Imbalance: math.NaN()}
	mid := sp.Start + sp.Width()/2 // where routing's 2-way equal split cuts
	if len(keys) < th.MinKeySamples {
		return a
	}
	point := mid
	if t.Mode() == routing.ModePartition && reason == ReasonLoad {
		point = balancedPoint(sp, keys)
		a.Ways, a.Points = 0, []routing.Key{routing.Key(point)}
	}
	left, total := 0.0, 0.0
	for _, k := range keys {
		total += k.w
		if uint64(k.Key) < point {
			left += k.w
		}
	}
	if total > 0 {
		a.LeftShare = left / total
		a.Imbalance = math.Abs(2*left-total) / total
	}
	return a
}

// balancedPoint returns the boundary b in (Start, End) that minimises
// |load below b − load at or above b| over the sample. Every boundary in the
// gap between two neighbouring sampled keys splits the sample the same way;
// within it the cut goes next to a neighbour that weighs more than twice the
// other (so a hot key starts or ends its child and the next split, if any,
// isolates it), else nearest the span's midpoint (uniform load, where
// sampling noise makes neighbours differ a little).
func balancedPoint(sp routing.Span, keys []weighted) uint64 {
	type group struct {
		key uint64
		w   float64
	}
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, func(a, b weighted) int { return cmp.Compare(a.Key, b.Key) })
	var groups []group
	total := 0.0
	for _, k := range sorted {
		total += k.w
		if n := len(groups); n > 0 && groups[n-1].key == uint64(k.Key) {
			groups[n-1].w += k.w
			continue
		}
		groups = append(groups, group{uint64(k.Key), k.w})
	}
	mid := sp.Start + sp.Width()/2
	best, bestDiff := mid, math.Inf(1)
	left := 0.0
	// Gap i holds the boundaries after group i-1 and up to group i's key:
	// [groups[i-1].key+1, groups[i].key]; gap 0 starts at the span, the
	// last ends at the span's end.
	for i := 0; i <= len(groups); i++ {
		lo, hi := sp.Start+1, sp.End-1
		var wBelow, wAbove float64
		if i > 0 {
			lo, wBelow = max(lo, groups[i-1].key+1), groups[i-1].w
		}
		if i < len(groups) {
			hi, wAbove = min(hi, groups[i].key), groups[i].w
		}
		if lo <= hi {
			var b uint64
			switch {
			case wBelow > 2*wAbove:
				b = lo
			case wAbove > 2*wBelow:
				b = hi
			default:
				b = min(max(mid, lo), hi)
			}
			diff := math.Abs(2*left - total)
			if diff < bestDiff || (diff == bestDiff && distance(b, mid) < distance(best, mid)) {
				best, bestDiff = b, diff
			}
		}
		if i < len(groups) {
			left += groups[i].w
		}
	}
	return best
}

func distance(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// peakRate returns a shard's highest interval write rate over the merge
// window, and whether its intervals cover the window, up to now (fresh).
// A stalled interval does not cover: the readings stalled (a paused
// process, a swapping machine), and such an interval shows only its
// average, which can hide a peak far above the merge limit.
func peakRate(ivs []Interval, now time.Time, th Thresholds) (float64, bool) {
	from := now.Add(-th.MergeWindow)
	usual := usualLength(ivs)
	peak, covered := 0.0, false
	for i := len(ivs) - 1; i >= 0; i-- {
		iv := ivs[i]
		if !iv.To.After(from) {
			break
		}
		if stalled(iv, usual, th) {
			break
		}
		if i < len(ivs)-1 && !iv.To.Equal(ivs[i+1].From) {
			break
		}
		peak = max(peak, iv.WritesPerSec())
		if !iv.From.After(from) {
			covered = true
			break
		}
	}
	return peak, covered && fresh(ivs, now, th)
}

// stalled reports whether an interval is a stall of the readings rather
// than their cadence: longer than SplitSustain and more than twice the
// shard's usual interval. Length alone cannot tell: a caller that reads
// less often than SplitSustain (nothing asks it not to; splits work at any
// cadence) makes every interval longer than SplitSustain, and taking each
// for a stall would leave every merge window uncovered for ever.
func stalled(iv Interval, usual time.Duration, th Thresholds) bool {
	d := iv.To.Sub(iv.From)
	return d > th.SplitSustain && d > 2*usual
}

// usualLength is the median length of a shard's intervals (the shorter of
// the two middle ones: a stall among few readings is not taken for the
// cadence). The Recorder keeps at least recorderMinIntervals of them, so a
// stall longer than the merge window is still compared with the readings
// before it.
func usualLength(ivs []Interval) time.Duration {
	if len(ivs) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(ivs))
	for i, iv := range ivs {
		ds[i] = iv.To.Sub(iv.From)
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)/2]
}

// mergeAction proposes the coolest pair of adjacent leaves of one root
// whose combined peak load over the merge window is under the fraction of
// the split threshold, whose combined size is under the limit, and none of
// which is a child of a load-based split younger than the merge delay or
// in an action that failed within RetryAfter. The
// combined peak is the sum of the two peaks: never below the true peak of
// the sum, so the rule errs toward not merging.
func mergeAction(in Input, th Thresholds, retrying map[routing.ShardID]bool) Action {
	young := map[routing.ShardID]bool{}
	for _, s := range in.LoadSplits {
		if in.Now.Sub(s.At) < th.MergeDelay {
			for _, c := range s.Children {
				young[c] = true
			}
		}
	}
	limit := th.MergeLoadFraction * th.SplitWritesPerSec
	best := Action{}
	for r := range in.Table.Settings().Shards {
		leaves := in.Table.Leaves(routing.ShardID(r))
		for i := 0; i+1 < len(leaves); i++ {
			a, b := leaves[i].Shard, leaves[i+1].Shard
			if young[a] || young[b] || retrying[a] || retrying[b] {
				continue
			}
			sa, okA := in.Shards[a]
			sb, okB := in.Shards[b]
			if !okA || !okB || sa.Size+sb.Size >= th.MaxShardBytes {
				continue
			}
			pa, covA := peakRate(sa.Intervals, in.Now, th)
			pb, covB := peakRate(sb.Intervals, in.Now, th)
			if !covA || !covB || pa+pb >= limit {
				continue
			}
			if best.Kind == None || pa+pb < best.WritesPerSec {
				best = Action{Kind: Merge, Shards: []routing.ShardID{a, b}, WritesPerSec: pa + pb, LeftShare: math.NaN(), Imbalance: math.NaN()}
			}
		}
	}
	return best
}
