package splitter

import (
	"fmt"
	"slices"

	"github.com/shardsplit/shardsplit/routing"
)

// Phase is where a split is.
//
//	          Reserve          CreateChildren       CatchUp (repeat while lag > threshold)
//	Prepare ───────────► Clone ─────────────► CatchUp ◄──────────┐
//	   │                   │                    │  │  drain timed out, retry
//	   │                   │                    │  └──► Handoff ─┘
//	   │                   │                    │          │ Published (commit point)
//	   ▼ failed/cancel     ▼                    ▼          ▼
//	Aborting ◄─────────────┴────────────────────┘       Cleanup ──► Done
//	   │ Cancelled
//	   ▼
//	Aborted
//
// Before the publish any failure or a cancel aborts: the children are
// deleted and the table goes back to routing as before (CancelSplit). After
// the publish the split can only roll forward: cleanup is retried.
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
)

var phaseNames = [...]string{
	PhasePrepare: "prepare", PhaseClone: "clone", PhaseCatchUp: "catch-up", PhaseHandoff: "handoff",
	PhaseCleanup: "cleanup", PhaseDone: "done", PhaseAborting: "aborting", PhaseAborted: "aborted",
}

func (p Phase) String() string {
	if int(p) < len(phaseNames) && phaseNames[p] != "" {
		return phaseNames[p]
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Terminal reports whether no more transitions can happen.
func (p Phase) Terminal() bool { return p == PhaseDone || p == PhaseAborted }

// Published reports whether the split has passed its commit point.
func (p Phase) Published() bool { return p == PhaseCleanup || p == PhaseDone }

// IntentKind is an effect the driver must carry out.
type IntentKind uint8

const (
	// IntentReserve applies BeginSplit to the table (child ids and spans).
	IntentReserve IntentKind = iota + 1
	// IntentCreateChildren makes the children from the live parent.
	IntentCreateChildren
	// IntentCatchUp replays parent writes after Intent.After into the children.
	IntentCatchUp
	// IntentHandoff fences the parent, replays the tail after Intent.After,
	// makes the children durable and publishes CommitSplit.
	IntentHandoff
	// IntentCleanup retires the parent's moved data.
	IntentCleanup
	// IntentCancel deletes the children and applies CancelSplit.
	IntentCancel
)

var intentNames = [...]string{
	IntentReserve: "reserve", IntentCreateChildren: "create-children", IntentCatchUp: "catch-up",
	IntentHandoff: "handoff", IntentCleanup: "cleanup", IntentCancel: "cancel",
}

func (k IntentKind) String() string {
	if int(k) < len(intentNames) && intentNames[k] != "" {
		return intentNames[k]
	}
	return fmt.Sprintf("IntentKind(%d)", uint8(k))
}

// Intent is one effect for the driver.
type Intent struct {
	Kind  IntentKind
	After uint64 // IntentCatchUp, IntentHandoff: replay parent writes above this sequence number
}

func (i Intent) String() string {
	if i.Kind == IntentCatchUp || i.Kind == IntentHandoff {
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
	EventPublished
	EventDrainTimedOut
	EventCleanedUp
	EventCancelled
	EventFailed
	EventCancelRequested
)

var eventNames = [...]string{
	EventReserved: "reserved", EventCloned: "cloned", EventCaughtUp: "caught-up", EventPublished: "published",
	EventDrainTimedOut: "drain-timed-out", EventCleanedUp: "cleaned-up", EventCancelled: "cancelled",
	EventFailed: "failed", EventCancelRequested: "cancel-requested",
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
	Seq      uint64            // EventCloned: S; EventCaughtUp: parent seq covered
	Lag      uint64            // EventCaughtUp: parent writes not yet replayed
	Err      error             // EventFailed
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

// Machine is the split protocol as a pure state machine in the etcd-raft
// style: Step feeds it an event, Ready lists the intents it wants carried
// out, Advance acknowledges them. It does no I/O and reads no clock, so a
// seeded simulator can drive it; all transitions are in Step's one switch.
type Machine struct {
	plan     Plan
	phase    Phase
	children []routing.ShardID
	caughtUp uint64 // parent sequence number replayed into every child
	rounds   int    // catch-up rounds in this attempt
	handoffs int    // handoff attempts
	err      error  // why the split aborted
	ready    []Intent
}

// New returns a machine in PhasePrepare whose first intent is to reserve.
func New(plan Plan) *Machine {
	if plan.LagThreshold == 0 {
		plan.LagThreshold = 256
	}
	if plan.MaxCatchUpRounds == 0 {
		plan.MaxCatchUpRounds = 32
	}
	if plan.MaxHandoffs == 0 {
		plan.MaxHandoffs = 3
	}
	return &Machine{plan: plan, phase: PhasePrepare, ready: []Intent{{Kind: IntentReserve}}}
}

// Phase returns the current phase.
func (m *Machine) Phase() Phase { return m.phase }

// Plan returns the plan.
func (m *Machine) Plan() Plan { return m.plan }

// Children returns the reserved child ids.
func (m *Machine) Children() []routing.ShardID { return slices.Clone(m.children) }

// Err returns why the split aborted, if it did.
func (m *Machine) Err() error { return m.err }

// CaughtUp returns the parent sequence number replayed into the children.
func (m *Machine) CaughtUp() uint64 { return m.caughtUp }

// Ready returns the intents to carry out, in order.
func (m *Machine) Ready() []Intent { return slices.Clone(m.ready) }

// Advance acknowledges that the driver took the ready intents.
func (m *Machine) Advance() { m.ready = nil }

// Step applies an event. An event the current phase does not expect is a
// driver bug and returns an error, leaving the machine unchanged.
func (m *Machine) Step(ev Event) error {
	from := m.phase
	switch {
	case ev.Kind == EventCancelRequested || ev.Kind == EventFailed:
		return m.stepAbort(ev)
	case from == PhasePrepare && ev.Kind == EventReserved:
		m.children = slices.Clone(ev.Children)
		m.become(PhaseClone, Intent{Kind: IntentCreateChildren})
	case from == PhaseClone && ev.Kind == EventCloned:
		m.caughtUp = ev.Seq
		m.become(PhaseCatchUp, Intent{Kind: IntentCatchUp, After: ev.Seq})
	case from == PhaseCatchUp && ev.Kind == EventCaughtUp:
		m.caughtUp, m.rounds = ev.Seq, m.rounds+1
		if ev.Lag <= m.plan.LagThreshold || m.rounds >= m.plan.MaxCatchUpRounds {
			m.handoffs++
			m.become(PhaseHandoff, Intent{Kind: IntentHandoff, After: m.caughtUp})
		} else {
			m.become(PhaseCatchUp, Intent{Kind: IntentCatchUp, After: m.caughtUp})
		}
	case from == PhaseHandoff && ev.Kind == EventPublished:
		m.become(PhaseCleanup, Intent{Kind: IntentCleanup})
	case from == PhaseHandoff && ev.Kind == EventDrainTimedOut:
		// Writes in flight did not drain in time: the parent resumes serving
		// (it never stopped owning its keys) and we try again, or give up.
		if m.handoffs >= m.plan.MaxHandoffs {
			m.err = fmt.Errorf("splitter: drain of in-flight writes timed out %d times", m.handoffs)
			m.become(PhaseAborting, Intent{Kind: IntentCancel})
		} else {
			m.rounds = 0
			m.become(PhaseCatchUp, Intent{Kind: IntentCatchUp, After: m.caughtUp})
		}
	case from == PhaseCleanup && ev.Kind == EventCleanedUp:
		m.become(PhaseDone)
	case from == PhaseAborting && ev.Kind == EventCancelled:
		m.become(PhaseAborted)
	default:
		return fmt.Errorf("splitter: event %s not expected in phase %s", ev.Kind, from)
	}
	return nil
}

// stepAbort handles a failure or cancel: before the publish the split
// aborts; after it, cleanup is retried (roll forward); once aborting, a
// failed cancel is retried.
func (m *Machine) stepAbort(ev Event) error {
	switch {
	case m.phase.Terminal():
		return fmt.Errorf("splitter: %s after the split ended (%s)", ev.Kind, m.phase)
	case m.phase == PhaseCleanup:
		if ev.Kind == EventCancelRequested {
			return fmt.Errorf("splitter: cannot cancel a published split")
		}
		m.become(PhaseCleanup, Intent{Kind: IntentCleanup})
	case m.phase == PhaseAborting:
		m.become(PhaseAborting, Intent{Kind: IntentCancel})
	case m.phase == PhasePrepare:
		// Nothing was reserved: there is nothing to undo.
		m.err = abortReason(ev)
		m.become(PhaseAborted)
	default:
		m.err = abortReason(ev)
		m.become(PhaseAborting, Intent{Kind: IntentCancel})
	}
	return nil
}

func abortReason(ev Event) error {
	if ev.Kind == EventCancelRequested {
		return fmt.Errorf("splitter: cancelled")
	}
	return ev.Err
}

// become moves to phase p with the given intents ready. Intents not yet
// taken by the driver are dropped: they belonged to the phase being left.
func (m *Machine) become(p Phase, intents ...Intent) {
	m.phase = p
	m.ready = intents
}
