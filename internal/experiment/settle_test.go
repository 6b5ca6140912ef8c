package experiment

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/storage"
)

// scriptedBacklog answers Backlog from a script, one entry per call,
// repeating the last.
type scriptedBacklog struct {
	script []storage.Backlog
	calls  int
}

func (s *scriptedBacklog) Backlog() (storage.Backlog, error) {
	b := s.script[min(s.calls, len(s.script)-1)]
	s.calls++
	return b, nil
}

// settleOnManual runs settle on a Manual clock that moves only while settle
// sleeps, so the polls it makes depend on its logic and not on how late a
// loaded machine wakes it (CI once saw 6 polls where 7 are due). It returns
// settle's results and the clock time the wait took.
func settleOnManual(t *testing.T, shards []backlogger, idle, limit time.Duration) (storage.Backlog, time.Duration, error) {
	t.Helper()
	clk := clock.NewManual(time.Unix(0, 0))
	start := clk.Now()
	type result struct {
		owed storage.Backlog
		err  error
	}
	done := make(chan result, 1)
	go func() {
		owed, err := settle(clk, shards, idle, limit)
		done <- result{owed, err}
	}()
	for spins := 0; ; spins++ {
		select {
		case r := <-done:
			return r.owed, clk.Since(start), r.err
		default:
		}
		if clk.Waiters() > 0 {
			clk.Advance(min(idle/4, 250*time.Millisecond)) // settle's poll interval
			continue
		}
		if spins > 10_000_000 {
			t.Fatal("settle neither slept nor returned")
		}
		runtime.Gosched()
	}
}

// settle waits while any store compacts, until all have been idle for the
// idle time, and reports what the first poll found owing: the deepest L0,
// the largest debt, every running compaction.
func TestSettleWaitsUntilEveryStoreIsIdle(t *testing.T) {
	busy := storage.Backlog{L0Sublevels: 9, Debt: 300 << 20, Running: 1}
	a := &scriptedBacklog{script: []storage.Backlog{busy, busy, busy, {L0Sublevels: 2, Debt: 40 << 20}}}
	b := &scriptedBacklog{script: []storage.Backlog{{L0Sublevels: 12, Debt: 100 << 20, Running: 1}, {L0Sublevels: 1}}}
	idle := 40 * time.Millisecond
	owed, took, err := settleOnManual(t, []backlogger{a, b}, idle, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(storage.Backlog{L0Sublevels: 12, Debt: 300 << 20, Running: 2}, owed); diff != "" {
		t.Errorf("owed (-want +got):\n%s", diff)
	}
	// Store a compacts for its first three polls; then both must stay idle
	// for idle, polled every idle/4.
	if a.calls != 3+4 {
		t.Errorf("settled after %d polls, want 7: three while a compacts, then idle/4 apart for idle", a.calls)
	}
	if took < idle {
		t.Errorf("settled in %s, want at least the idle time %s", took, idle)
	}
}

// A store that never stops compacting fails the wait at its limit, and the
// error says what is still owed.
func TestSettleGivesUpAtItsLimit(t *testing.T) {
	s := &scriptedBacklog{script: []storage.Backlog{{L0Sublevels: 14, Debt: 7, Running: 1}}}
	_, _, err := settleOnManual(t, []backlogger{s}, 20*time.Millisecond, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "L0 14 sublevels, debt 7 bytes, 1 running") {
		t.Fatalf("err %v, want one naming what is still owed", err)
	}
}

// A compaction or flush that begins and ends between two polls is work
// too: the idle time restarts when a poll finds more of them ended than
// the last one did.
func TestSettleSeesWorkThatEndedBetweenPolls(t *testing.T) {
	s := &scriptedBacklog{script: []storage.Backlog{{Ended: 4}, {Ended: 5}, {Ended: 6}, {Ended: 6}}}
	if _, _, err := settleOnManual(t, []backlogger{s}, 40*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Polls 2 and 3 each find one more ended; then idle/4 apart for idle.
	if s.calls != 3+4 {
		t.Errorf("settled after %d polls, want 7: the idle time restarts at polls 2 and 3", s.calls)
	}
}
