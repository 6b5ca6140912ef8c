package splitter

import (
	"fmt"
	"slices"

	"github.com/shardsplit/shardsplit/internal/invariants"
	"github.com/shardsplit/shardsplit/routing"
)

// MergePlan is what to merge and the protocol's bounds.
type MergePlan struct {
	// Sources are adjacent leaves of one root, in any order. The machine
	// and the driver keep them in ascending id order: the order the
	// handoff fences them in.
	Sources []routing.ShardID
	// LagThreshold: hand off once a catch-up round leaves at most this many
	// source writes unreplayed, summed over the sources (default 256).
	LagThreshold uint64
	// MaxCatchUpRounds: hand off after this many rounds regardless (default 32).
	MaxCatchUpRounds int
	// MaxHandoffs: abort after this many drain timeouts (default 3).
	MaxHandoffs int
}

// Edit returns the BeginMerge edit of the plan.
func (p MergePlan) Edit() routing.Edit {
	return routing.Edit{Kind: routing.BeginMerge, Sources: slices.Clone(p.Sources)}
}

// MergeMachine is the merge protocol as a pure state machine, in the
// split Machine's style and with its phases, read with "target" for
// "children":
//
//	Prepare ─Reserve─► Clone ─BuildTarget─► CatchUp ⇄ Handoff ─► Cleanup ─► Done
//	   (BeginMerge)    (checkpoint of the   (every      Fence ─► ReplayTail ─► Publish ─►
//	                    largest source +     source's    Unfence ─► SyncTarget ─► CommitTable
//	                    the others copied)   log, one
//	                                         bound each)
//
// Fence takes every source's apply lock in ascending id order, each
// waiting at most the drain bound; a timeout on any releases those taken
// and goes back to catch-up (the sources never stopped owning their keys).
// ReplayTail copies each source's last writes into the target and raises
// its sequence number above every source's; Publish makes CommitMerge the
// table requests see (the sources stop owning their keys); Unfence releases
// the locks (a writer that waited finds it is stale and retries at the
// target); SyncTarget makes the target durable; CommitTable persists the
// table, the commit point (INV-9: writes only the new table admits are
// acknowledged after it). Cleanup retires the sources once their readers
// are gone. Abort and cancel before the fence, as for a split: the target
// is deleted and CancelMerge applied. Journal records are of KindMerge.
//
// INVARIANTS: those of Machine, with caughtUp one bound per source: each
// never decreases and each round of a source starts where its previous
// round ended.
type MergeMachine struct {
	id        uint64
	plan      MergePlan
	phase     Phase
	target    routing.ShardID
	caughtUp  []uint64 // per source (plan order): sequence number replayed into the target
	rounds    int
	handoffs  int
	fenced    bool
	published bool
	err       error
	ready     Ready
}

// NewMerge returns a merge machine in PhasePrepare whose first intent is to
// reserve, after journaling the begin record of operation id.
func NewMerge(id uint64, plan MergePlan) *MergeMachine {
	plan.Sources = slices.Sorted(slices.Values(plan.Sources))
	if plan.LagThreshold == 0 {
		plan.LagThreshold = 256
	}
	if plan.MaxCatchUpRounds == 0 {
		plan.MaxCatchUpRounds = 32
	}
	if plan.MaxHandoffs == 0 {
		plan.MaxHandoffs = 3
	}
	m := &MergeMachine{id: id, plan: plan, phase: PhasePrepare}
	m.become(PhasePrepare, StageBegin, Intent{Kind: IntentReserve})
	return m
}

// ID returns the operation id.
func (m *MergeMachine) ID() uint64 { return m.id }

// Phase returns the current phase.
func (m *MergeMachine) Phase() Phase { return m.phase }

// Plan returns the plan, sources ascending.
func (m *MergeMachine) Plan() MergePlan { return m.plan }

// Target returns the reserved target id (0 before the reservation).
func (m *MergeMachine) Target() routing.ShardID { return m.target }

// Err returns why the merge aborted or failed, if it did.
func (m *MergeMachine) Err() error { return m.err }

// Fenced reports whether the sources' apply locks are held.
func (m *MergeMachine) Fenced() bool { return m.fenced }

// CaughtUp returns each source's replayed sequence number.
func (m *MergeMachine) CaughtUp() []uint64 { return slices.Clone(m.caughtUp) }

// Ready returns what to persist and do next.
func (m *MergeMachine) Ready() Ready {
	rd := Ready{Journal: slices.Clone(m.ready.Journal), Intent: m.ready.Intent}
	rd.Intent.Afters = slices.Clone(rd.Intent.Afters)
	return rd
}

// Advance acknowledges that the driver took the ready records and intent.
func (m *MergeMachine) Advance() { m.ready = Ready{} }

// CanCancel reports whether a cancel would be accepted now: before the
// handoff has fenced the sources, and not once the merge ended.
func (m *MergeMachine) CanCancel() error {
	switch {
	case m.phase.Terminal():
		return fmt.Errorf("splitter: merge %d of shards %v already ended (%s)", m.id, m.plan.Sources, m.phase)
	case m.phase == PhaseAborting:
		return nil
	case m.fenced || m.published || m.phase == PhaseCleanup:
		return fmt.Errorf("splitter: merge %d of shards %v cannot be cancelled in phase %s: its handoff has begun", m.id, m.plan.Sources, m.phase)
	}
	return nil
}

// Step applies an event. An event the current phase does not expect is a
// driver bug and returns an error, leaving the machine unchanged.
func (m *MergeMachine) Step(ev Event) error {
	if err := m.checkEvent(ev); err != nil {
		return err
	}
	from := m.phase
	switch {
	case ev.Kind == EventCancelRequested:
		return m.stepCancel()
	case ev.Kind == EventFailed:
		return m.stepFailed(ev)
	case from == PhasePrepare && ev.Kind == EventReserved:
		m.target = ev.Children[0]
		m.become(PhaseClone, StageReserved, Intent{Kind: IntentBuildTarget})
	case from == PhaseClone && ev.Kind == EventCloned:
		m.caughtUp = slices.Clone(ev.Seqs)
		m.become(PhaseCatchUp, 0, m.catchUpIntent(IntentCatchUp))
	case from == PhaseCatchUp && ev.Kind == EventCaughtUp:
		m.caughtUp, m.rounds = slices.Clone(ev.Seqs), m.rounds+1
		if ev.Lag <= m.plan.LagThreshold || m.rounds >= m.plan.MaxCatchUpRounds {
			m.handoffs++
			m.become(PhaseHandoff, StageHandoff, Intent{Kind: IntentFence})
		} else {
			m.become(PhaseCatchUp, 0, m.catchUpIntent(IntentCatchUp))
		}
	case from == PhaseHandoff && ev.Kind == EventDrainTimedOut:
		if m.handoffs >= m.plan.MaxHandoffs {
			m.err = fmt.Errorf("splitter: drain of in-flight writes timed out %d times", m.handoffs)
			m.become(PhaseAborting, StageAborting, Intent{Kind: IntentCancel})
		} else {
			m.rounds = 0
			m.become(PhaseCatchUp, 0, m.catchUpIntent(IntentCatchUp))
		}
	case from == PhaseHandoff && ev.Kind == EventFenced:
		m.fenced = true
		m.become(PhaseHandoff, 0, m.catchUpIntent(IntentReplayTail))
	case from == PhaseHandoff && ev.Kind == EventTailReplayed:
		m.caughtUp = slices.Clone(ev.Seqs)
		m.become(PhaseHandoff, 0, Intent{Kind: IntentPublish})
	case from == PhaseHandoff && ev.Kind == EventPublished:
		m.published = true
		m.become(PhaseHandoff, 0, Intent{Kind: IntentUnfence})
	case from == PhaseHandoff && ev.Kind == EventUnfenced:
		m.fenced = false
		m.become(PhaseHandoff, 0, Intent{Kind: IntentSyncTarget})
	case from == PhaseHandoff && ev.Kind == EventTargetSynced:
		m.become(PhaseHandoff, 0, Intent{Kind: IntentCommitTable})
	case from == PhaseHandoff && ev.Kind == EventCommitted:
		m.become(PhaseCleanup, StagePublished, Intent{Kind: IntentCleanup})
	case from == PhaseCleanup && ev.Kind == EventCleanedUp:
		m.become(PhaseDone, StageDone, Intent{})
	case from == PhaseAborting && ev.Kind == EventUnfenced:
		m.fenced = false
		m.become(PhaseAborting, 0, Intent{Kind: IntentCancel})
	case from == PhaseAborting && ev.Kind == EventCancelled:
		m.become(PhaseAborted, StageAborted, Intent{})
	default:
		return fmt.Errorf("splitter: event %s not expected in phase %s of a merge", ev.Kind, from)
	}
	return nil
}

func (m *MergeMachine) catchUpIntent(k IntentKind) Intent {
	return Intent{Kind: k, Afters: slices.Clone(m.caughtUp)}
}

// checkEvent asserts that an event carries what its phase needs and that no
// source's bound goes back.
func (m *MergeMachine) checkEvent(ev Event) error {
	switch ev.Kind {
	case EventReserved:
		if len(ev.Children) != 1 {
			return invariants.AssertionFailedf("splitter: merge %d: reserved event with targets %v", m.id, ev.Children)
		}
	case EventCloned, EventCaughtUp, EventTailReplayed:
		if len(ev.Seqs) != len(m.plan.Sources) {
			return invariants.AssertionFailedf("splitter: merge %d: %s with %d bounds for %d sources", m.id, ev.Kind, len(ev.Seqs), len(m.plan.Sources))
		}
		if ev.Kind != EventCloned && m.caughtUp != nil { // no bounds before the clone: Step refuses the event
			for i, s := range ev.Seqs {
				if s < m.caughtUp[i] {
					return invariants.AssertionFailedf("splitter: merge %d: %s of source %d at seq %d, below %d already replayed",
						m.id, ev.Kind, m.plan.Sources[i], s, m.caughtUp[i])
				}
			}
		}
	case EventFailed:
		if ev.Err == nil {
			return invariants.AssertionFailedf("splitter: merge %d: failed event without an error", m.id)
		}
	}
	return nil
}

func (m *MergeMachine) stepCancel() error {
	if err := m.CanCancel(); err != nil {
		return err
	}
	switch m.phase {
	case PhaseAborting:
		return nil
	case PhasePrepare:
		m.err = fmt.Errorf("splitter: cancelled")
		m.become(PhaseAborted, StageAborted, Intent{})
	default:
		m.err = fmt.Errorf("splitter: cancelled")
		m.become(PhaseAborting, StageAborting, Intent{Kind: IntentCancel})
	}
	return nil
}

// stepFailed: as Machine.stepFailed.
func (m *MergeMachine) stepFailed(ev Event) error {
	switch {
	case m.phase.Terminal():
		return fmt.Errorf("splitter: %s after the merge ended (%s)", ev.Kind, m.phase)
	case m.phase == PhaseCleanup:
		m.become(PhaseCleanup, 0, Intent{Kind: IntentCleanup})
	case m.published:
		m.err = ev.Err
		m.become(PhaseFailed, 0, Intent{})
	case m.phase == PhaseAborting:
		next := IntentCancel
		if m.fenced {
			next = IntentUnfence
		}
		m.become(PhaseAborting, 0, Intent{Kind: next})
	case m.phase == PhasePrepare:
		m.err = ev.Err
		m.become(PhaseAborted, StageAborted, Intent{})
	case m.fenced:
		m.err = ev.Err
		m.become(PhaseAborting, StageAborting, Intent{Kind: IntentUnfence})
	default:
		m.err = ev.Err
		m.become(PhaseAborting, StageAborting, Intent{Kind: IntentCancel})
	}
	return nil
}

func (m *MergeMachine) become(p Phase, s Stage, in Intent) {
	m.phase = p
	journal := m.ready.Journal
	if s != 0 {
		journal = append(journal, Record{Split: m.id, Kind: KindMerge, Stage: s, Target: m.target, Sources: slices.Clone(m.plan.Sources)})
	}
	m.ready = Ready{Journal: journal, Intent: in}
}
