package splitter

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
)

// show prints a machine's phase, the records it wants written and its
// next intent, one line: "catch-up [reserved] create-children".
func show(m *Machine) string {
	rd := m.Ready()
	var recs []string
	for _, r := range rd.Journal {
		recs = append(recs, r.Stage.String())
	}
	s := m.Phase().String()
	if len(recs) > 0 {
		s += " [" + strings.Join(recs, " ") + "]"
	}
	if rd.Intent.Kind != 0 {
		s += " " + rd.Intent.String()
	}
	return s
}

// drive takes each Ready, then feeds the events, and returns what the
// machine wanted after each.
func drive(t *testing.T, m *Machine, events ...Event) []string {
	t.Helper()
	var trace []string
	for _, ev := range events {
		m.Advance()
		if err := m.Step(ev); err != nil {
			t.Fatalf("Step(%s) in %s: %v", ev.Kind, m.Phase(), err)
		}
		trace = append(trace, show(m))
	}
	return trace
}

var (
	reserved = Event{Kind: EventReserved, Children: []routing.ShardID{8, 9}}
	boom     = errors.New("boom")
	failed   = Event{Kind: EventFailed, Err: boom}
)

// handoff is the six events of a successful handoff.
func handoff(seq uint64) []Event {
	return []Event{{Kind: EventFenced}, {Kind: EventTailReplayed, Seq: seq}, {Kind: EventPublished},
		{Kind: EventUnfenced}, {Kind: EventChildrenSynced}, {Kind: EventCommitted}}
}

func TestMachineHappyPath(t *testing.T) {
	m := New(1, Plan{Parent: 2, Ways: 2, LagThreshold: 10})
	if got := show(m); got != "prepare [begin] reserve" {
		t.Fatalf("new machine: %q", got)
	}
	events := append([]Event{reserved, {Kind: EventCloned, Seq: 100}, {Kind: EventCaughtUp, Seq: 150, Lag: 40},
		{Kind: EventCaughtUp, Seq: 190, Lag: 3}}, handoff(195)...)
	got := drive(t, m, append(events, Event{Kind: EventCleanedUp})...)
	want := []string{"clone [reserved] create-children", "catch-up catch-up after=100", "catch-up catch-up after=150",
		"handoff [handoff] fence", "handoff replay-tail after=190", "handoff publish", "handoff unfence",
		"handoff sync-children", "handoff commit-table", "cleanup [published] cleanup", "done [done]"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("trace differs (-want +got):\n%s", diff)
	}
}

func TestMachineDrainTimeoutRetriesThenAborts(t *testing.T) {
	m := New(1, Plan{Parent: 2, Ways: 2, MaxHandoffs: 2})
	got := drive(t, m, reserved, Event{Kind: EventCloned, Seq: 1}, Event{Kind: EventCaughtUp, Seq: 5},
		Event{Kind: EventDrainTimedOut}, Event{Kind: EventCaughtUp, Seq: 9}, Event{Kind: EventDrainTimedOut},
		Event{Kind: EventCancelled})
	want := []string{"clone [reserved] create-children", "catch-up catch-up after=1", "handoff [handoff] fence",
		"catch-up catch-up after=5", "handoff [handoff] fence", "aborting [aborting] cancel", "aborted [aborted]"}
	if diff := cmp.Diff(want, got); diff != "" || m.Err() == nil {
		t.Fatalf("trace differs (-want +got):\n%s\nerr %v, want one", diff, m.Err())
	}
}

func TestMachineFailures(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
		want   string // show(m) after the last event
		phase  Phase
	}{
		{"refused reserve: ended with its record", []Event{failed}, "aborted [aborted]", PhaseAborted},
		{"after clone: cancel", []Event{reserved, {Kind: EventCloned}, failed}, "aborting [aborting] cancel", PhaseAborting},
		{"failed cancel: retried", []Event{reserved, {Kind: EventCloned}, failed, failed}, "aborting cancel", PhaseAborting},
		{"fenced: unfence first", []Event{reserved, {Kind: EventCloned}, {Kind: EventCaughtUp}, {Kind: EventFenced}, failed},
			"aborting [aborting] unfence", PhaseAborting},
		{"fenced, unfenced: then cancel", []Event{reserved, {Kind: EventCloned}, {Kind: EventCaughtUp}, {Kind: EventFenced}, failed, {Kind: EventUnfenced}},
			"aborting cancel", PhaseAborting},
		{"published, not durable: the node failed", []Event{reserved, {Kind: EventCloned}, {Kind: EventCaughtUp}, {Kind: EventFenced},
			{Kind: EventTailReplayed}, {Kind: EventPublished}, {Kind: EventUnfenced}, failed}, "failed", PhaseFailed},
		{"committed: cleanup retried", append(append([]Event{reserved, {Kind: EventCloned}, {Kind: EventCaughtUp}}, handoff(0)...), failed),
			"cleanup cleanup", PhaseCleanup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(1, Plan{Parent: 1, Ways: 2})
			got := drive(t, m, tt.events...)
			if last := got[len(got)-1]; last != tt.want || m.Phase() != tt.phase {
				t.Fatalf("after %v: %q (phase %s), want %q", tt.events, last, m.Phase(), tt.want)
			}
			if tt.phase == PhaseAborted || tt.phase == PhaseFailed {
				if !errors.Is(m.Err(), boom) {
					t.Errorf("Err() = %v, want boom", m.Err())
				}
			}
		})
	}
	t.Run("unexpected event", func(t *testing.T) {
		m := New(1, Plan{Parent: 1, Ways: 2})
		if err := m.Step(Event{Kind: EventPublished}); err == nil || m.Phase() != PhasePrepare {
			t.Fatalf("Step(published) in prepare = %v, phase %s", err, m.Phase())
		}
	})
}

// A cancel is an event the machine accepts before the handoff fences the
// parent and refuses from then on; it never changes a split it refused.
func TestMachineCancel(t *testing.T) {
	pre := []Event{reserved, {Kind: EventCloned}, {Kind: EventCaughtUp}}
	tests := []struct {
		name   string
		events []Event
		accept bool
		want   string
	}{
		{"prepare", nil, true, "aborted [begin aborted]"},
		{"clone", []Event{reserved}, true, "aborting [aborting] cancel"},
		{"handoff before fence", pre, true, "aborting [aborting] cancel"},
		{"fenced", append(pre, Event{Kind: EventFenced}), false, "handoff replay-tail after=0"},
		{"published", append(pre, Event{Kind: EventFenced}, Event{Kind: EventTailReplayed}, Event{Kind: EventPublished}), false, "handoff unfence"},
		{"committed", append(pre, handoff(0)...), false, "cleanup cleanup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(1, Plan{Parent: 1, Ways: 2}) // its begin record not yet taken
			if tt.events != nil {
				m = replay(t, tt.events)
			}
			err := m.Step(Event{Kind: EventCancelRequested})
			if (err == nil) != tt.accept {
				t.Fatalf("cancel: err %v, want accepted=%v", err, tt.accept)
			}
			if got := show(m); got != tt.want {
				t.Fatalf("after cancel: %q, want %q", got, tt.want)
			}
		})
	}
}

// replay builds a machine that took every Ready up to the last event, and
// leaves the last event's Ready untaken.
func replay(t *testing.T, events []Event) *Machine {
	t.Helper()
	m := New(1, Plan{Parent: 1, Ways: 2})
	for _, ev := range events {
		m.Advance()
		if err := m.Step(ev); err != nil {
			t.Fatal(err)
		}
	}
	// Drop the records of the last transition: they were written.
	rd := m.Ready()
	m.Advance()
	m.ready.Intent = rd.Intent
	return m
}

// Sequence numbers never go back: an event that says so is a driver bug.
func TestMachineRefusesSeqGoingBack(t *testing.T) {
	m := New(1, Plan{Parent: 1, Ways: 2, LagThreshold: 1})
	drive(t, m, reserved, Event{Kind: EventCloned, Seq: 50}, Event{Kind: EventCaughtUp, Seq: 60, Lag: 9})
	defer func() {
		if r := recover(); r != nil {
			t.Logf("assertion: %v", r) // invariants builds panic
		}
	}()
	if err := m.Step(Event{Kind: EventCaughtUp, Seq: 40}); err == nil {
		t.Fatalf("a catch-up back to seq 40 after 60 was accepted")
	}
}
