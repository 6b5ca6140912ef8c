package splitter

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
)

// show prints a machine's phase, the records it wants written and its
// next intent, one line: "catch-up [reserved] build-targets".
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
	splitReserved = Event{Kind: EventReserved, Targets: []routing.ShardID{8, 9}}
	mergeReserved = Event{Kind: EventReserved, Targets: []routing.ShardID{10}}
	boom          = errors.New("boom")
	failed        = Event{Kind: EventFailed, Err: boom}
)

// seqs is an event carrying one bound per source.
func seqs(k EventKind, s ...uint64) Event { return Event{Kind: k, Seqs: s} }

// handoff is the six events of a successful handoff of one source.
func handoff(seq uint64) []Event {
	return []Event{{Kind: EventFenced}, seqs(EventTailReplayed, seq), {Kind: EventPublished},
		{Kind: EventUnfenced}, {Kind: EventTargetsSynced}, {Kind: EventCommitted}}
}

// A split and a merge step through the same phases, records and intents;
// a merge carries one bound per source from each round to the next, and
// its sources are kept in ascending id order whatever the plan says.
func TestMachineHappyPath(t *testing.T) {
	tests := []struct {
		name   string
		plan   Plan
		events []Event
		want   []string
	}{
		{"split", Plan{Sources: []routing.ShardID{2}, Ways: 2, LagThreshold: 10},
			append([]Event{splitReserved, seqs(EventCloned, 100), {Kind: EventCaughtUp, Seqs: []uint64{150}, Lag: 40},
				{Kind: EventCaughtUp, Seqs: []uint64{190}, Lag: 3}}, append(handoff(195), Event{Kind: EventCleanedUp})...),
			[]string{"clone [reserved] build-targets", "catch-up catch-up after=[100]", "catch-up catch-up after=[150]",
				"handoff [handoff] fence", "handoff replay-tail after=[190]", "handoff publish", "handoff unfence",
				"handoff sync-targets", "handoff commit-table", "cleanup [published] cleanup", "done [done]"}},
		{"merge", Plan{Kind: KindMerge, Sources: []routing.ShardID{9, 8}, LagThreshold: 10},
			[]Event{mergeReserved, seqs(EventCloned, 100, 7), {Kind: EventCaughtUp, Seqs: []uint64{150, 30}, Lag: 40},
				{Kind: EventCaughtUp, Seqs: []uint64{190, 31}, Lag: 3}, {Kind: EventFenced}, seqs(EventTailReplayed, 195, 33),
				{Kind: EventPublished}, {Kind: EventUnfenced}, {Kind: EventTargetsSynced}, {Kind: EventCommitted}, {Kind: EventCleanedUp}},
			[]string{"clone [reserved] build-targets", "catch-up catch-up after=[100 7]", "catch-up catch-up after=[150 30]",
				"handoff [handoff] fence", "handoff replay-tail after=[190 31]", "handoff publish", "handoff unfence",
				"handoff sync-targets", "handoff commit-table", "cleanup [published] cleanup", "done [done]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(3, tt.plan)
			if got := show(m); got != "prepare [begin] reserve" {
				t.Fatalf("new machine: %q", got)
			}
			got := drive(t, m, tt.events...)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("trace differs (-want +got):\n%s", diff)
			}
			if got, want := m.Plan().Sources, []routing.ShardID{8, 9}; tt.plan.Kind == KindMerge && !cmp.Equal(got, want) {
				t.Errorf("sources %v, want ascending %v", got, want)
			}
		})
	}
}

// Every record names the operation's kind, its sources and, from the
// reservation on, its targets, and is valid as the journal checks it.
func TestMachineRecords(t *testing.T) {
	tests := []struct {
		plan     Plan
		reserved Event
		begin    Record
		recorded Record
	}{
		{SplitPlan(2, 2), splitReserved,
			Record{ID: 3, Stage: StageBegin, Sources: []routing.ShardID{2}},
			Record{ID: 3, Stage: StageReserved, Sources: []routing.ShardID{2}, Targets: []routing.ShardID{8, 9}}},
		{MergePlan(9, 8), mergeReserved,
			Record{ID: 3, Kind: KindMerge, Stage: StageBegin, Sources: []routing.ShardID{8, 9}},
			Record{ID: 3, Kind: KindMerge, Stage: StageReserved, Sources: []routing.ShardID{8, 9}, Targets: []routing.ShardID{10}}},
	}
	for _, tt := range tests {
		t.Run(tt.plan.String(), func(t *testing.T) {
			m := New(3, tt.plan)
			begin := m.Ready().Journal
			drive(t, m, tt.reserved)
			reserved := m.Ready().Journal
			if diff := cmp.Diff([]Record{tt.begin}, begin); diff != "" {
				t.Errorf("begin records (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]Record{tt.recorded}, reserved); diff != "" {
				t.Errorf("reserved records (-want +got):\n%s", diff)
			}
			for _, r := range append(begin, reserved...) {
				if err := r.validate(); err != nil {
					t.Errorf("record %s: %v", r, err)
				}
			}
		})
	}
}

func TestMachineDrainTimeoutRetriesThenAborts(t *testing.T) {
	tests := []struct {
		plan   Plan
		events []Event
		want   []string
	}{
		{Plan{Sources: []routing.ShardID{2}, Ways: 2, MaxHandoffs: 2},
			[]Event{splitReserved, seqs(EventCloned, 1), seqs(EventCaughtUp, 5), {Kind: EventDrainTimedOut},
				seqs(EventCaughtUp, 9), {Kind: EventDrainTimedOut}, {Kind: EventCancelled}},
			[]string{"clone [reserved] build-targets", "catch-up catch-up after=[1]", "handoff [handoff] fence",
				"catch-up catch-up after=[5]", "handoff [handoff] fence", "aborting [aborting] cancel", "aborted [aborted]"}},
		{Plan{Kind: KindMerge, Sources: []routing.ShardID{1, 2}, MaxHandoffs: 2},
			[]Event{mergeReserved, seqs(EventCloned, 1, 2), seqs(EventCaughtUp, 5, 6), {Kind: EventDrainTimedOut},
				seqs(EventCaughtUp, 9, 6), {Kind: EventDrainTimedOut}, {Kind: EventCancelled}},
			[]string{"clone [reserved] build-targets", "catch-up catch-up after=[1 2]", "handoff [handoff] fence",
				"catch-up catch-up after=[5 6]", "handoff [handoff] fence", "aborting [aborting] cancel", "aborted [aborted]"}},
	}
	for _, tt := range tests {
		t.Run(tt.plan.String(), func(t *testing.T) {
			m := New(1, tt.plan)
			got := drive(t, m, tt.events...)
			if diff := cmp.Diff(tt.want, got); diff != "" || m.Err() == nil {
				t.Fatalf("trace differs (-want +got):\n%s\nerr %v, want one", diff, m.Err())
			}
		})
	}
}

func TestMachineFailures(t *testing.T) {
	cloned := []Event{splitReserved, seqs(EventCloned, 0)}
	caughtUp := append(cloned, seqs(EventCaughtUp, 0))
	fenced := append(caughtUp, Event{Kind: EventFenced})
	tests := []struct {
		name   string
		events []Event
		want   string // show(m) after the last event
		phase  Phase
	}{
		{"refused reserve: ended with its record", []Event{failed}, "aborted [aborted]", PhaseAborted},
		{"after clone: cancel", append(cloned, failed), "aborting [aborting] cancel", PhaseAborting},
		{"failed cancel: retried", append(cloned, failed, failed), "aborting cancel", PhaseAborting},
		{"fenced: unfence first", append(fenced, failed), "aborting [aborting] unfence", PhaseAborting},
		{"fenced, unfenced: then cancel", append(fenced, failed, Event{Kind: EventUnfenced}), "aborting cancel", PhaseAborting},
		{"published, not durable: the node failed", append(fenced, seqs(EventTailReplayed, 0), Event{Kind: EventPublished},
			Event{Kind: EventUnfenced}, failed), "failed", PhaseFailed},
		{"committed: cleanup retried", append(append(caughtUp, handoff(0)...), failed), "cleanup cleanup", PhaseCleanup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(1, SplitPlan(1, 2))
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
	t.Run("merge fenced: unfence first", func(t *testing.T) {
		m := New(1, MergePlan(1, 2))
		got := drive(t, m, mergeReserved, seqs(EventCloned, 1, 2), seqs(EventCaughtUp, 1, 2), Event{Kind: EventFenced}, failed)
		if last := got[len(got)-1]; last != "aborting [aborting] unfence" {
			t.Fatalf("failure while fenced: %q", last)
		}
	})
	t.Run("unexpected event", func(t *testing.T) {
		m := New(1, SplitPlan(1, 2))
		if err := m.Step(Event{Kind: EventPublished}); err == nil || m.Phase() != PhasePrepare {
			t.Fatalf("Step(published) in prepare = %v, phase %s", err, m.Phase())
		}
	})
}

// A cancel is an event the machine accepts before the handoff fences the
// sources and refuses from then on; it never changes an operation it
// refused.
func TestMachineCancel(t *testing.T) {
	pre := []Event{splitReserved, seqs(EventCloned, 0), seqs(EventCaughtUp, 0)}
	tests := []struct {
		name   string
		events []Event
		accept bool
		want   string
	}{
		{"prepare", nil, true, "aborted [begin aborted]"},
		{"clone", []Event{splitReserved}, true, "aborting [aborting] cancel"},
		{"handoff before fence", pre, true, "aborting [aborting] cancel"},
		{"fenced", append(pre, Event{Kind: EventFenced}), false, "handoff replay-tail after=[0]"},
		{"published", append(pre, Event{Kind: EventFenced}, seqs(EventTailReplayed, 0), Event{Kind: EventPublished}), false, "handoff unfence"},
		{"committed", append(pre, handoff(0)...), false, "cleanup cleanup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(1, SplitPlan(1, 2)) // its begin record not yet taken
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
	t.Run("merge", func(t *testing.T) {
		m := New(1, MergePlan(1, 2))
		drive(t, m, mergeReserved, seqs(EventCloned, 1, 2), seqs(EventCaughtUp, 1, 2), Event{Kind: EventFenced})
		if err := m.Step(Event{Kind: EventCancelRequested}); err == nil {
			t.Fatalf("cancel after the fence accepted")
		}
		m = New(1, MergePlan(1, 2))
		drive(t, m, mergeReserved, seqs(EventCloned, 1, 2))
		if err := m.Step(Event{Kind: EventCancelRequested}); err != nil || m.Phase() != PhaseAborting {
			t.Fatalf("cancel in catch-up: %v, phase %s", err, m.Phase())
		}
	})
}

// replay builds a machine that took every Ready up to the last event, and
// leaves the last event's Ready untaken.
func replay(t *testing.T, events []Event) *Machine {
	t.Helper()
	m := New(1, SplitPlan(1, 2))
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

// A source's bound never goes back, even if another's moved on, and every
// round carries one bound per source: an event that says otherwise is a
// driver bug.
func TestMachineRefusesABoundGoingBack(t *testing.T) {
	// refused steps m with the events, then expects ev to be refused (an
	// error, or the panic of an invariants build).
	refused := func(t *testing.T, m *Machine, ev Event, events ...Event) {
		t.Helper()
		drive(t, m, events...)
		defer func() {
			if r := recover(); r != nil {
				t.Logf("assertion: %v", r)
			}
		}()
		if err := m.Step(ev); err == nil {
			t.Fatalf("%s with bounds %v after %v was accepted", ev.Kind, ev.Seqs, m.CaughtUp())
		}
	}
	t.Run("split", func(t *testing.T) {
		refused(t, New(1, Plan{Sources: []routing.ShardID{1}, Ways: 2, LagThreshold: 1}), seqs(EventCaughtUp, 40),
			splitReserved, seqs(EventCloned, 50), Event{Kind: EventCaughtUp, Seqs: []uint64{60}, Lag: 9})
	})
	merge := []Event{mergeReserved, seqs(EventCloned, 50, 5), {Kind: EventCaughtUp, Seqs: []uint64{60, 5}, Lag: 9}}
	t.Run("merge, one source back", func(t *testing.T) {
		refused(t, New(1, Plan{Kind: KindMerge, Sources: []routing.ShardID{1, 2}, LagThreshold: 1}), seqs(EventCaughtUp, 70, 4), merge...)
	})
	t.Run("merge, one bound for two sources", func(t *testing.T) {
		refused(t, New(1, Plan{Kind: KindMerge, Sources: []routing.ShardID{1, 2}, LagThreshold: 1}), seqs(EventCaughtUp, 70), merge...)
	})
}

// Step's contract: an event the current phase does not expect is a driver
// bug and returns an error, leaving the machine unchanged. A catch-up or
// tail event before the clone (no bounds yet) must not index the missing
// per-source bounds.
func TestMachineRefusesABoundEventBeforeTheClone(t *testing.T) {
	for _, kind := range []EventKind{EventCaughtUp, EventTailReplayed} {
		for _, reserved := range []bool{false, true} {
			m := New(1, MergePlan(1, 2))
			if reserved {
				m.Advance()
				if err := m.Step(Event{Kind: EventReserved, Targets: []routing.ShardID{3}}); err != nil {
					t.Fatal(err)
				}
			}
			before := m.Phase()
			err, panicked := stepRecovering(m, Event{Kind: kind, Seqs: []uint64{5, 6}})
			if panicked != nil {
				t.Errorf("%s in %s panicked: %v", kind, before, panicked)
			} else if err == nil {
				t.Errorf("%s in %s was accepted", kind, before)
			}
			if m.Phase() != before {
				t.Errorf("%s in %s moved the machine to %s", kind, before, m.Phase())
			}
		}
	}
}

// stepRecovering steps m and returns what Step returned or the panic.
func stepRecovering(m *Machine, ev Event) (err error, panicked any) {
	defer func() { panicked = recover() }()
	return m.Step(ev), nil
}
