package loadgen

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// afterReporter is a Manual clock whose After tells the test, once its
// waiter is registered, how long the caller waits for.
type afterReporter struct {
	*clock.Manual
	waits chan time.Duration
}

func (c afterReporter) After(d time.Duration) <-chan time.Time {
	ch := c.Manual.After(d)
	c.waits <- d
	return ch
}

// pacerRun drives a pacer on a Manual clock: stalls[i], if any, is how far
// the clock jumps before the i-th wait (the loop was held up), and each wait
// that must sleep is woken by advancing the clock by just what it asked.
// It returns the clock time, since the pacer was made, at which each wait
// returned.
func pacerRun(t *testing.T, interval time.Duration, slot, of, waits int, stalls map[int]time.Duration) []time.Duration {
	t.Helper()
	clk := afterReporter{clock.NewManual(time.Unix(0, 0)), make(chan time.Duration)}
	start := clk.Now()
	p := newPacer(clk, interval, slot, of)
	var woke []time.Duration
	for i := range waits {
		clk.Advance(stalls[i])
		done := make(chan bool, 1)
		go func() { done <- p.wait(context.Background()) }()
		select {
		case ok := <-done: // due already: no sleep
			if !ok {
				t.Fatalf("wait %d: false on a live context", i)
			}
		case d := <-clk.waits:
			if d <= 0 {
				t.Fatalf("wait %d slept %s", i, d)
			}
			clk.Advance(d)
			if !<-done {
				t.Fatalf("wait %d: false on a live context", i)
			}
		}
		woke = append(woke, clk.Since(start))
	}
	return woke
}

func msf(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// A pacer keeps a fixed grid: its slot's share of an interval, then one
// interval apart. Loops made together with different slots are staggered
// for good.
func TestPacerKeepsItsSlotOnTheGrid(t *testing.T) {
	got := pacerRun(t, 10*time.Millisecond, 1, 4, 4, nil)
	want := []time.Duration{msf(12.5), msf(22.5), msf(32.5), msf(42.5)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("woke at (-want +got):\n%s", diff)
	}
	if got := pacerRun(t, 10*time.Millisecond, 3, 4, 1, nil); got[0] != msf(17.5) {
		t.Errorf("slot 3 of 4 first woke at %s, want 17.5ms", got[0])
	}
}

// A loop held up catches up: the iterations it owes start at once, then
// the grid resumes where it was.
func TestPacerCatchesUpAfterAStall(t *testing.T) {
	got := pacerRun(t, 10*time.Millisecond, 0, 1, 5, map[int]time.Duration{1: msf(35)})
	// Woke at 10; held up until 45: the iterations due at 20, 30 and 40
	// start at once, the next at 50.
	want := []time.Duration{msf(10), msf(45), msf(45), msf(45), msf(50)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("woke at (-want +got):\n%s", diff)
	}
}

// A loop held up for more than a second does not burst through its
// backlog: the schedule starts again from when it resumed.
func TestPacerDropsABacklogOverASecond(t *testing.T) {
	got := pacerRun(t, 10*time.Millisecond, 0, 1, 3, map[int]time.Duration{1: 2 * time.Second})
	want := []time.Duration{msf(10), msf(2010), msf(2020)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("woke at (-want +got):\n%s", diff)
	}
}

// A wait ends, false, when its context does.
func TestPacerWaitEndsWithItsContext(t *testing.T) {
	clk := afterReporter{clock.NewManual(time.Unix(0, 0)), make(chan time.Duration)}
	p := newPacer(clk, time.Second, 0, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool, 1)
	go func() { done <- p.wait(ctx) }()
	<-clk.waits
	cancel()
	if <-done {
		t.Error("wait returned true after its context ended")
	}
}

// The backlog's bound is a second, exactly: a loop a second late still
// catches up; a nanosecond more and the schedule starts again from now.
func TestPacerBacklogBoundIsASecond(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stall time.Duration
		want  []time.Duration
	}{
		// Woke at 500, held up until 2000: the iteration due at 1000 is
		// a second late, so it and those due at 1500 and 2000 start at
		// once, the next at 2500.
		{"a second late", 1500 * time.Millisecond, []time.Duration{msf(500), msf(2000), msf(2000), msf(2000), msf(2500)}},
		{"over a second late", 1500*time.Millisecond + 1, []time.Duration{msf(500), msf(2000) + 1, msf(2500) + 1, msf(3000) + 1, msf(3500) + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pacerRun(t, 500*time.Millisecond, 0, 1, 5, map[int]time.Duration{1: tc.stall})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("woke at (-want +got):\n%s", diff)
			}
		})
	}
}

// A late wait also ends, false, with its context: the readers' loop
// (paced) stops on wait's answer alone, so a wait that owed iterations
// and said true would read past the end of the run.
func TestPacerLateWaitEndsWithItsContext(t *testing.T) {
	for _, late := range []time.Duration{0, 5 * time.Millisecond, 2 * time.Second} {
		clk := clock.NewManual(time.Unix(0, 0))
		p := newPacer(clk, 10*time.Millisecond, 0, 1)
		clk.Advance(10*time.Millisecond + late)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if p.wait(ctx) {
			t.Errorf("wait %s late returned true on an ended context", late)
		}
	}
}
