// Package splitter runs the online in-place split of one shard into N
// children, and the online merge of adjacent shards of one root into one
// (MergeMachine, Driver.RunMerge: the same shape, with one catch-up bound
// per source and every source fenced, in id order, at the handoff).
//
// The protocol is a pure state machine (Machine) in the etcd-raft style:
// Step feeds it an event, Ready says what to do next — first the journal
// records to make durable, in order, then one intent (reserve child ids,
// create children, catch up, the six steps of the handoff, clean up,
// cancel) — and Advance acknowledges that the driver took it. All
// transitions live in Step's one switch; the machine does no I/O and reads
// no clock, so a seeded simulator can drive the same code intent by intent.
// Driver carries out the intents against a node.Node and reports what the
// split measured; Split.Next carries out one.
//
// Contract: a split reaches PhaseDone (the children own the parent's keys,
// CommitSplit durable as table v+2 — v+1 was the reservation —, the parent
// retired), PhaseAborted (children deleted, the table routes exactly as
// before, the parent never stopped serving), or PhaseFailed (a published
// table could not be made durable: the node refuses requests and recovery
// decides on reopen). The commit point is the commit-table intent. The
// write stall is the time the parent is fenced (fence to unfence); the
// drain of in-flight writes before the fence is bounded by
// Config.DrainTimeout, past which the handoff is abandoned and retried (at
// most Plan.MaxHandoffs times; if Pebble held those writes in a write
// stall, the retry waits for the stall to end, Config.StallWait). A cancel
// is an event: accepted before the fence, refused after.
//
// Concurrency: a Split's (or Merge's) Next and Cancel may be called from
// different goroutines; a Driver runs one split or merge at a time.
//
// splitter imports routing, storage, node and internal/; its machine uses
// routing only.
package splitter
