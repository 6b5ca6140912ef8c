package splitter

import (
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

// Step's contract: an event the current phase does not expect is a driver
// bug and returns an error, leaving the machine unchanged. A merge machine
// fed a catch-up or tail event before it was cloned (no bounds yet)
// indexed its empty per-source bounds and panicked instead.
func TestReviewS21MergeMachineRefusesAnEarlyBoundEvent(t *testing.T) {
	for _, kind := range []EventKind{EventCaughtUp, EventTailReplayed} {
		for _, reserved := range []bool{false, true} {
			m := NewMerge(1, MergePlan{Sources: []routing.ShardID{1, 2}})
			if reserved {
				m.Advance()
				if err := m.Step(Event{Kind: EventReserved, Children: []routing.ShardID{3}}); err != nil {
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
func stepRecovering(m *MergeMachine, ev Event) (err error, panicked any) {
	defer func() { panicked = recover() }()
	return m.Step(ev), nil
}
