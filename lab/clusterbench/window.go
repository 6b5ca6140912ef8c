package clusterbench

import (
	"math"
	"slices"
	"time"
)

// WriteResult is one write to a key range as its client saw it: when it
// began, when its answer came (retries included), and whether it was
// acknowledged.
type WriteResult struct {
	Start, End time.Duration
	OK         bool
}

// Window is a span in which a key range took no write.
type Window struct {
	Start, End time.Duration
	// Open: no write begun in it was acknowledged before the timeline
	// ended; End is then the last answer the timeline has.
	Open bool
}

// Len is the window's length.
func (w Window) Len() time.Duration { return w.End - w.Start }

// UnavailableWindow is the write-unavailability window of a key range in a
// timeline of its writes, counting those begun at or after from (the split
// request): a write is refused if it was not acknowledged, blocked if it
// was acknowledged later than threshold after it began (the steady p99:
// slower than 99 % of the writes before the split). A refused or blocked
// write opens a window at its start, which lasts until the first
// acknowledgement of a write begun at or after that start (the range takes
// writes again); windows that overlap are one. The result is the longest
// (the hand-off's: a write slower than the steady p99 outside it opens a
// window only until the next acknowledgement, a few milliseconds at a
// steady rate), and false when no write was refused or blocked.
func UnavailableWindow(writes []WriteResult, from, threshold time.Duration) (Window, bool) {
	ws := slices.Clone(writes)
	slices.SortStableFunc(ws, func(a, b WriteResult) int { return cmpDuration(a.Start, b.Start) })
	// firstAck[i] is the earliest acknowledgement of the writes ws[i:].
	firstAck := make([]time.Duration, len(ws)+1)
	firstAck[len(ws)] = math.MaxInt64
	var last time.Duration
	for i := len(ws) - 1; i >= 0; i-- {
		firstAck[i] = firstAck[i+1]
		if ws[i].OK {
			firstAck[i] = min(firstAck[i], ws[i].End)
		}
		last = max(last, ws[i].End)
	}
	var best, cur Window
	found, open := false, false
	for i, w := range ws {
		if w.Start < from || (w.OK && w.End-w.Start <= threshold) {
			continue
		}
		end, unacked := firstAck[i], firstAck[i] == math.MaxInt64
		if unacked {
			end = last
		}
		switch {
		case open && w.Start <= cur.End:
			cur.End, cur.Open = max(cur.End, end), cur.Open || unacked
		default:
			if open && (!found || cur.Len() > best.Len()) {
				best, found = cur, true
			}
			cur, open = Window{Start: w.Start, End: end, Open: unacked}, true
		}
	}
	if open && (!found || cur.Len() > best.Len()) {
		best, found = cur, true
	}
	return best, found
}

func cmpDuration(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// LongestGap is the longest span in [from, to) in which no write to the
// range was acknowledged: between from, the acknowledgements in it, and
// to. Unlike the window, it does not count a write slow but answered.
func LongestGap(writes []WriteResult, from, to time.Duration) time.Duration {
	var acks []time.Duration
	for _, w := range writes {
		if w.OK && w.End >= from && w.End < to {
			acks = append(acks, w.End)
		}
	}
	slices.Sort(acks)
	gap, prev := time.Duration(0), from
	for _, a := range append(acks, to) {
		gap, prev = max(gap, a-prev), a
	}
	return gap
}

// Throughput is the acknowledgements per second of writes answered in
// [from, to).
func Throughput(writes []WriteResult, from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	n := 0
	for _, w := range writes {
		if w.OK && w.End >= from && w.End < to {
			n++
		}
	}
	return float64(n) / (to - from).Seconds()
}

// LatencyPercentile is the p-th percentile (nearest rank) of the latencies
// of the writes acknowledged that began in [from, to).
func LatencyPercentile(writes []WriteResult, from, to time.Duration, p float64) time.Duration {
	var lat []float64
	for _, w := range writes {
		if w.OK && w.Start >= from && w.Start < to {
			lat = append(lat, float64(w.End-w.Start))
		}
	}
	return time.Duration(Percentile(lat, p))
}
