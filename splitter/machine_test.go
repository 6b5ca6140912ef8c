package splitter

import (
	"errors"
	"slices"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

// drive feeds events and returns the phases and intents seen.
func drive(t *testing.T, m *Machine, events ...Event) []string {
	t.Helper()
	var trace []string
	for _, ev := range events {
		m.Advance()
		if err := m.Step(ev); err != nil {
			t.Fatalf("Step(%s) in %s: %v", ev.Kind, m.Phase(), err)
		}
		s := m.Phase().String()
		for _, in := range m.Ready() {
			s += " " + in.String()
		}
		trace = append(trace, s)
	}
	return trace
}

func TestMachineHappyPath(t *testing.T) {
	m := New(Plan{Parent: 2, Ways: 2, LagThreshold: 10})
	got := drive(t, m,
		Event{Kind: EventReserved, Children: []routing.ShardID{8, 9}},
		Event{Kind: EventCloned, Seq: 100},
		Event{Kind: EventCaughtUp, Seq: 150, Lag: 40},
		Event{Kind: EventCaughtUp, Seq: 190, Lag: 3},
		Event{Kind: EventPublished},
		Event{Kind: EventCleanedUp},
	)
	want := []string{"clone create-children", "catch-up catch-up after=100", "catch-up catch-up after=150",
		"handoff handoff after=190", "cleanup cleanup", "done"}
	if !slices.Equal(got, want) {
		t.Fatalf("trace = %q, want %q", got, want)
	}
}

func TestMachineDrainTimeoutRetriesThenAborts(t *testing.T) {
	m := New(Plan{Parent: 2, Ways: 2, MaxHandoffs: 2})
	got := drive(t, m,
		Event{Kind: EventReserved, Children: []routing.ShardID{8, 9}},
		Event{Kind: EventCloned, Seq: 1},
		Event{Kind: EventCaughtUp, Seq: 5, Lag: 0},
		Event{Kind: EventDrainTimedOut},
		Event{Kind: EventCaughtUp, Seq: 9, Lag: 0},
		Event{Kind: EventDrainTimedOut},
		Event{Kind: EventCancelled},
	)
	want := []string{"clone create-children", "catch-up catch-up after=1", "handoff handoff after=5",
		"catch-up catch-up after=5", "handoff handoff after=9", "aborting cancel", "aborted"}
	if !slices.Equal(got, want) || m.Err() == nil {
		t.Fatalf("trace = %q (err %v), want %q and an error", got, m.Err(), want)
	}
}

func TestMachineFailures(t *testing.T) {
	boom := errors.New("boom")
	t.Run("before reserve: nothing to undo", func(t *testing.T) {
		m := New(Plan{Parent: 1, Ways: 2})
		drive(t, m, Event{Kind: EventFailed, Err: boom})
		if m.Phase() != PhaseAborted || !errors.Is(m.Err(), boom) {
			t.Fatalf("phase %s err %v", m.Phase(), m.Err())
		}
	})
	t.Run("after clone: cancel", func(t *testing.T) {
		m := New(Plan{Parent: 1, Ways: 2})
		got := drive(t, m, Event{Kind: EventReserved}, Event{Kind: EventCloned}, Event{Kind: EventFailed, Err: boom},
			Event{Kind: EventFailed, Err: boom}, Event{Kind: EventCancelled})
		if got[2] != "aborting cancel" || got[3] != "aborting cancel" || m.Phase() != PhaseAborted {
			t.Fatalf("trace %q", got)
		}
	})
	t.Run("after publish: roll forward", func(t *testing.T) {
		m := New(Plan{Parent: 1, Ways: 2})
		drive(t, m, Event{Kind: EventReserved}, Event{Kind: EventCloned}, Event{Kind: EventCaughtUp},
			Event{Kind: EventPublished}, Event{Kind: EventFailed, Err: boom})
		if m.Phase() != PhaseCleanup || !slices.Equal(m.Ready(), []Intent{{Kind: IntentCleanup}}) {
			t.Fatalf("phase %s ready %v, want cleanup retried", m.Phase(), m.Ready())
		}
		if err := m.Step(Event{Kind: EventCancelRequested}); err == nil {
			t.Fatalf("cancel after publish was accepted")
		}
	})
	t.Run("unexpected event", func(t *testing.T) {
		m := New(Plan{Parent: 1, Ways: 2})
		if err := m.Step(Event{Kind: EventPublished}); err == nil || m.Phase() != PhasePrepare {
			t.Fatalf("Step(published) in prepare = %v, phase %s", err, m.Phase())
		}
	})
}
