package splitter

import (
	"fmt"
	"slices"

	"github.com/shardsplit/shardsplit/internal/invariants"
	"github.com/shardsplit/shardsplit/routing"
)

// Phase is where a split is.
//
//	          Reserve          CreateChildren       CatchUp (repeat while lag > threshold)
//	Prepare ───────────► Clone ─────────────► CatchUp ◄──────────┐
//	   │                   │                    │  │  drain timed out, retry
//	   │                   │                    │  └──► Handoff ─┘
//	   │                   │                    │          │ CommitTable (commit point)
//	   ▼ failed/cancel     ▼                    ▼          ▼
//	Aborting ◄─────────────┴────────────────────┘       Cleanup ──► Done
//	   │ Cancelled                          (after Publish: a failure fails
//	   ▼                                     the node ──► Failed)
//	Aborted
//
// The handoff is six intents, so that a simulator or a trace can stop
// between any two of them:
//
//	Fence ─► ReplayTail ─► Publish ─► Unfence ─► SyncChildren ─► CommitTable
//
// Fence takes the parent's apply lock (waiting at most the drain bound);
// ReplayTail copies the parent's last writes into the children; Publish
// makes CommitSplit the table requests see, in memory; Unfence releases the
// lock (writers to moved keys now find they are stale and go to the
// children); SyncChildren makes the children's copies durable; CommitTable
// persists the table, the commit point. Before Publish any failure or a
// cancel aborts: the children are deleted and the table goes back to
// routing as before (CancelSplit). Between Publish and CommitTable a
// failure cannot be undone in memory: the node fails and recovery decides
// on reopen. After CommitTable the split can only roll forward: cleanup is
// retried.
type Phase uint8

const (
	PhasePrepare Phase = iota + 1
	PhaseClone
	PhaseCatchUp
	PhaseHandoff
	PhaseCleanup
	PhaseDone
	PhaseAborting
	PhaseAborted
	// PhaseFailed: a published table could not be made durable; the node
	// refuses requests and only a reopen (recovery) decides.
	PhaseFailed
)

var phaseNames = [...]string{
	PhasePrepare: "prepare", PhaseClone: "clone", PhaseCatchUp: "catch-up", PhaseHandoff: "handoff",
	PhaseCleanup: "cleanup", PhaseDone: "done", PhaseAborting: "aborting", PhaseAborted: "aborted",
	PhaseFailed: "failed",
}

func (p Phase) String() string {
	if int(p) < len(phaseNames) && phaseNames[p] != "" {
		return phaseNames[p]
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Terminal reports whether no more transitions can happen.
func (p Phase) Terminal() bool { return p == PhaseDone || p == PhaseAborted || p == PhaseFailed }

// Published reports whether the split has passed its commit point.
func (p Phase) Published() bool { return p == PhaseCleanup || p == PhaseDone }

// IntentKind is an effect the driver must carry out.
type IntentKind uint8

const (
	// IntentReserve applies BeginSplit to the table (child ids and spans).
	IntentReserve IntentKind = iota + 1
	// IntentCreateChildren holds the parent's operation log, then makes the
	// children from the live parent.
	IntentCreateChildren
	// IntentCatchUp replays parent writes after Intent.After into the children.
	IntentCatchUp
	// IntentFence takes the parent's apply lock, waiting at most the drain
	// bound for writes in flight.
	IntentFence
	// IntentReplayTail replays the parent's writes after Intent.After into
	// the children, under the fence, and raises their sequence numbers.
	IntentReplayTail
	// IntentPublish publishes CommitSplit in memory (not yet durable).
	IntentPublish
	// IntentUnfence releases the parent's apply lock.
	IntentUnfence
	// IntentSyncChildren makes the children's writes durable.
	IntentSyncChildren
	// IntentCommitTable persists the published table: the commit point.
	IntentCommitTable
	// IntentCleanup retires the parent.
	IntentCleanup
	// IntentCancel releases the parent's log, deletes the children and
	// applies CancelSplit (of a merge: the sources' logs, the target,
	// CancelMerge).
	IntentCancel
	// IntentBuildTarget (merges) holds every source's operation log, then
	// makes the target from the live sources.
	IntentBuildTarget
	// IntentSyncTarget (merges) makes the target's writes durable.
	IntentSyncTarget
)

var intentNames = [...]string{
	IntentReserve: "reserve", IntentCreateChildren: "create-children", IntentCatchUp: "catch-up",
	IntentFence: "fence", IntentReplayTail: "replay-tail", IntentPublish: "publish", IntentUnfence: "unfence",
	IntentSyncChildren: "sync-children", IntentCommitTable: "commit-table",
	IntentCleanup: "cleanup", IntentCancel: "cancel", IntentBuildTarget: "build-target", IntentSyncTarget: "sync-target",
}

func (k IntentKind) String() string {
	if int(k) < len(intentNames) && intentNames[k] != "" {
		return intentNames[k]
	}
	return fmt.Sprintf("IntentKind(%d)", uint8(k))
}

// NeedsJournal reports whether the journal records that come before the
// intent must be durable before it is carried out: its effect is one that
// recovery must know about (a reservation, children on disk, a handoff that
// may commit). The other intents are carried out even when their records
// could not be written: they release a lock, undo a reservation or retire a
// parent the durable table no longer names, which is safe whatever the
// journal says, and not doing them would be worse (a fenced parent, a full
// disk that retiring the parent would relieve).
func (k IntentKind) NeedsJournal() bool {
	return k == IntentReserve || k == IntentCreateChildren || k == IntentFence || k == IntentBuildTarget
}

// Intent is one effect for the driver.
type Intent struct {
	Kind  IntentKind
	After uint64 // IntentCatchUp, IntentReplayTail: replay parent writes above this sequence number
	// Afters (merges): IntentCatchUp, IntentReplayTail replay the writes of
	// source i above Afters[i], one bound per source.
	Afters []uint64
}

func (i Intent) String() string {
	if i.Kind == IntentCatchUp || i.Kind == IntentReplayTail {
		if i.Afters != nil {
			return fmt.Sprintf("%s after=%v", i.Kind, i.Afters)
		}
		return fmt.Sprintf("%s after=%d", i.Kind, i.After)
	}
	return i.Kind.String()
}

// EventKind is what happened when the driver carried out an intent.
type EventKind uint8

const (
	EventReserved EventKind = iota + 1
	EventCloned
	EventCaughtUp
	EventFenced
	EventDrainTimedOut
	EventTailReplayed
	EventPublished
	EventUnfenced
	EventChildrenSynced
	EventCommitted
	EventCleanedUp
	EventCancelled
	EventFailed
	EventCancelRequested
	EventTargetSynced
)

var eventNames = [...]string{
	EventReserved: "reserved", EventCloned: "cloned", EventCaughtUp: "caught-up", EventFenced: "fenced",
	EventDrainTimedOut: "drain-timed-out", EventTailReplayed: "tail-replayed", EventPublished: "published",
	EventUnfenced: "unfenced", EventChildrenSynced: "children-synced", EventCommitted: "committed",
	EventCleanedUp: "cleaned-up", EventCancelled: "cancelled", EventFailed: "failed",
	EventCancelRequested: "cancel-requested", EventTargetSynced: "target-synced",
}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event reports the outcome of an intent.
type Event struct {
	Kind     EventKind
	Children []routing.ShardID // EventReserved
	Seq      uint64            // EventCloned: S; EventCaughtUp, EventTailReplayed: parent seq covered
	Lag      uint64            // EventCaughtUp: parent writes not yet replayed
	Err      error             // EventFailed
	// Seqs (merges): EventCloned: each source's S_i; EventCaughtUp,
	// EventTailReplayed: each source's sequence number covered.
	Seqs []uint64
}

// Plan is what to split and the protocol's bounds.
type Plan struct {
	Parent routing.ShardID
	Ways   int           // equal children, when Points is empty
	Points []routing.Key // explicit split points
	// LagThreshold: hand off once a catch-up round leaves at most this many
	// parent writes unreplayed (default 256).
	LagThreshold uint64
	// MaxCatchUpRounds: hand off after this many rounds regardless (default 32).
	MaxCatchUpRounds int
	// MaxHandoffs: abort after this many drain timeouts (default 3).
	MaxHandoffs int
}

// Edit returns the BeginSplit edit of the plan.
func (p Plan) Edit() routing.Edit {
	return routing.Edit{Kind: routing.BeginSplit, Shard: p.Parent, Ways: p.Ways, Points: p.Points}
}

// Ready is what the machine wants done next, in raft's order: first make
// Journal durable (in order), then carry out Intent (see
// IntentKind.NeedsJournal for what may proceed when the records could not
// be written). A split that has ended has no intent; it may still have
// records to write.
type Ready struct {
	Journal []Record
	Intent  Intent // Kind 0: nothing to carry out
}

// Machine is the split protocol as a pure state machine in the etcd-raft
// style: Step feeds it an event, Ready says what to persist and what to do
// next, Advance acknowledges that the driver took it. It does no I/O and
// reads no clock, so a seeded simulator can drive it; all transitions are
// in Step's one switch.
//
// INVARIANTS:
//  1. At most one intent is outstanding; a transition replaces it.
//  2. fenced is true exactly between EventFenced and EventUnfenced; while
//     it is, the next intent is ReplayTail, Publish or Unfence.
//  3. caughtUp never decreases, and every catch-up or tail round starts at
//     the sequence number the previous round ended at.
//  4. Every split whose begin record was emitted ends with a done or
//     aborted record (a failed node leaves it to recovery).
type Machine struct {
	id        uint64 // split id, named in every journal record
	plan      Plan
	phase     Phase
	children  []routing.ShardID
	caughtUp  uint64 // parent sequence number replayed into every child
	rounds    int    // catch-up rounds in this attempt
	handoffs  int    // handoff attempts
	fenced    bool   // the parent's apply lock is held
	published bool   // CommitSplit is published in memory
	err       error  // why the split aborted or failed
	ready     Ready
}

// New returns a machine in PhasePrepare whose first intent is to reserve,
// after journaling the begin record of split id.
func New(id uint64, plan Plan) *Machine {
	if plan.LagThreshold == 0 {
		plan.LagThreshold = 256
	}
	if plan.MaxCatchUpRounds == 0 {
		plan.MaxCatchUpRounds = 32
	}
	if plan.MaxHandoffs == 0 {
		plan.MaxHandoffs = 3
	}
	m := &Machine{id: id, plan: plan, phase: PhasePrepare}
	m.become(PhasePrepare, StageBegin, Intent{Kind: IntentReserve})
	return m
}

// ID returns the split id.
func (m *Machine) ID() uint64 { return m.id }

// Phase returns the current phase.
func (m *Machine) Phase() Phase { return m.phase }

// Plan returns the plan.
func (m *Machine) Plan() Plan { return m.plan }

// Children returns the reserved child ids.
func (m *Machine) Children() []routing.ShardID { return slices.Clone(m.children) }

// Err returns why the split aborted or failed, if it did.
func (m *Machine) Err() error { return m.err }

// Fenced reports whether the parent's apply lock is held.
func (m *Machine) Fenced() bool { return m.fenced }

// Ready returns what to persist and do next.
func (m *Machine) Ready() Ready {
	return Ready{Journal: slices.Clone(m.ready.Journal), Intent: m.ready.Intent}
}

// Advance acknowledges that the driver took the ready records and intent:
// they are not offered again.
func (m *Machine) Advance() { m.ready = Ready{} }

// CanCancel reports whether a cancel would be accepted now: before the
// handoff has fenced the parent, and not once the split ended.
func (m *Machine) CanCancel() error {
	switch {
	case m.phase.Terminal():
		return fmt.Errorf("splitter: split %d of shard %d already ended (%s)", m.id, m.plan.Parent, m.phase)
	case m.phase == PhaseAborting:
		return nil // already aborting: accepted, nothing changes
	case m.fenced || m.published || m.phase == PhaseCleanup:
		return fmt.Errorf("splitter: split %d of shard %d cannot be cancelled in phase %s: its handoff has begun", m.id, m.plan.Parent, m.phase)
	}
	return nil
}

// Step applies an event. An event the current phase does not expect is a
// driver bug and returns an error, leaving the machine unchanged.
func (m *Machine) Step(ev Event) error {
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
		m.children = slices.Clone(ev.Children)
		m.become(PhaseClone, StageReserved, Intent{Kind: IntentCreateChildren})
	case from == PhaseClone && ev.Kind == EventCloned:
		m.caughtUp = ev.Seq
		m.become(PhaseCatchUp, 0, Intent{Kind: IntentCatchUp, After: ev.Seq})
	case from == PhaseCatchUp && ev.Kind == EventCaughtUp:
		m.caughtUp, m.rounds = ev.Seq, m.rounds+1
		if ev.Lag <= m.plan.LagThreshold || m.rounds >= m.plan.MaxCatchUpRounds {
			m.handoffs++
			m.become(PhaseHandoff, StageHandoff, Intent{Kind: IntentFence})
		} else {
			m.become(PhaseCatchUp, 0, Intent{Kind: IntentCatchUp, After: m.caughtUp})
		}
	case from == PhaseHandoff && ev.Kind == EventDrainTimedOut:
		// Writes in flight did not drain in time: the parent resumes serving
		// (it never stopped owning its keys) and we try again, or give up.
		if m.handoffs >= m.plan.MaxHandoffs {
			m.err = fmt.Errorf("splitter: drain of in-flight writes timed out %d times", m.handoffs)
			m.become(PhaseAborting, StageAborting, Intent{Kind: IntentCancel})
		} else {
			m.rounds = 0
			m.become(PhaseCatchUp, 0, Intent{Kind: IntentCatchUp, After: m.caughtUp})
		}
	case from == PhaseHandoff && ev.Kind == EventFenced:
		m.fenced = true
		m.become(PhaseHandoff, 0, Intent{Kind: IntentReplayTail, After: m.caughtUp})
	case from == PhaseHandoff && ev.Kind == EventTailReplayed:
		m.caughtUp = ev.Seq
		m.become(PhaseHandoff, 0, Intent{Kind: IntentPublish})
	case from == PhaseHandoff && ev.Kind == EventPublished:
		m.published = true
		m.become(PhaseHandoff, 0, Intent{Kind: IntentUnfence})
	case from == PhaseHandoff && ev.Kind == EventUnfenced:
		m.fenced = false
		m.become(PhaseHandoff, 0, Intent{Kind: IntentSyncChildren})
	case from == PhaseHandoff && ev.Kind == EventChildrenSynced:
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
		return fmt.Errorf("splitter: event %s not expected in phase %s", ev.Kind, from)
	}
	return nil
}

// checkEvent asserts that an event carries what its phase needs and that
// sequence numbers never go back (INVARIANTS 3).
func (m *Machine) checkEvent(ev Event) error {
	switch ev.Kind {
	case EventReserved:
		if len(ev.Children) == 0 {
			return invariants.AssertionFailedf("splitter: split %d: reserved event without children", m.id)
		}
	case EventCaughtUp, EventTailReplayed:
		if m.phase != PhaseClone && ev.Seq < m.caughtUp {
			return invariants.AssertionFailedf("splitter: split %d: %s at seq %d, below %d already replayed", m.id, ev.Kind, ev.Seq, m.caughtUp)
		}
	case EventFailed:
		if ev.Err == nil {
			return invariants.AssertionFailedf("splitter: split %d: failed event without an error", m.id)
		}
	}
	return nil
}

// stepCancel accepts a cancel before the handoff has fenced the parent and
// refuses it after; see CanCancel.
func (m *Machine) stepCancel() error {
	if err := m.CanCancel(); err != nil {
		return err
	}
	switch m.phase {
	case PhaseAborting:
		return nil
	case PhasePrepare:
		// Nothing was reserved: there is nothing to undo.
		m.err = fmt.Errorf("splitter: cancelled")
		m.become(PhaseAborted, StageAborted, Intent{})
	default:
		m.err = fmt.Errorf("splitter: cancelled")
		m.become(PhaseAborting, StageAborting, Intent{Kind: IntentCancel})
	}
	return nil
}

// stepFailed handles a failed intent: before the publish the split aborts
// (unfencing first if it holds the parent); between the publish and the
// commit the node has failed and the split stops; after the commit cleanup
// is retried (roll forward); once aborting, the failed undo is retried.
func (m *Machine) stepFailed(ev Event) error {
	switch {
	case m.phase.Terminal():
		return fmt.Errorf("splitter: %s after the split ended (%s)", ev.Kind, m.phase)
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
		// The reservation was refused or not journaled: nothing to undo,
		// but the begin record needs its end.
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

// become moves to phase p with the given intent ready, after a journal
// record of stage s (0: none). Records and intents not yet taken by the
// driver are dropped: they belonged to the step being left, except records,
// which are kept so that no journal record is skipped.
func (m *Machine) become(p Phase, s Stage, in Intent) {
	m.phase = p
	journal := m.ready.Journal
	if s != 0 {
		journal = append(journal, Record{Split: m.id, Stage: s, Parent: m.plan.Parent, Children: slices.Clone(m.children)})
	}
	m.ready = Ready{Journal: journal, Intent: in}
}
