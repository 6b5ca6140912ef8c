package policy

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/shardsplit/shardsplit/routing"
)

var (
	t0  = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now = t0.Add(100 * time.Second)
)

// testThresholds are small, round numbers.
func testThresholds() Thresholds {
	return Thresholds{SplitWritesPerSec: 100, SplitSustain: 10 * time.Second, MaxShardBytes: 1000,
		MergeWindow: 60 * time.Second, MergeLoadFraction: 0.5, MergeDelay: 120 * time.Second, MinKeySamples: 4, RetryAfter: 30 * time.Second}
}

// table returns a 2-shard partition-mode index with R = 16 (root 0 owns
// partitions [0, 8), root 1 [8, 16)) after the given splits.
func table(t *testing.T, mode routing.Mode, splits ...routing.Edit) *routing.Table {
	t.Helper()
	tab, err := routing.NewTable(mode, routing.Settings{Shards: 2, RoutingShards: 16, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range splits {
		if e.Kind == routing.BeginSplit && e.Children != nil { // a marker: commit it too
			tab = commitSplit(t, tab, e)
			continue
		}
		if tab, err = routing.Apply(tab, e); err != nil {
			t.Fatal(err)
		}
	}
	return tab
}

// commitSplit applies a split and commits it.
func commitSplit(t *testing.T, tab *routing.Table, e routing.Edit) *routing.Table {
	t.Helper()
	tab, err := routing.Apply(tab, e)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := tab.Split(e.Shard)
	var ids []routing.ShardID
	for _, c := range rec.Children {
		ids = append(ids, c.Shard)
	}
	if tab, err = routing.Apply(tab, routing.Edit{Kind: routing.CommitSplit, Shard: e.Shard, Children: ids}); err != nil {
		t.Fatal(err)
	}
	return tab
}

// split is a committed split of parent (into ways, or at points).
func split(parent routing.ShardID, ways int, points ...routing.Key) routing.Edit {
	return routing.Edit{Kind: routing.BeginSplit, Shard: parent, Ways: ways, Points: points, Children: []routing.ShardID{}}
}

// begin is a split left in progress.
func begin(parent routing.ShardID) routing.Edit {
	return routing.Edit{Kind: routing.BeginSplit, Shard: parent, Ways: 2}
}

// load is a shard's history: one-second intervals from `from` to now at a
// rate, except where override says otherwise, each with keys.
type load struct {
	from     time.Time
	rate     float64
	override map[int]float64 // seconds before now → rate of the interval ending then
	keys     []KeySample
	size     uint64
	stall    time.Duration // if set, the last interval is this long instead (the readings stalled)
}

func (l load) stats() ShardStats {
	var st ShardStats
	st.Size = l.size
	for at := l.from; at.Before(now); at = at.Add(time.Second) {
		r := l.rate
		if o, ok := l.override[int(now.Sub(at.Add(time.Second))/time.Second)]; ok {
			r = o
		}
		st.Intervals = append(st.Intervals, Interval{From: at, To: at.Add(time.Second), Writes: uint64(r), Keys: l.keys})
	}
	if l.stall > 0 { // one interval in place of the last stall's worth, at the same rate
		from := now.Add(-l.stall)
		st.Intervals = slices.DeleteFunc(st.Intervals, func(iv Interval) bool { return iv.To.After(from) })
		st.Intervals = append(st.Intervals, Interval{From: from, To: now, Writes: uint64(l.rate * l.stall.Seconds()), Keys: l.keys})
	}
	return st
}

func keys(spec ...any) []KeySample { // key, value, count, key, value, count, …
	var out []KeySample
	for i := 0; i < len(spec); i += 3 {
		for range spec[i+2].(int) {
			out = append(out, KeySample{Key: routing.Key(spec[i].(int)), Value: spec[i+1].(string)})
		}
	}
	return out
}

func TestDecide(t *testing.T) {
	nan := math.NaN()
	skewed := keys(1, "tenant-a", 5, 2, "doc-1", 3, 6, "doc-2", 2) // halves at partition 2, not at the midpoint 4
	cases := []struct {
		name       string
		mode       routing.Mode
		edits      []routing.Edit
		shards     map[routing.ShardID]load
		loadSplits []LoadSplit
		failures   []Failure
		want       Decision
	}{
		{
			name:   "sustained load splits at the point that halves the sampled load",
			shards: map[routing.ShardID]load{0: {from: t0, rate: 200, keys: skewed}, 1: {from: t0, rate: 10}},
			want: Decision{Action: Action{Kind: Split, Shard: 0, Points: []routing.Key{2}, Reason: ReasonLoad,
				WritesPerSec: 200, LeftShare: 0.5, Imbalance: 0}},
		},
		{
			name:   "one interval under the threshold in the window: no split",
			shards: map[routing.ShardID]load{0: {from: t0, rate: 200, keys: skewed, override: map[int]float64{3: 50}}},
			want:   Decision{},
		},
		{
			name:   "a dip before the window does not matter",
			shards: map[routing.ShardID]load{0: {from: t0, rate: 200, keys: skewed, override: map[int]float64{30: 50}}},
			want: Decision{Action: Action{Kind: Split, Shard: 0, Points: []routing.Key{2}, Reason: ReasonLoad,
				WritesPerSec: 200, LeftShare: 0.5, Imbalance: 0}},
		},
		{
			name:   "history shorter than the sustain window: no split",
			shards: map[routing.ShardID]load{0: {from: now.Add(-5 * time.Second), rate: 500, keys: skewed}},
			want:   Decision{},
		},
		{
			name:   "rate exactly at the threshold is not above it",
			shards: map[routing.ShardID]load{0: {from: t0, rate: 100, keys: skewed}},
			want:   Decision{},
		},
		{
			name:   "the hottest of two hot shards first",
			shards: map[routing.ShardID]load{0: {from: t0, rate: 200, keys: skewed}, 1: {from: t0, rate: 300, keys: keys(9, "a", 4, 14, "b", 4)}},
			want: Decision{Action: Action{Kind: Split, Shard: 1, Points: []routing.Key{12}, Reason: ReasonLoad,
				WritesPerSec: 300, LeftShare: 0.5, Imbalance: 0}},
		},
		{
			name:   "no key sample: equal widths",
			shards: map[routing.ShardID]load{0: {from: t0, rate: 200}},
			want:   Decision{Action: Action{Kind: Split, Shard: 0, Ways: 2, Reason: ReasonLoad, WritesPerSec: 200, LeftShare: nan, Imbalance: nan}},
		},
		{
			name:   "over the size limit: split into equal widths",
			shards: map[routing.ShardID]load{0: {from: t0, rate: 10, size: 2000}, 1: {from: t0, rate: 10, size: 500}},
			want:   Decision{Action: Action{Kind: Split, Shard: 0, Ways: 2, Reason: ReasonSize, WritesPerSec: 10, LeftShare: nan, Imbalance: nan}},
		},
		{
			name:   "load before size",
			shards: map[routing.ShardID]load{0: {from: t0, rate: 10, size: 2000}, 1: {from: t0, rate: 150, keys: keys(9, "a", 4, 14, "b", 4)}},
			want: Decision{Action: Action{Kind: Split, Shard: 1, Points: []routing.Key{12}, Reason: ReasonLoad,
				WritesPerSec: 150, LeftShare: 0.5, Imbalance: 0}},
		},
		{
			name: "opensearch mode: equal widths, and the imbalance they leave",
			mode: routing.ModeOpenSearch,
			shards: map[routing.ShardID]load{0: {from: t0, rate: 200,
				keys: keys(1<<20, "a", 3, 1<<30, "b", 1, 3<<30, "c", 1)}}, // 4 of 5 below 2^31
			want: Decision{Action: Action{Kind: Split, Shard: 0, Ways: 2, Reason: ReasonLoad, WritesPerSec: 200, LeftShare: 0.8, Imbalance: 0.6}},
		},
		{
			name:  "a leaf of one partition is never split: its hot key is reported instead",
			edits: []routing.Edit{split(1, 0, 9)}, // children 2 = [8, 9), 3 = [9, 16)
			shards: map[routing.ShardID]load{
				2: {from: t0, rate: 300, keys: keys(8, "tenant-hot", 8, 8, "doc-7", 2)},
				3: {from: t0, rate: 20},
			},
			want: Decision{Unsplittable: []HotKey{{Shard: 2, Key: 8, Value: "tenant-hot", Share: 0.8, WritesPerSec: 300, Remedy: RemedyPartitionSize}}},
		},
		{
			name:  "the hot key is reported alongside a split of another leaf",
			edits: []routing.Edit{split(1, 0, 9)},
			shards: map[routing.ShardID]load{
				0: {from: t0, rate: 200, keys: skewed},
				2: {from: t0, rate: 300, keys: keys(8, "tenant-hot", 10)},
				3: {from: t0, rate: 20},
			},
			want: Decision{
				Action:       Action{Kind: Split, Shard: 0, Points: []routing.Key{2}, Reason: ReasonLoad, WritesPerSec: 200, LeftShare: 0.5, Imbalance: 0},
				Unsplittable: []HotKey{{Shard: 2, Key: 8, Value: "tenant-hot", Share: 1, WritesPerSec: 300, Remedy: RemedyPartitionSize}},
			},
		},
		{
			name:   "a split in progress: nothing (one action at a time)",
			edits:  []routing.Edit{begin(0)},
			shards: map[routing.ShardID]load{1: {from: t0, rate: 500, keys: keys(9, "a", 4, 14, "b", 4)}},
			want:   Decision{},
		},
		{
			name:   "a merge in progress: nothing (one action at a time)",
			edits:  []routing.Edit{split(0, 2), {Kind: routing.BeginMerge, Sources: []routing.ShardID{2, 3}}},
			shards: map[routing.ShardID]load{1: {from: t0, rate: 500, keys: keys(9, "a", 4, 14, "b", 4)}},
			want:   Decision{},
		},
		{
			name:   "cool adjacent leaves of a root merge",
			edits:  []routing.Edit{split(0, 2)},
			shards: map[routing.ShardID]load{2: {from: t0, rate: 10}, 3: {from: t0, rate: 20}, 1: {from: t0, rate: 80}},
			want:   Decision{Action: Action{Kind: Merge, Shards: []routing.ShardID{2, 3}, WritesPerSec: 30, LeftShare: nan, Imbalance: nan}},
		},
		{
			name:   "combined peak at half the threshold: no merge",
			edits:  []routing.Edit{split(0, 2)},
			shards: map[routing.ShardID]load{2: {from: t0, rate: 10}, 3: {from: t0, rate: 10, override: map[int]float64{40: 40}}},
			want:   Decision{},
		},
		{
			name:   "a peak older than the merge window does not matter",
			edits:  []routing.Edit{split(0, 2)},
			shards: map[routing.ShardID]load{2: {from: t0, rate: 10}, 3: {from: t0, rate: 10, override: map[int]float64{70: 400}}},
			want:   Decision{Action: Action{Kind: Merge, Shards: []routing.ShardID{2, 3}, WritesPerSec: 20, LeftShare: nan, Imbalance: nan}},
		},
		{
			name:   "combined size at the limit: no merge",
			edits:  []routing.Edit{split(0, 2)},
			shards: map[routing.ShardID]load{2: {from: t0, rate: 10, size: 600}, 3: {from: t0, rate: 10, size: 400}},
			want:   Decision{},
		},
		{
			name:       "children of a load-based split are sticky for the merge delay",
			edits:      []routing.Edit{split(0, 2)},
			shards:     map[routing.ShardID]load{2: {from: t0, rate: 10}, 3: {from: t0, rate: 10}},
			loadSplits: []LoadSplit{{Parent: 0, Children: []routing.ShardID{2, 3}, At: now.Add(-119 * time.Second)}},
			want:       Decision{},
		},
		{
			name:       "after the merge delay they may merge",
			edits:      []routing.Edit{split(0, 2)},
			shards:     map[routing.ShardID]load{2: {from: t0, rate: 10}, 3: {from: t0, rate: 10}},
			loadSplits: []LoadSplit{{Parent: 0, Children: []routing.ShardID{2, 3}, At: now.Add(-120 * time.Second)}},
			want:       Decision{Action: Action{Kind: Merge, Shards: []routing.ShardID{2, 3}, WritesPerSec: 20, LeftShare: nan, Imbalance: nan}},
		},
		{
			name:   "merge window not covered by statistics: no merge",
			edits:  []routing.Edit{split(0, 2)},
			shards: map[routing.ShardID]load{2: {from: now.Add(-30 * time.Second), rate: 1}, 3: {from: t0, rate: 1}},
			want:   Decision{},
		},
		{
			name:  "a stalled reading's long interval does not cover the merge window",
			edits: []routing.Edit{split(0, 2)},
			shards: map[routing.ShardID]load{2: {from: t0, rate: 10, stall: 30 * time.Second},
				3: {from: t0, rate: 10}},
			want: Decision{},
		},
		{
			name:   "leaves of different roots never merge",
			shards: map[routing.ShardID]load{0: {from: t0, rate: 1}, 1: {from: t0, rate: 1}},
			want:   Decision{},
		},
		{
			name:   "the coolest adjacent pair merges",
			edits:  []routing.Edit{split(0, 0, 2, 5)}, // children 2 = [0, 2), 3 = [2, 5), 4 = [5, 8)
			shards: map[routing.ShardID]load{2: {from: t0, rate: 20}, 3: {from: t0, rate: 5}, 4: {from: t0, rate: 10}},
			want:   Decision{Action: Action{Kind: Merge, Shards: []routing.ShardID{3, 4}, WritesPerSec: 15, LeftShare: nan, Imbalance: nan}},
		},
		{
			name:     "a split that failed within RetryAfter gives way to the next hottest leaf",
			edits:    []routing.Edit{split(0, 2)},
			shards:   map[routing.ShardID]load{2: {from: t0, rate: 150, keys: keys(1, "a", 4, 2, "b", 4)}, 1: {from: t0, rate: 200, keys: keys(9, "a", 4, 14, "b", 4)}},
			failures: []Failure{{Shards: []routing.ShardID{1}, At: now.Add(-29 * time.Second)}},
			want: Decision{Action: Action{Kind: Split, Shard: 2, Points: []routing.Key{2}, Reason: ReasonLoad,
				WritesPerSec: 150, LeftShare: 0.5, Imbalance: 0}},
		},
		{
			name:     "after RetryAfter the failed split is proposed again",
			edits:    []routing.Edit{split(0, 2)},
			shards:   map[routing.ShardID]load{2: {from: t0, rate: 150, keys: keys(1, "a", 4, 2, "b", 4)}, 1: {from: t0, rate: 200, keys: keys(9, "a", 4, 14, "b", 4)}},
			failures: []Failure{{Shards: []routing.ShardID{1}, At: now.Add(-30 * time.Second)}},
			want: Decision{Action: Action{Kind: Split, Shard: 1, Points: []routing.Key{12}, Reason: ReasonLoad,
				WritesPerSec: 200, LeftShare: 0.5, Imbalance: 0}},
		},
		{
			name:     "a merge that failed within RetryAfter holds back every pair with one of its shards",
			edits:    []routing.Edit{split(0, 0, 2, 5)}, // children 2 = [0, 2), 3 = [2, 5), 4 = [5, 8)
			shards:   map[routing.ShardID]load{2: {from: t0, rate: 20}, 3: {from: t0, rate: 5}, 4: {from: t0, rate: 10}},
			failures: []Failure{{Shards: []routing.ShardID{3, 4}, At: now.Add(-10 * time.Second)}},
			want:     Decision{},
		},
		{
			name:     "a failure stamped after now holds nothing back",
			edits:    []routing.Edit{split(0, 2)},
			shards:   map[routing.ShardID]load{2: {from: t0, rate: 150, keys: keys(1, "a", 4, 2, "b", 4)}, 1: {from: t0, rate: 200, keys: keys(9, "a", 4, 14, "b", 4)}},
			failures: []Failure{{Shards: []routing.ShardID{1}, At: now.Add(time.Second)}},
			want: Decision{Action: Action{Kind: Split, Shard: 1, Points: []routing.Key{12}, Reason: ReasonLoad,
				WritesPerSec: 200, LeftShare: 0.5, Imbalance: 0}},
		},
		{
			name:   "a split comes before a merge",
			edits:  []routing.Edit{split(0, 2)},
			shards: map[routing.ShardID]load{2: {from: t0, rate: 1}, 3: {from: t0, rate: 1}, 1: {from: t0, rate: 200, keys: keys(9, "a", 4, 14, "b", 4)}},
			want: Decision{Action: Action{Kind: Split, Shard: 1, Points: []routing.Key{12}, Reason: ReasonLoad,
				WritesPerSec: 200, LeftShare: 0.5, Imbalance: 0}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mode := c.mode
			if mode == 0 {
				mode = routing.ModePartition
			}
			in := Input{Now: now, Table: table(t, mode, c.edits...), Shards: map[routing.ShardID]ShardStats{}, LoadSplits: c.loadSplits, Failures: c.failures}
			for id, l := range c.shards {
				in.Shards[id] = l.stats()
			}
			got := Decide(in, testThresholds())
			if diff := cmp.Diff(c.want, got, cmpopts.EquateNaNs(), cmpopts.EquateEmpty(), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Fatalf("Decide (-want +got):\n%s", diff)
			}
			if got.Action.Kind == Split { // the action is one the table accepts
				e := routing.Edit{Kind: routing.BeginSplit, Shard: got.Action.Shard, Ways: got.Action.Ways, Points: got.Action.Points}
				if _, err := routing.Apply(in.Table, e); err != nil {
					t.Fatalf("the table refuses %s: %v", got.Action, err)
				}
			}
		})
	}
}

func TestBalancedPoint(t *testing.T) {
	cases := []struct {
		name string
		span routing.Span
		keys []KeySample
		want uint64
	}{
		{name: "one hot partition in the middle goes to the side that balances", span: routing.Span{Start: 0, End: 8},
			keys: keys(4, "hot", 6, 1, "a", 2, 6, "b", 2), want: 4},
		{name: "hot partition at the start is cut off on its own", span: routing.Span{Start: 0, End: 8},
			keys: keys(0, "hot", 10, 5, "a", 1), want: 1},
		{name: "hot partition at the end is cut off on its own", span: routing.Span{Start: 0, End: 8},
			keys: keys(7, "hot", 10, 1, "a", 1), want: 7},
		{name: "dominant hot partition inside: the cut goes right next to it", span: routing.Span{Start: 64, End: 128},
			keys: keys(70, "a", 1, 80, "b", 1, 100, "c", 1, 106, "hot", 50, 120, "d", 1), want: 106},
		{name: "hot partition in the middle with load on both sides", span: routing.Span{Start: 0, End: 16},
			keys: keys(3, "a", 2, 9, "hot", 10, 14, "b", 3), want: 10},
		{name: "uniform load: the midpoint", span: routing.Span{Start: 8, End: 16},
			keys: keys(8, "a", 1, 9, "a", 1, 10, "a", 1, 11, "a", 1, 12, "a", 1, 13, "a", 1, 14, "a", 1, 15, "a", 1), want: 12},
		{name: "gap between sampled keys: the point nearest the midpoint", span: routing.Span{Start: 0, End: 100},
			keys: keys(10, "a", 5, 90, "b", 5), want: 50},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var w []weighted
			for _, k := range c.keys {
				w = append(w, weighted{k, 1})
			}
			if got := balancedPoint(c.span, w); got != c.want {
				t.Fatalf("balancedPoint = %d, want %d", got, c.want)
			}
		})
	}
}

func TestRecorder(t *testing.T) {
	th := testThresholds()
	r := NewRecorder(th)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	r.Observe(at(0), map[routing.ShardID]Reading{0: {Writes: 100}, 1: {Writes: 5}})
	if st := r.Stats(); len(st[0].Intervals) != 0 {
		t.Fatalf("first reading made intervals: %+v", st[0])
	}
	r.Observe(at(2), map[routing.ShardID]Reading{0: {Writes: 700, Reads: 4, Size: 9, Keys: keys(3, "a", 2)}, 1: {Writes: 5}})
	want := ShardStats{Size: 9, Intervals: []Interval{{From: at(0), To: at(2), Writes: 600, Reads: 4, Keys: keys(3, "a", 2)}}}
	if diff := cmp.Diff(want, r.Stats()[0]); diff != "" {
		t.Fatalf("shard 0 (-want +got):\n%s", diff)
	}
	if got := r.Stats()[0].Intervals[0].WritesPerSec(); got != 300 {
		t.Fatalf("rate %v, want 300", got)
	}
	// Shard 1 is gone (split), shard 0 reopened (counters restart).
	r.Observe(at(3), map[routing.ShardID]Reading{0: {Writes: 3}})
	st := r.Stats()
	if _, ok := st[1]; ok || len(st[0].Intervals) != 0 {
		t.Fatalf("after a reopen and a retirement: %+v", st)
	}
	// History is trimmed to the merge window, key samples to the sustain window.
	for s := 4; s <= 200; s++ {
		r.Observe(at(s), map[routing.ShardID]Reading{0: {Writes: uint64(s * 10), Keys: keys(1, "a", 1)}})
	}
	ivs := r.Stats()[0].Intervals
	if first := ivs[0].From; first.Before(at(200).Add(-th.MergeWindow - time.Second)) {
		t.Fatalf("oldest interval starts at %v, beyond the merge window", first)
	}
	withKeys := 0
	for _, iv := range ivs {
		if len(iv.Keys) > 0 {
			withKeys++
		}
	}
	if withKeys != 10 {
		t.Fatalf("%d intervals keep key samples, want the sustain window's 10", withKeys)
	}
}

// A hash-range child holds all of a routing value's partition offsets
// (they are consecutive hashes), so routing_partition_size is no remedy
// there; findings question 6 measures it.
func TestRemedyByMode(t *testing.T) {
	for _, tc := range []struct {
		mode routing.Mode
		want string
	}{
		{routing.ModePartition, RemedyPartitionSize},
		{routing.ModeOpenSearch, RemedyHashRange},
	} {
		if got := hotKey(remedy(tc.mode, 1), 1, 10, []weighted{{}}).Remedy; got != tc.want {
			t.Errorf("%v: remedy %q, want %q", tc.mode, got, tc.want)
		}
	}
}

func TestValidateRefusesANegativeRetryDelay(t *testing.T) {
	th := testThresholds()
	th.RetryAfter = -time.Second
	if err := th.Validate(); err == nil || !strings.Contains(err.Error(), "-1s") {
		t.Fatalf("Validate with RetryAfter -1s: %v, want an error naming -1s", err)
	}
}

func TestValidateRefusesANegativeKeySampleMinimum(t *testing.T) {
	th := testThresholds()
	th.MinKeySamples = -5
	if err := th.Validate(); err == nil || !strings.Contains(err.Error(), "-5") {
		t.Fatalf("Validate with MinKeySamples -5: %v, want an error naming -5", err)
	}
}

// An infinite split threshold is not a threshold, and Validate refuses
// it: with it no leaf is ever split by load while the merge limit (a
// fraction of +Inf) is +Inf too, so every covered pair of adjacent leaves
// would merge, however hot.
func TestValidateRejectsAnInfiniteSplitRate(t *testing.T) {
	th := testThresholds()
	th.SplitWritesPerSec = math.Inf(1)
	err := th.Validate()
	if err == nil {
		// What the policy then does: it merges two leaves taking a
		// million writes/s each.
		in := Input{Now: now, Table: table(t, routing.ModePartition, split(0, 2)), Shards: map[routing.ShardID]ShardStats{
			2: load{from: t0, rate: 1e6}.stats(), 3: load{from: t0, rate: 1e6}.stats()}}
		t.Fatalf("Validate accepted split threshold %v; Decide then says %v", th.SplitWritesPerSec, Decide(in, th).Action)
	}
	if !strings.Contains(err.Error(), "+Inf") {
		t.Fatalf("the error does not name the bad value: %v", err)
	}
}

// In partition mode with routing_partition_size 2, the remedy for a hot
// leaf of one partition names the value in force and asks for more, not
// "set index.routing_partition_size > 1", the setting it already has.
func TestRemedyWhenPartitionSizeIsAlreadySet(t *testing.T) {
	tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 4, RoutingShards: 8, PartitionSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	tab = commitSplit(t, tab, routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2}) // root 0 = partitions [0, 2): two leaves of one partition
	hot := tab.Leaves(0)[0]
	in := Input{Now: now, Table: tab, Shards: map[routing.ShardID]ShardStats{
		hot.Shard: load{from: t0, rate: 500, keys: keys(int(hot.Span.Start), "tenant-hot", 10)}.stats()}}
	d := Decide(in, testThresholds())
	if len(d.Unsplittable) != 1 {
		t.Fatalf("Decide = %+v, want the hot leaf %d reported", d, hot.Shard)
	}
	if r := d.Unsplittable[0].Remedy; r == RemedyPartitionSize || !strings.Contains(r, "above 2") {
		t.Fatalf("routing_partition_size is 2, the remedy says: %q", r)
	}
	// With routing_partition_size 1 the remedy is still the setting itself.
	tab1 := table(t, routing.ModePartition, split(1, 0, 9))
	in = Input{Now: now, Table: tab1, Shards: map[routing.ShardID]ShardStats{2: load{from: t0, rate: 500, keys: keys(8, "tenant-hot", 10)}.stats()}}
	if d := Decide(in, testThresholds()); len(d.Unsplittable) != 1 || d.Unsplittable[0].Remedy != RemedyPartitionSize {
		t.Fatalf("routing_partition_size 1: %+v, want remedy %q", d.Unsplittable, RemedyPartitionSize)
	}
}

// A second reading at the same instant carries no time: it adds no
// interval, and its writes count in the next one. Wiping the shard's
// history instead would leave a hot shard sustained for 20 s unsplit (and
// any merge waiting a whole MergeWindow more).
func TestRecorderRepeatedInstantKeepsTheHistory(t *testing.T) {
	th := testThresholds()
	r := NewRecorder(th)
	tab := table(t, routing.ModePartition)
	var w uint64
	at := t0
	for s := 0; s <= 20; s++ {
		at = t0.Add(time.Duration(s) * time.Second)
		w += 200
		r.Observe(at, map[routing.ShardID]Reading{1: {Writes: w, Keys: keys(9, "a", 5, 14, "b", 5)}})
	}
	before := Decide(Input{Now: at, Table: tab, Shards: r.Stats()}, th)
	if before.Action.Kind != Split {
		t.Fatalf("before the repeated reading: %v, want a split", before.Action)
	}
	w += 7
	r.Observe(at, map[routing.ShardID]Reading{1: {Writes: w, Size: 42}}) // the same instant again
	st := r.Stats()[1]
	if got := Decide(Input{Now: at, Table: tab, Shards: r.Stats()}, th); got.Action.Kind != Split {
		t.Fatalf("after a second reading at %v: %v (%d intervals left), want the split still", at, got.Action, len(st.Intervals))
	}
	if st.Size != 42 {
		t.Errorf("size %d, want the latest reading's 42", st.Size)
	}
	// The next reading's interval starts at the last instant and counts the
	// writes of the repeated reading too.
	w += 200
	r.Observe(at.Add(time.Second), map[routing.ShardID]Reading{1: {Writes: w}})
	ivs := r.Stats()[1].Intervals
	if last := ivs[len(ivs)-1]; !last.From.Equal(at) || last.Writes != 207 {
		t.Fatalf("next interval %v–%v with %d writes, want from %v with 207", last.From, last.To, last.Writes, at)
	}
}

// A merge's window must be covered up to now, as a split's is. Two leaves
// whose statistics stopped 40 s ago (60 s merge window: the window's start
// is covered, its last 40 s are not) are not merged on their old, cool
// load: nothing says what they took since; the same history is refused for
// a split (its last interval must end within half the sustain window of
// now).
func TestNoMergeOnStaleStatistics(t *testing.T) {
	th := testThresholds()
	stale := func(rate float64) ShardStats {
		st := load{from: t0, rate: rate}.stats()
		var keep []Interval
		for _, iv := range st.Intervals {
			if !iv.To.After(now.Add(-40 * time.Second)) {
				keep = append(keep, iv)
			}
		}
		st.Intervals = keep
		return st
	}
	tab := table(t, routing.ModePartition, split(0, 2))
	if d := Decide(Input{Now: now, Table: tab, Shards: map[routing.ShardID]ShardStats{2: stale(10), 3: stale(10)}}, th); d.Action.Kind != None {
		t.Fatalf("statistics ending 40 s before now: %v, want nothing", d.Action)
	}
	if d := Decide(Input{Now: now, Table: tab, Shards: map[routing.ShardID]ShardStats{2: stale(500)}}, th); d.Action.Kind != None {
		t.Fatalf("the split rule on the same stale history: %v, want nothing", d.Action)
	}
	// Fresh statistics of the same load merge.
	fresh := map[routing.ShardID]ShardStats{2: load{from: t0, rate: 10}.stats(), 3: load{from: t0, rate: 10}.stats()}
	if d := Decide(Input{Now: now, Table: tab, Shards: fresh}, th); d.Action.Kind != Merge {
		t.Fatalf("fresh statistics: %v, want a merge", d.Action)
	}
}

// idleMergeAction feeds a Recorder readings of two idle leaves of root 0 at
// the given instants (seconds after t0) and returns Decide's action at the
// last one.
func idleMergeAction(t *testing.T, th Thresholds, at []float64) Action {
	t.Helper()
	r := NewRecorder(th)
	tab := table(t, routing.ModePartition, split(0, 2))
	var last time.Time
	for i, s := range at {
		last = t0.Add(time.Duration(s * float64(time.Second)))
		w := uint64(i) // one write per reading: far under the merge limit
		r.Observe(last, map[routing.ShardID]Reading{2: {Writes: w}, 3: {Writes: w}})
	}
	return Decide(Input{Now: last, Table: tab, Shards: r.Stats()}, th).Action
}

// A stalled reading's long interval does not cover a merge window, and a
// stall is an interval long against the shard's usual one, not merely
// longer than SplitSustain: a caller reading every 15 s with the default
// 10 s sustain window still merges (taking each of its intervals for a
// stall, it never would), and a stall of 38 s without a reading in a run
// read every 500 ms, longer than the whole merge window, leaves the window
// uncovered.
func TestAStallIsAnIntervalLongerThanTheCadence(t *testing.T) {
	th := DefaultThresholds() // 10 s sustain, 5 min merge window
	var slow []float64
	for s := 0.0; s <= 600; s += 15 {
		slow = append(slow, s)
	}
	if a := idleMergeAction(t, th, slow); a.Kind != Merge {
		t.Errorf("idle leaves read every 15 s for 10 min (sustain %v, merge window %v): %v, want a merge", th.SplitSustain, th.MergeWindow, a)
	}

	demo := th
	demo.SplitSustain, demo.MergeWindow, demo.SplitWritesPerSec = 3*time.Second, 6*time.Second, 420
	var stalled []float64
	for s := 0.0; s <= 10; s += 0.5 {
		stalled = append(stalled, s)
	}
	stalled = append(stalled, 48) // 38 s without a reading
	if a := idleMergeAction(t, demo, stalled); a.Kind != None {
		t.Errorf("a 38 s stall after readings every 500 ms (merge window %v): %v, want nothing", demo.MergeWindow, a)
	}
	// Once ordinary readings cover a window again, the leaves merge.
	for s := 48.5; s <= 56; s += 0.5 {
		stalled = append(stalled, s)
	}
	if a := idleMergeAction(t, demo, stalled); a.Kind != Merge {
		t.Errorf("8 s of readings every 500 ms after the stall: %v, want a merge", a)
	}
}
