package clusterbench

import (
	"testing"
	"time"
)

const ms = time.Millisecond

// steady writes one write every millisecond in [from, to), each
// acknowledged lat after it began.
func steady(from, to, lat time.Duration) []WriteResult {
	var ws []WriteResult
	for t := from; t < to; t += ms {
		ws = append(ws, WriteResult{Start: t, End: t + lat, OK: true})
	}
	return ws
}

// TestUnavailableWindowIsFromTheFirstBlockedWriteToTheFirstAcknowledgementAfterIt:
// writes begun while the parent is blocked are all answered after the
// hand-off; the window runs from the first of them to the first
// acknowledgement of a write begun since.
func TestUnavailableWindowIsFromTheFirstBlockedWriteToTheFirstAcknowledgementAfterIt(t *testing.T) {
	ws := steady(0, 100*ms, 2*ms)
	for s := 100 * ms; s < 300*ms; s += ms {
		ws = append(ws, WriteResult{Start: s, End: 305*ms + s/100, OK: true}) // held, then retried on a child
	}
	ws = append(ws, steady(300*ms, 400*ms, 2*ms)...)
	w, ok := UnavailableWindow(ws, 0, 5*ms)
	if !ok || w.Start != 100*ms || w.End != 302*ms || w.Open {
		t.Fatalf("window %+v %v, want [100ms, 302ms) (the write begun at 300ms is acknowledged at 302ms)", w, ok)
	}
}

// TestUnavailableWindowOfASteadyTimelineIsNone: writes all acknowledged
// within the threshold leave no window.
func TestUnavailableWindowOfASteadyTimelineIsNone(t *testing.T) {
	if w, ok := UnavailableWindow(steady(0, time.Second, 2*ms), 0, 5*ms); ok {
		t.Fatalf("a steady timeline has window %+v", w)
	}
}

// TestUnavailableWindowIsTheLongest: a single slow write while others are
// acknowledged opens a window only until the next acknowledgement; the
// hand-off's longer window is the one reported.
func TestUnavailableWindowIsTheLongest(t *testing.T) {
	ws := steady(0, 200*ms, 2*ms)
	ws = append(ws, WriteResult{Start: 50*ms + ms/2, End: 80 * ms, OK: true}) // slow, but the range takes writes
	ws = append(ws, WriteResult{Start: 150*ms + ms/2, End: 150*ms + ms, OK: false})
	for s := 200 * ms; s < 260*ms; s += ms {
		ws = append(ws, WriteResult{Start: s, End: 270 * ms, OK: true})
	}
	ws = append(ws, steady(260*ms, 300*ms, 2*ms)...)
	w, ok := UnavailableWindow(ws, 0, 5*ms)
	if !ok || w.Start != 200*ms || w.End != 262*ms {
		t.Fatalf("window %+v, want [200ms, 262ms)", w)
	}
	// Alone, the refused write's window lasts until the next write begun
	// after it is acknowledged.
	w, ok = UnavailableWindow(ws, 100*ms, 5*ms)
	if !ok || w.Start != 200*ms {
		t.Fatalf("from 100ms: %+v", w)
	}
	w, ok = UnavailableWindow(ws[:len(steady(0, 200*ms, 2*ms))+2], 100*ms, 5*ms)
	if !ok || w.Start != 150*ms+ms/2 || w.End != 153*ms {
		t.Fatalf("the refused write's window %+v %v, want [150.5ms, 153ms)", w, ok)
	}
}

// TestUnavailableWindowIgnoresWritesBeforeTheRequest: a stall before the
// split request is not the split's.
func TestUnavailableWindowIgnoresWritesBeforeTheRequest(t *testing.T) {
	ws := steady(0, 100*ms, 2*ms)
	ws = append(ws, WriteResult{Start: 10 * ms, End: 90 * ms, OK: true})
	if w, ok := UnavailableWindow(ws, 20*ms, 5*ms); ok {
		t.Fatalf("a stall before the request counted: %+v", w)
	}
	if w, ok := UnavailableWindow(ws, 0, 5*ms); !ok || w.Start != 10*ms || w.End != 13*ms {
		t.Fatalf("from 0: %+v %v, want [10ms, 13ms)", w, ok)
	}
}

// TestUnavailableWindowOverlappingBlocksAreOne: a blocked write begun inside
// another's window extends it.
func TestUnavailableWindowOverlappingBlocksAreOne(t *testing.T) {
	ws := []WriteResult{
		{Start: 0, End: 1 * ms, OK: true},
		{Start: 10 * ms, End: 50 * ms, OK: true},
		{Start: 20 * ms, End: 60 * ms, OK: false},
		{Start: 40 * ms, End: 90 * ms, OK: true},
		{Start: 95 * ms, End: 96 * ms, OK: true},
	}
	w, ok := UnavailableWindow(ws, 0, 5*ms)
	if !ok || w.Start != 10*ms || w.End != 90*ms || w.Open {
		t.Fatalf("window %+v %v, want [10ms, 90ms) (the write begun at 40ms is acknowledged at 90ms)", w, ok)
	}
}

// TestUnavailableWindowWithNoAcknowledgementAfterItIsOpen: a range that
// never took a write again ends the timeline unavailable.
func TestUnavailableWindowWithNoAcknowledgementAfterItIsOpen(t *testing.T) {
	ws := append(steady(0, 10*ms, 2*ms), WriteResult{Start: 20 * ms, End: 50 * ms, OK: false}, WriteResult{Start: 30 * ms, End: 70 * ms, OK: false})
	w, ok := UnavailableWindow(ws, 0, 5*ms)
	if !ok || !w.Open || w.Start != 20*ms || w.End != 70*ms {
		t.Fatalf("window %+v %v, want open from 20ms", w, ok)
	}
}

// TestThroughputCountsAcknowledgementsInTheSpan: refused writes and those
// answered outside the span do not count.
func TestThroughputCountsAcknowledgementsInTheSpan(t *testing.T) {
	ws := steady(0, time.Second, 2*ms)
	ws = append(ws, WriteResult{Start: 0, End: 500 * ms, OK: false})
	if got := Throughput(ws, 100*ms, 600*ms); got != 1000 {
		t.Fatalf("throughput %v, want 1000/s", got)
	}
}

// TestLongestGapIsTheLongestSpanWithoutAnAcknowledgement: the span
// before the first acknowledgement and after the last count; refused
// writes do not end a gap.
func TestLongestGapIsTheLongestSpanWithoutAnAcknowledgement(t *testing.T) {
	ws := []WriteResult{{Start: 0, End: 10 * ms, OK: true}, {Start: 5 * ms, End: 40 * ms, OK: false},
		{Start: 10 * ms, End: 70 * ms, OK: true}, {Start: 70 * ms, End: 75 * ms, OK: true}}
	if got := LongestGap(ws, 0, 100*ms); got != 60*ms {
		t.Fatalf("gap %v, want 60ms (10ms to 70ms)", got)
	}
	if got := LongestGap(ws, 72*ms, 200*ms); got != 125*ms {
		t.Fatalf("gap %v, want 125ms (75ms to the end)", got)
	}
}
