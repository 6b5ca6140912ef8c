package splitter

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
)

// showMerge prints a merge machine as show prints a split machine.
func showMerge(m *MergeMachine) string {
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

func driveMerge(t *testing.T, m *MergeMachine, events ...Event) []string {
	t.Helper()
	var trace []string
	for _, ev := range events {
		m.Advance()
		if err := m.Step(ev); err != nil {
			t.Fatalf("Step(%s) in %s: %v", ev.Kind, m.Phase(), err)
		}
		trace = append(trace, showMerge(m))
	}
	return trace
}

var mergeReserved = Event{Kind: EventReserved, Children: []routing.ShardID{10}}

// The happy path, with one bound per source carried from each round to the
// next; the sources are kept in ascending id order whatever the plan says.
func TestMergeMachineHappyPath(t *testing.T) {
	m := NewMerge(3, MergePlan{Sources: []routing.ShardID{9, 8}, LagThreshold: 10})
	if got := showMerge(m); got != "prepare [begin] reserve" {
		t.Fatalf("new machine: %q", got)
	}
	got := driveMerge(t, m, mergeReserved, Event{Kind: EventCloned, Seqs: []uint64{100, 7}},
		Event{Kind: EventCaughtUp, Seqs: []uint64{150, 30}, Lag: 40}, Event{Kind: EventCaughtUp, Seqs: []uint64{190, 31}, Lag: 3},
		Event{Kind: EventFenced}, Event{Kind: EventTailReplayed, Seqs: []uint64{195, 33}}, Event{Kind: EventPublished},
		Event{Kind: EventUnfenced}, Event{Kind: EventTargetSynced}, Event{Kind: EventCommitted}, Event{Kind: EventCleanedUp})
	want := []string{"clone [reserved] build-target", "catch-up catch-up after=[100 7]", "catch-up catch-up after=[150 30]",
		"handoff [handoff] fence", "handoff replay-tail after=[190 31]", "handoff publish", "handoff unfence",
		"handoff sync-target", "handoff commit-table", "cleanup [published] cleanup", "done [done]"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("trace differs (-want +got):\n%s", diff)
	}
	if got := m.Plan().Sources; !cmp.Equal(got, []routing.ShardID{8, 9}) {
		t.Errorf("sources %v, want ascending [8 9]", got)
	}
	if m.Target() != 10 {
		t.Errorf("target %d, want 10", m.Target())
	}
}

func TestMergeMachineRecords(t *testing.T) {
	m := NewMerge(3, MergePlan{Sources: []routing.ShardID{8, 9}})
	begin := m.Ready().Journal
	driveMerge(t, m, mergeReserved)
	reserved := m.Ready().Journal
	want := []Record{{Split: 3, Kind: KindMerge, Stage: StageBegin, Sources: []routing.ShardID{8, 9}}}
	if diff := cmp.Diff(want, begin); diff != "" {
		t.Errorf("begin records (-want +got):\n%s", diff)
	}
	want = []Record{{Split: 3, Kind: KindMerge, Stage: StageReserved, Target: 10, Sources: []routing.ShardID{8, 9}}}
	if diff := cmp.Diff(want, reserved); diff != "" {
		t.Errorf("reserved records (-want +got):\n%s", diff)
	}
	for _, r := range append(begin, reserved...) {
		if err := r.validate(); err != nil {
			t.Errorf("record %s: %v", r, err)
		}
	}
}

func TestMergeMachineDrainTimeoutAndCancel(t *testing.T) {
	m := NewMerge(1, MergePlan{Sources: []routing.ShardID{1, 2}, MaxHandoffs: 2})
	got := driveMerge(t, m, mergeReserved, Event{Kind: EventCloned, Seqs: []uint64{1, 2}}, Event{Kind: EventCaughtUp, Seqs: []uint64{5, 6}},
		Event{Kind: EventDrainTimedOut}, Event{Kind: EventCaughtUp, Seqs: []uint64{9, 6}}, Event{Kind: EventDrainTimedOut},
		Event{Kind: EventCancelled})
	want := []string{"clone [reserved] build-target", "catch-up catch-up after=[1 2]", "handoff [handoff] fence",
		"catch-up catch-up after=[5 6]", "handoff [handoff] fence", "aborting [aborting] cancel", "aborted [aborted]"}
	if diff := cmp.Diff(want, got); diff != "" || m.Err() == nil {
		t.Fatalf("trace differs (-want +got):\n%s\nerr %v, want one", diff, m.Err())
	}

	// A cancel before the fence is accepted, after it refused.
	m = NewMerge(1, MergePlan{Sources: []routing.ShardID{1, 2}})
	driveMerge(t, m, mergeReserved, Event{Kind: EventCloned, Seqs: []uint64{1, 2}}, Event{Kind: EventCaughtUp, Seqs: []uint64{1, 2}}, Event{Kind: EventFenced})
	if err := m.Step(Event{Kind: EventCancelRequested}); err == nil {
		t.Fatalf("cancel after the fence accepted")
	}
	m = NewMerge(1, MergePlan{Sources: []routing.ShardID{1, 2}})
	driveMerge(t, m, mergeReserved, Event{Kind: EventCloned, Seqs: []uint64{1, 2}})
	if err := m.Step(Event{Kind: EventCancelRequested}); err != nil || m.Phase() != PhaseAborting {
		t.Fatalf("cancel in catch-up: %v, phase %s", err, m.Phase())
	}
	// A failure while fenced unfences first.
	m = NewMerge(1, MergePlan{Sources: []routing.ShardID{1, 2}})
	got = driveMerge(t, m, mergeReserved, Event{Kind: EventCloned, Seqs: []uint64{1, 2}}, Event{Kind: EventCaughtUp, Seqs: []uint64{1, 2}},
		Event{Kind: EventFenced}, Event{Kind: EventFailed, Err: errors.New("boom")})
	if last := got[len(got)-1]; last != "aborting [aborting] unfence" {
		t.Fatalf("failure while fenced: %q", last)
	}
}

// One source's bound going back is a driver bug, even if the other's moved
// on; so is a round with the wrong number of bounds.
func TestMergeMachineRefusesABoundGoingBack(t *testing.T) {
	m := NewMerge(1, MergePlan{Sources: []routing.ShardID{1, 2}, LagThreshold: 1})
	driveMerge(t, m, mergeReserved, Event{Kind: EventCloned, Seqs: []uint64{50, 5}}, Event{Kind: EventCaughtUp, Seqs: []uint64{60, 5}, Lag: 9})
	defer func() {
		if r := recover(); r != nil {
			t.Logf("assertion: %v", r) // invariants builds panic
		}
	}()
	if err := m.Step(Event{Kind: EventCaughtUp, Seqs: []uint64{70, 4}}); err == nil {
		t.Fatalf("a catch-up of source 2 back to 4 after 5 was accepted")
	}
	if err := m.Step(Event{Kind: EventCaughtUp, Seqs: []uint64{70}}); err == nil {
		t.Fatalf("a catch-up with one bound for two sources was accepted")
	}
}
