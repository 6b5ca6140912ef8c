package splitter

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/shardsplit/shardsplit/internal/invariants"
	"github.com/shardsplit/shardsplit/routing"
)

// Kind is what an operation does with its sources.
type Kind uint8

const (
	// KindSplit moves one source's keys (the parent's) into N new targets
	// (the children). The zero value: every format 1 and 2 journal record
	// is a split's.
	KindSplit Kind = iota
	// KindMerge moves N sources' keys (adjacent leaves of one root) into
	// one new target.
	KindMerge
)

func (k Kind) String() string {
	switch k {
	case KindSplit:
		return "split"
	case KindMerge:
		return "merge"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Plan is what to split or merge and the protocol's bounds. The machine
// and the driver see only its sources and the targets the table reserves
// for them; the kind decides the routing edits and how the targets are
// built.
type Plan struct {
	Kind Kind
	// Sources are the shards whose keys move: a split's one parent, or a
	// merge's adjacent leaves of one root, in any order (the machine keeps
	// them ascending: the order the handoff fences them in).
	Sources []routing.ShardID
	Ways    int           // a split's equal children, when Points is empty
	Points  []routing.Key // a split's explicit split points
	// LagThreshold: hand off once a catch-up round leaves at most this many
	// source writes unreplayed, summed over the sources (default 256).
	LagThreshold uint64
	// MaxCatchUpRounds: hand off after this many rounds regardless (default 32).
	MaxCatchUpRounds int
	// MaxHandoffs: abort after this many drain timeouts (default 3).
	MaxHandoffs int
}

// SplitPlan returns the plan of a split of parent into ways equal
// children, with the default bounds.
func SplitPlan(parent routing.ShardID, ways int) Plan {
	return Plan{Kind: KindSplit, Sources: []routing.ShardID{parent}, Ways: ways}
}

// MergePlan returns the plan of a merge of sources, with the default
// bounds.
func MergePlan(sources ...routing.ShardID) Plan {
	return Plan{Kind: KindMerge, Sources: slices.Clone(sources)}
}

// Parent returns a split's parent, its one source (0 for a plan without
// one: the table refuses its edit).
func (p Plan) Parent() routing.ShardID {
	if len(p.Sources) == 0 {
		return 0
	}
	return p.Sources[0]
}

// Edit returns the edit that reserves the plan's targets: BeginSplit or
// BeginMerge. A split plan names exactly one source.
func (p Plan) Edit() routing.Edit {
	if p.Kind == KindMerge {
		return routing.Edit{Kind: routing.BeginMerge, Sources: slices.Clone(p.Sources)}
	}
	return routing.Edit{Kind: routing.BeginSplit, Shard: p.Parent(), Ways: p.Ways, Points: p.Points}
}

// commitEdit is the edit that makes the targets own the sources' keys.
func (p Plan) commitEdit(targets []routing.ShardID) routing.Edit {
	if p.Kind == KindMerge {
		return routing.Edit{Kind: routing.CommitMerge, Shard: targets[0], Sources: slices.Clone(p.Sources)}
	}
	return routing.Edit{Kind: routing.CommitSplit, Shard: p.Parent(), Children: slices.Clone(targets)}
}

// cancelEdit is the edit that forgets the reservation of targets.
func (p Plan) cancelEdit(targets []routing.ShardID) routing.Edit {
	if p.Kind == KindMerge {
		return routing.Edit{Kind: routing.CancelMerge, Shard: targets[0]}
	}
	return routing.Edit{Kind: routing.CancelSplit, Shard: p.Parent()}
}

// shards names the plan's sources for messages: "shard 3", "shards [2 3]".
func (p Plan) shards() string {
	if p.Kind == KindSplit && len(p.Sources) == 1 {
		return "shard " + strconv.FormatUint(uint64(p.Sources[0]), 10)
	}
	return fmt.Sprintf("shards %v", p.Sources)
}

func (p Plan) String() string { return p.Kind.String() + " of " + p.shards() }

// Phase is where an operation is.
//
//	          Reserve          BuildTargets         CatchUp (repeat while lag > threshold)
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
//	Fence ─► ReplayTail ─► Publish ─► Unfence ─► SyncTargets ─► CommitTable
//
// Fence takes every source's apply lock in ascending id order (each
// waiting at most the drain bound; a timeout on any releases those taken);
// ReplayTail copies the sources' last writes into the targets; Publish
// makes the commit edit (CommitSplit, CommitMerge) the table requests see,
// in memory; Unfence releases the locks (writers to moved keys now find
// they are stale and go to the targets); SyncTargets makes the targets'
// copies durable; CommitTable persists the table, the commit point. Before
// Publish any failure or a cancel aborts: the targets are deleted and the
// table goes back to routing as before (CancelSplit, CancelMerge). Between
// Publish and CommitTable a failure cannot be undone in memory: the node
// fails and recovery decides on reopen. After CommitTable the operation
// can only roll forward: cleanup (retiring the sources) is retried.
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

// Published reports whether the operation has passed its commit point.
func (p Phase) Published() bool { return p == PhaseCleanup || p == PhaseDone }

// IntentKind is an effect the driver must carry out.
type IntentKind uint8

const (
	// IntentReserve applies the plan's begin edit (BeginSplit, BeginMerge):
	// the targets' ids and spans, invisible to routing.
	IntentReserve IntentKind = iota + 1
	// IntentBuildTargets holds every source's operation log, then makes the
	// targets from the live sources (a split's children, a merge's target).
	IntentBuildTargets
	// IntentCatchUp replays each source's writes after its bound in
	// Intent.After into the targets.
	IntentCatchUp
	// IntentFence takes every source's apply lock, waiting at most the
	// drain bound for writes in flight.
	IntentFence
	// IntentReplayTail replays each source's writes after its bound into
	// the targets, under the fence, and raises the targets' sequence
	// numbers above every source's.
	IntentReplayTail
	// IntentPublish publishes the commit edit in memory (not yet durable).
	IntentPublish
	// IntentUnfence releases the sources' apply locks.
	IntentUnfence
	// IntentSyncTargets makes the targets' writes durable.
	IntentSyncTargets
	// IntentCommitTable persists the published table: the commit point.
	IntentCommitTable
	// IntentCleanup retires the sources.
	IntentCleanup
	// IntentCancel releases the sources' logs, deletes the targets and
	// applies the cancel edit (CancelSplit, CancelMerge).
	IntentCancel
)

var intentNames = [...]string{
	IntentReserve: "reserve", IntentBuildTargets: "build-targets", IntentCatchUp: "catch-up",
	IntentFence: "fence", IntentReplayTail: "replay-tail", IntentPublish: "publish", IntentUnfence: "unfence",
	IntentSyncTargets: "sync-targets", IntentCommitTable: "commit-table",
	IntentCleanup: "cleanup", IntentCancel: "cancel",
}

func (k IntentKind) String() string {
	if int(k) < len(intentNames) && intentNames[k] != "" {
		return intentNames[k]
	}
	return fmt.Sprintf("IntentKind(%d)", uint8(k))
}

// NeedsJournal reports whether the journal records that come before the
// intent must be durable before it is carried out: its effect is one that
// recovery must know about (a reservation, targets on disk, a handoff that
// may commit). The other intents are carried out even when their records
// could not be written: they release a lock, undo a reservation or retire
// sources the durable table no longer names, which is safe whatever the
// journal says, and not doing them would be worse (a fenced source, a full
// disk that retiring the sources would relieve).
func (k IntentKind) NeedsJournal() bool {
	return k == IntentReserve || k == IntentBuildTargets || k == IntentFence
}

// Intent is one effect for the driver.
type Intent struct {
	Kind IntentKind
	// After (IntentCatchUp, IntentReplayTail): replay the writes of source
	// i (plan order) above After[i], one bound per source.
	After []uint64
}

func (i Intent) String() string {
	if i.Kind == IntentCatchUp || i.Kind == IntentReplayTail {
		return fmt.Sprintf("%s after=%v", i.Kind, i.After)
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
	EventTargetsSynced
	EventCommitted
	EventCleanedUp
	EventCancelled
	EventFailed
	EventCancelRequested
)

var eventNames = [...]string{
	EventReserved: "reserved", EventCloned: "cloned", EventCaughtUp: "caught-up", EventFenced: "fenced",
	EventDrainTimedOut: "drain-timed-out", EventTailReplayed: "tail-replayed", EventPublished: "published",
	EventUnfenced: "unfenced", EventTargetsSynced: "targets-synced", EventCommitted: "committed",
	EventCleanedUp: "cleaned-up", EventCancelled: "cancelled", EventFailed: "failed",
	EventCancelRequested: "cancel-requested",
}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event reports the outcome of an intent.
type Event struct {
	Kind    EventKind
	Targets []routing.ShardID // EventReserved: the reserved targets
	// Seqs (EventCloned, EventCaughtUp, EventTailReplayed): for each
	// source (plan order), the sequence number whose writes the targets
	// now reflect.
	Seqs []uint64
	Lag  uint64 // EventCaughtUp: source writes not yet replayed, summed over the sources
	Err  error  // EventFailed
}

// Ready is what the machine wants done next, in raft's order: first make
// Journal durable (in order), then carry out Intent (see
// IntentKind.NeedsJournal for what may proceed when the records could not
// be written). An operation that has ended has no intent; it may still
// have records to write.
type Ready struct {
	Journal []Record
	Intent  Intent // Kind 0: nothing to carry out
}

// Machine is the split and merge protocol as a pure state machine in the
// etcd-raft style: Step feeds it an event, Ready says what to persist and
// what to do next, Advance acknowledges that the driver took it. It does
// no I/O and reads no clock, so a seeded simulator can drive it; all
// transitions are in Step's one switch. It sees a plan of sources and the
// targets the reservation names, with one sequence bound per source: a
// split is one source and N targets, a merge N sources and one target.
//
// INVARIANTS:
//  1. At most one intent is outstanding; a transition replaces it.
//  2. fenced is true exactly between EventFenced and EventUnfenced; while
//     it is, the next intent is ReplayTail, Publish or Unfence.
//  3. caughtUp has one bound per source from the clone on; each never
//     decreases, and every catch-up or tail round of a source starts at
//     the sequence number its previous round ended at.
//  4. Every operation whose begin record was emitted ends with a done or
//     aborted record (a failed node leaves it to recovery).
type Machine struct {
	id        uint64 // operation id, named in every journal record
	plan      Plan   // sources ascending
	phase     Phase
	targets   []routing.ShardID
	caughtUp  []uint64 // per source (plan order): sequence number replayed into the targets
	rounds    int      // catch-up rounds in this attempt
	handoffs  int      // handoff attempts
	fenced    bool     // the sources' apply locks are held
	published bool     // the commit edit is published in memory
	err       error    // why the operation aborted or failed
	ready     Ready
}

// New returns a machine in PhasePrepare whose first intent is to reserve,
// after journaling the begin record of operation id.
func New(id uint64, plan Plan) *Machine {
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
	m := &Machine{id: id, plan: plan, phase: PhasePrepare}
	m.become(PhasePrepare, StageBegin, Intent{Kind: IntentReserve})
	return m
}

// ID returns the operation id.
func (m *Machine) ID() uint64 { return m.id }

// Phase returns the current phase.
func (m *Machine) Phase() Phase { return m.phase }

// Plan returns the plan, sources ascending.
func (m *Machine) Plan() Plan { return m.plan }

// Targets returns the reserved targets (none before the reservation).
func (m *Machine) Targets() []routing.ShardID { return slices.Clone(m.targets) }

// CaughtUp returns each source's replayed sequence number.
func (m *Machine) CaughtUp() []uint64 { return slices.Clone(m.caughtUp) }

// Err returns why the operation aborted or failed, if it did.
func (m *Machine) Err() error { return m.err }

// Fenced reports whether the sources' apply locks are held.
func (m *Machine) Fenced() bool { return m.fenced }

// Ready returns what to persist and do next.
func (m *Machine) Ready() Ready {
	rd := Ready{Journal: slices.Clone(m.ready.Journal), Intent: m.ready.Intent}
	rd.Intent.After = slices.Clone(rd.Intent.After)
	return rd
}

// Advance acknowledges that the driver took the ready records and intent:
// they are not offered again.
func (m *Machine) Advance() { m.ready = Ready{} }

// what names the operation in messages: "split 1 of shard 3".
func (m *Machine) what() string {
	return fmt.Sprintf("%s %d of %s", m.plan.Kind, m.id, m.plan.shards())
}

// CanCancel reports whether a cancel would be accepted now: before the
// handoff has fenced the sources, and not once the operation ended.
func (m *Machine) CanCancel() error {
	switch {
	case m.phase.Terminal():
		return fmt.Errorf("splitter: %s already ended (%s)", m.what(), m.phase)
	case m.phase == PhaseAborting:
		return nil // already aborting: accepted, nothing changes
	case m.fenced || m.published || m.phase == PhaseCleanup:
		return fmt.Errorf("splitter: %s cannot be cancelled in phase %s: its handoff has begun", m.what(), m.phase)
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
		m.targets = slices.Clone(ev.Targets)
		m.become(PhaseClone, StageReserved, Intent{Kind: IntentBuildTargets})
	case from == PhaseClone && ev.Kind == EventCloned:
		m.caughtUp = slices.Clone(ev.Seqs)
		m.become(PhaseCatchUp, 0, m.replayIntent(IntentCatchUp))
	case from == PhaseCatchUp && ev.Kind == EventCaughtUp:
		m.caughtUp, m.rounds = slices.Clone(ev.Seqs), m.rounds+1
		if ev.Lag <= m.plan.LagThreshold || m.rounds >= m.plan.MaxCatchUpRounds {
			m.handoffs++
			m.become(PhaseHandoff, StageHandoff, Intent{Kind: IntentFence})
		} else {
			m.become(PhaseCatchUp, 0, m.replayIntent(IntentCatchUp))
		}
	case from == PhaseHandoff && ev.Kind == EventDrainTimedOut:
		// Writes in flight did not drain in time: the sources resume
		// serving (they never stopped owning their keys) and we try again,
		// or give up.
		if m.handoffs >= m.plan.MaxHandoffs {
			m.err = fmt.Errorf("splitter: drain of in-flight writes timed out %d times", m.handoffs)
			m.become(PhaseAborting, StageAborting, Intent{Kind: IntentCancel})
		} else {
			m.rounds = 0
			m.become(PhaseCatchUp, 0, m.replayIntent(IntentCatchUp))
		}
	case from == PhaseHandoff && ev.Kind == EventFenced:
		m.fenced = true
		m.become(PhaseHandoff, 0, m.replayIntent(IntentReplayTail))
	case from == PhaseHandoff && ev.Kind == EventTailReplayed:
		m.caughtUp = slices.Clone(ev.Seqs)
		m.become(PhaseHandoff, 0, Intent{Kind: IntentPublish})
	case from == PhaseHandoff && ev.Kind == EventPublished:
		m.published = true
		m.become(PhaseHandoff, 0, Intent{Kind: IntentUnfence})
	case from == PhaseHandoff && ev.Kind == EventUnfenced:
		m.fenced = false
		m.become(PhaseHandoff, 0, Intent{Kind: IntentSyncTargets})
	case from == PhaseHandoff && ev.Kind == EventTargetsSynced:
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
		return fmt.Errorf("splitter: event %s not expected in phase %s of a %s", ev.Kind, from, m.plan.Kind)
	}
	return nil
}

// replayIntent is a catch-up or tail round from every source's bound.
func (m *Machine) replayIntent(k IntentKind) Intent {
	return Intent{Kind: k, After: slices.Clone(m.caughtUp)}
}

// checkEvent asserts that an event carries what its phase needs and that
// no source's bound goes back (INVARIANTS 3).
func (m *Machine) checkEvent(ev Event) error {
	switch ev.Kind {
	case EventReserved:
		if len(ev.Targets) == 0 || m.plan.Kind == KindMerge && len(ev.Targets) != 1 {
			return invariants.AssertionFailedf("splitter: %s: reserved event with targets %v", m.what(), ev.Targets)
		}
	case EventCloned, EventCaughtUp, EventTailReplayed:
		if len(ev.Seqs) != len(m.plan.Sources) {
			return invariants.AssertionFailedf("splitter: %s: %s with %d bounds for %d sources", m.what(), ev.Kind, len(ev.Seqs), len(m.plan.Sources))
		}
		if ev.Kind != EventCloned && m.caughtUp != nil { // no bounds before the clone: Step refuses the event
			for i, s := range ev.Seqs {
				if s < m.caughtUp[i] {
					return invariants.AssertionFailedf("splitter: %s: %s of source %d at seq %d, below %d already replayed",
						m.what(), ev.Kind, m.plan.Sources[i], s, m.caughtUp[i])
				}
			}
		}
	case EventFailed:
		if ev.Err == nil {
			return invariants.AssertionFailedf("splitter: %s: failed event without an error", m.what())
		}
	}
	return nil
}

// stepCancel accepts a cancel before the handoff has fenced the sources
// and refuses it after; see CanCancel.
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

// stepFailed handles a failed intent: before the publish the operation
// aborts (unfencing first if it holds the sources); between the publish
// and the commit the node has failed and the operation stops; after the
// commit cleanup is retried (roll forward); once aborting, the failed undo
// is retried.
func (m *Machine) stepFailed(ev Event) error {
	switch {
	case m.phase.Terminal():
		return fmt.Errorf("splitter: %s after the %s ended (%s)", ev.Kind, m.plan.Kind, m.phase)
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
		journal = append(journal, Record{ID: m.id, Kind: m.plan.Kind, Stage: s,
			Sources: slices.Clone(m.plan.Sources), Targets: slices.Clone(m.targets)})
	}
	m.ready = Ready{Journal: journal, Intent: in}
}
