package loadgen

import (
	"slices"
	"time"
)

// MaxStall is the longest interval in which writes aimed at the moved
// documents were outstanding and none of them was acknowledged, over
// records that start or end in [from, to).
func MaxStall(recs []Record, from, to time.Duration) time.Duration {
	stall, _ := LongestStall(recs, from, to)
	return stall
}

// LongestStall is MaxStall with the moment the stall began (since the
// run started): where to look for its cause.
func LongestStall(recs []Record, from, to time.Duration) (stall, at time.Duration) {
	sweepQuiet(recs, from, to, func(since, d time.Duration) {
		if d > stall {
			stall, at = d, since
		}
	})
	return stall, at
}

// Quiet is an interval in which moving writes were outstanding and none
// was acknowledged (a write that failed was outstanding until it ended).
type Quiet struct {
	At, Len time.Duration // since the run started
}

// QuietIntervals lists, in order, every quiet interval of at least min
// over records that start or end in [from, to): the stalls LongestStall
// picks the longest of, for a probe looking at what else was going on.
func QuietIntervals(recs []Record, from, to, min time.Duration) []Quiet {
	var out []Quiet
	sweepQuiet(recs, from, to, func(since, d time.Duration) {
		if d >= min {
			out = append(out, Quiet{since, d})
		}
	})
	return out
}

// sweepQuiet calls fn with the start and length of every quiet interval
// of the moving writes that start or end in [from, to), in order. A quiet
// interval begins when a write starts with none outstanding, or at an
// acknowledgement with writes still outstanding, and ends at the next
// acknowledgement, or when the last write outstanding fails. A failed write
// is outstanding until it ends and acknowledges nothing: counting
// acknowledged writes only, a writer blocked 500 ms that then got an error
// would be no stall at all.
func sweepQuiet(recs []Record, from, to time.Duration, fn func(since, d time.Duration)) {
	type event struct {
		at    time.Duration
		start bool
		ok    bool // an end: acknowledged, or failed
	}
	rank := func(e event) int {
		switch {
		case e.start:
			return 1
		case e.ok:
			return 0
		}
		return 2
	}
	var evs []event
	for _, r := range recs {
		if !r.Moving || r.End < from || r.Start >= to {
			continue
		}
		evs = append(evs, event{at: r.Start, start: true}, event{at: r.End, ok: r.OK})
	}
	slices.SortFunc(evs, func(a, b event) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		// At the same instant: acknowledgements, then starts, then
		// failures (a write started as another fails keeps the stall going).
		return rank(a) - rank(b)
	})
	var since time.Duration
	outstanding := 0
	for _, e := range evs {
		if e.start {
			if outstanding == 0 {
				since = e.at
			}
			outstanding++
			continue
		}
		outstanding--
		switch {
		case e.ok:
			fn(since, e.at-since)
			since = e.at // a new quiet interval starts at this ack
		case outstanding == 0:
			fn(since, e.at-since) // the last write outstanding failed
		}
	}
}

// Window summarises the records that end in [from, to).
type Window struct {
	Acked   int
	Errors  int
	Retries int
	P50     time.Duration
	P99     time.Duration
	Max     time.Duration
	OpsPerS float64
}

// Summarize measures the writes acknowledged in [from, to).
func Summarize(recs []Record, from, to time.Duration) Window {
	var w Window
	var lat []time.Duration
	for _, r := range recs {
		if r.End < from || r.End >= to {
			continue
		}
		w.Retries += r.Retries
		if !r.OK {
			w.Errors++
			continue
		}
		w.Acked++
		lat = append(lat, r.End-r.Start)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		w.P50 = lat[len(lat)/2]
		w.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
		w.Max = lat[len(lat)-1]
	}
	if to > from {
		w.OpsPerS = float64(w.Acked) / (to - from).Seconds()
	}
	return w
}

// Buckets slices [0, end) into fixed buckets.
func Buckets(recs []Record, bucket, end time.Duration) []Window {
	var out []Window
	for from := time.Duration(0); from < end; from += bucket {
		out = append(out, Summarize(recs, from, from+bucket))
	}
	return out
}

// SummarizeOverlap measures the writes whose lifetime overlaps [from, to):
// the writes that were in flight during a window, however long they took.
func SummarizeOverlap(recs []Record, from, to time.Duration) Window {
	var in []Record
	for _, r := range recs {
		if r.Start < to && r.End >= from {
			in = append(in, r)
		}
	}
	w := Summarize(in, 0, 1<<62)
	w.OpsPerS = 0
	if to > from {
		acked := 0
		for _, r := range recs {
			if r.OK && r.End >= from && r.End < to {
				acked++
			}
		}
		w.OpsPerS = float64(acked) / (to - from).Seconds()
	}
	return w
}

// BucketsByStart slices [0, end) into fixed buckets by when writes started:
// a bucket's latency percentiles describe the writes issued in it, however
// long they took (a write blocked for seconds shows in the bucket it was
// issued in, not as a gap).
func BucketsByStart(recs []Record, bucket, end time.Duration) []Window {
	var out []Window
	for from := time.Duration(0); from < end; from += bucket {
		var in []Record
		for _, r := range recs {
			if r.Start >= from && r.Start < from+bucket {
				in = append(in, r)
			}
		}
		out = append(out, Summarize(in, 0, 1<<62))
	}
	return out
}
