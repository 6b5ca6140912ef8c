package policy

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

// TestReviewPolicyValidateRejectsInfiniteSplitRate: an infinite split
// threshold is not a threshold. Validate let +Inf through, and with it no
// leaf is ever split by load while the merge limit (a fraction of +Inf) is
// +Inf too, so every covered pair of adjacent leaves merges, however hot.
func TestReviewPolicyValidateRejectsInfiniteSplitRate(t *testing.T) {
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

// TestReviewPolicyRemedyWhenPartitionSizeIsAlreadySet: in partition mode
// with routing_partition_size 2, a hot leaf of one partition was told to
// "set index.routing_partition_size > 1" — the setting it already has. The
// remedy must name the value in force and ask for more.
func TestReviewPolicyRemedyWhenPartitionSizeIsAlreadySet(t *testing.T) {
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

// TestReviewPolicyRecorderRepeatedInstant: a second reading at the same
// instant carries no time. It used to wipe the shard's history, so a hot
// shard sustained for 20 s was no longer split (and any merge waited a
// whole MergeWindow more). Now it adds no interval: its writes count in
// the next one.
func TestReviewPolicyRecorderRepeatedInstant(t *testing.T) {
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

// TestReviewPolicyNoMergeOnStaleStatistics: a merge's window must be
// covered up to now, as a split's is. Two leaves whose statistics stopped
// 40 s ago (60 s merge window: the window's start is covered, its last 40 s
// are not) were merged on their old, cool load, although nothing says what
// they took since; the same history is refused for a split (its last
// interval must end within half the sustain window of now).
func TestReviewPolicyNoMergeOnStaleStatistics(t *testing.T) {
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
