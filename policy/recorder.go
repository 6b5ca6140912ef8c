package policy

import (
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

// recorderMinIntervals is how many of a shard's latest intervals the
// Recorder keeps even when they are older than the merge window (see
// usualLength).
const recorderMinIntervals = 8

// Reading is one shard's statistics at an instant, as storage keeps them:
// cumulative counters since the shard was opened, its size, and the key
// sample of the writes since the previous reading.
type Reading struct {
	Writes, Reads uint64
	Size          uint64
	Keys          []KeySample
}

// Recorder turns periodic Readings into the per-interval history Decide
// reads, keeping MergeWindow of intervals, and at least the last
// recorderMinIntervals (SplitSustain of key samples).
// It is a plain value driven by the caller's clock: not safe for
// concurrent use.
type Recorder struct {
	th   Thresholds
	last map[routing.ShardID]reading
	hist map[routing.ShardID]*ShardStats
}

type reading struct {
	at            time.Time
	writes, reads uint64
}

// NewRecorder returns an empty recorder.
func NewRecorder(th Thresholds) *Recorder {
	return &Recorder{th: th, last: map[routing.ShardID]reading{}, hist: map[routing.ShardID]*ShardStats{}}
}

// Observe records the readings taken at now. A shard's first reading (or
// one whose counters went backwards: the shard was reopened, or taken
// before the previous one: the clock went back) starts its history; a
// second reading at the same instant adds no interval (its size is kept,
// its writes count in the next interval, its key sample is dropped);
// shards absent from readings are forgotten.
func (r *Recorder) Observe(now time.Time, readings map[routing.ShardID]Reading) {
	for id := range r.last {
		if _, ok := readings[id]; !ok {
			delete(r.last, id)
			delete(r.hist, id)
		}
	}
	for id, rd := range readings {
		prev, ok := r.last[id]
		h := r.hist[id]
		if h == nil {
			h = &ShardStats{}
			r.hist[id] = h
		}
		h.Size = rd.Size
		restarted := !ok || rd.Writes < prev.writes || rd.Reads < prev.reads
		if !restarted && now.Equal(prev.at) {
			// No time passed: nothing to rate. Wiping the history here
			// would cost a hot shard its sustain window and every merge
			// its merge window.
			continue
		}
		r.last[id] = reading{at: now, writes: rd.Writes, reads: rd.Reads}
		if restarted || !now.After(prev.at) {
			h.Intervals = nil
			continue
		}
		h.Intervals = append(h.Intervals, Interval{From: prev.at, To: now, Writes: rd.Writes - prev.writes,
			Reads: rd.Reads - prev.reads, Keys: rd.Keys})
		keep, keys := now.Add(-max(r.th.MergeWindow, r.th.SplitSustain)), now.Add(-r.th.SplitSustain)
		drop := 0
		for i, iv := range h.Intervals {
			if !iv.To.After(keep) {
				drop = i + 1
			}
			if !iv.To.After(keys) {
				h.Intervals[i].Keys = nil // only the sustain window's samples place a split
			}
		}
		// The last few intervals stay whatever their age: they are the
		// readings' cadence, against which Decide tells a stall (an
		// interval longer than the whole window, say) from a slow caller.
		drop = min(drop, max(len(h.Intervals)-recorderMinIntervals, 0))
		h.Intervals = h.Intervals[drop:]
	}
}

// Stats returns the history for Decide. It shares memory with the
// recorder: use it before the next Observe.
func (r *Recorder) Stats() map[routing.ShardID]ShardStats {
	out := make(map[routing.ShardID]ShardStats, len(r.hist))
	for id, h := range r.hist {
		out[id] = *h
	}
	return out
}
