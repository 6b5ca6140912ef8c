package experiment

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// scriptedBacklog answers Backlog from a script, one entry per call,
// repeating the last. It fails past a million calls, so a settle that polls
// without sleeping ends instead of hanging the test.
type scriptedBacklog struct {
	script []storage.Backlog
	calls  int
}

func (s *scriptedBacklog) Backlog() (storage.Backlog, error) {
	if s.calls >= 1_000_000 {
		return storage.Backlog{}, errors.New("polled a million times")
	}
	b := s.script[min(s.calls, len(s.script)-1)]
	s.calls++
	return b, nil
}

// sleepReporter is a Manual clock whose Sleep tells the test, once its
// waiter is registered, how long it sleeps for.
type sleepReporter struct {
	*clock.Manual
	slept chan time.Duration
}

func (c sleepReporter) Sleep(d time.Duration) {
	ch := c.After(d)
	c.slept <- d
	<-ch
}

// settleOnManual runs settle on a Manual clock that moves only while settle
// sleeps, and by just what it asked to sleep, so the polls it makes depend
// on its logic and not on how late a loaded machine wakes it (CI once saw
// 6 polls where 7 are due). It returns settle's results, the clock time the
// wait took and every sleep it asked for.
//
// It waits on settle without spinning and without a budget: a spin bounded
// by a count is a wall-clock timeout in disguise (10M spins were about 2 s),
// which a poll held up on a loaded machine would trip though settle is right.
func settleOnManual(t *testing.T, shards []backlogger, idle, limit time.Duration) (storage.Backlog, time.Duration, []time.Duration, error) {
	t.Helper()
	clk := sleepReporter{clock.NewManual(time.Unix(0, 0)), make(chan time.Duration)}
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
	var sleeps []time.Duration
	for {
		select {
		case r := <-done:
			return r.owed, clk.Since(start), sleeps, r.err
		case d := <-clk.slept:
			if d <= 0 {
				t.Fatalf("settle slept %s: it would poll without time passing", d)
			}
			if clk.Since(start) > limit+time.Minute {
				t.Fatalf("settle still polls %s after its limit %s", clk.Since(start)-limit, limit)
			}
			sleeps = append(sleeps, d)
			clk.Advance(d)
		}
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
	owed, took, sleeps, err := settleOnManual(t, []backlogger{a, b}, idle, time.Minute)
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
	if want := slices.Repeat([]time.Duration{idle / 4}, 6); !slices.Equal(sleeps, want) {
		t.Errorf("slept %v between polls, want %v", sleeps, want)
	}
}

// Past a second of idle time settle polls every 250 ms, not every idle/4:
// the dataset's settleIdle is a second, so it does not wait 250 ms longer
// than it must, and a longer idle does not make it see less.
func TestSettlePollsAtMostEvery250ms(t *testing.T) {
	busy := storage.Backlog{Running: 1}
	s := &scriptedBacklog{script: []storage.Backlog{busy, {}}}
	idle := 2 * time.Second
	_, took, sleeps, err := settleOnManual(t, []backlogger{s}, idle, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Repeat([]time.Duration{250 * time.Millisecond}, 8); !slices.Equal(sleeps, want) {
		t.Errorf("slept %v between polls, want %v", sleeps, want)
	}
	if s.calls != 1+8 || took != idle {
		t.Errorf("settled after %d polls in %s, want 9 in %s: one busy, then 250 ms apart for idle", s.calls, took, idle)
	}
}

// slowBacklog is a store one of whose polls takes wall time (a loaded
// machine, a long GC, a descheduled thread); settle itself is right.
type slowBacklog struct {
	scriptedBacklog
	slow time.Duration
}

func (s *slowBacklog) Backlog() (storage.Backlog, error) {
	if s.calls == 1 {
		time.Sleep(s.slow)
	}
	return s.scriptedBacklog.Backlog()
}

// A poll held up in wall time does not fail the test: the helper waits on
// settle, not on a spin budget (10M spins, about 2 s, once failed it with
// "settle neither slept nor returned").
func TestSettleOnManualWaitsOutASlowPoll(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps 3 s")
	}
	s := &slowBacklog{scriptedBacklog{script: []storage.Backlog{{}}}, 3 * time.Second}
	if _, _, _, err := settleOnManual(t, []backlogger{s}, 40*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	if s.calls != 1+4 {
		t.Errorf("settled after %d polls, want 5", s.calls)
	}
}

// A store that never stops compacting fails the wait at its limit, and the
// error says what is still owed.
func TestSettleGivesUpAtItsLimit(t *testing.T) {
	s := &scriptedBacklog{script: []storage.Backlog{{L0Sublevels: 14, Debt: 7, Running: 1}}}
	_, _, _, err := settleOnManual(t, []backlogger{s}, 20*time.Millisecond, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "L0 14 sublevels, debt 7 bytes, 1 running") {
		t.Fatalf("err %v, want one naming what is still owed", err)
	}
}

// A compaction or flush that begins and ends between two polls is work
// too: the idle time restarts when a poll finds more of them ended than
// the last one did.
func TestSettleSeesWorkThatEndedBetweenPolls(t *testing.T) {
	s := &scriptedBacklog{script: []storage.Backlog{{Ended: 4}, {Ended: 5}, {Ended: 6}, {Ended: 6}}}
	if _, _, _, err := settleOnManual(t, []backlogger{s}, 40*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Polls 2 and 3 each find one more ended; then idle/4 apart for idle.
	if s.calls != 3+4 {
		t.Errorf("settled after %d polls, want 7: the idle time restarts at polls 2 and 3", s.calls)
	}
}

// BuildDataset accepts a nil logger (storage.Open and node.Open default it
// to a no-op), and callers rely on that: findings' runStale passes
// Config.Logger, which a direct call leaves nil (TestStaleQuick). The
// settle's log line must not dereference it. Both layouts: the shared one
// polls one store through every shard.
func TestBuildDatasetAcceptsANilLogger(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		t.Run(layout.String(), func(t *testing.T) {
			cfg := DatasetConfig{
				Mode:     routing.ModePartition,
				Settings: routing.Settings{Shards: 2, RoutingShards: 256, PartitionSize: 1},
				Layout:   layout,
				Docs:     200,
				Load:     loadgen.Config{Writers: 2, IDsPerWriter: 100, DocSize: 64, Seed: 1},
			}
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("BuildDataset with a nil logger panicked: %v", r)
				}
			}()
			d, err := BuildDataset(filepath.Join(t.TempDir(), "dataset"), cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.Settle < settleIdle {
				t.Errorf("settle %s, want at least the idle wait %s", d.Settle, settleIdle)
			}
		})
	}
}
