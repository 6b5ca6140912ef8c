// Package splitter runs the online in-place split of one shard into N
// children.
//
// The protocol is a pure state machine (Machine) in the etcd-raft style:
// Step feeds it an event, Ready lists the intents it wants carried out
// (reserve child ids, create children, catch up, hand off, clean up,
// cancel), Advance acknowledges them. All transitions live in Step's one
// switch; the machine does no I/O and reads no clock, so a seeded simulator
// can drive the same code. Driver carries out the intents against a
// node.Node and reports what the split measured.
//
// Contract: a split either reaches PhaseDone (children own the parent's
// keys, table v+1 published, parent retired) or PhaseAborted (children
// deleted, table routes exactly as before, parent never stopped serving).
// The commit point is the publish of CommitSplit during handoff. The write
// stall is the time the parent's apply lock is held at handoff; the drain of
// in-flight writes before it is bounded by Config.DrainTimeout, past which
// the handoff is abandoned and retried (at most Plan.MaxHandoffs times).
//
// splitter imports routing, storage and node; its machine uses routing only.
package splitter
