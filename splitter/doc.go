// Package splitter runs the online, in-place split of one shard into N
// children and merge of adjacent shards of one root into one, as one
// protocol over a plan of sources and targets: a split is one source (the
// parent) and N targets (the children), a merge N sources and one target,
// with one catch-up bound per source and every source fenced, in id order,
// at the handoff. What differs by kind is small (split.go, merge.go): the
// routing edits, where the table keeps the reservation, and how the
// targets are built (children by checkpoint and excise or keep-all, a
// merge target from the largest source plus the others' documents).
//
// The protocol is a pure state machine (Machine) in the etcd-raft style:
// Step feeds it an event, Ready says what to do next — first the journal
// records to make durable, in order, then one intent (reserve the targets,
// build them, catch up, the six steps of the handoff, clean up, cancel) —
// and Advance acknowledges that the driver took it. All transitions live
// in Step's one switch; the machine does no I/O and reads no clock, so a
// seeded simulator can drive the same code intent by intent. Driver
// carries out the intents against a node.Node; Operation is one split or
// merge in progress, which Driver.Run steps to its end and which a caller
// may step itself, one intent per Next (the service's tasks, the traces,
// the simulation).
//
// Contract: an operation reaches PhaseDone (the targets own the sources'
// keys, the commit edit durable as table v+2 — v+1 was the reservation —,
// the sources retired), PhaseAborted (targets deleted, the table routes
// exactly as before, the sources never stopped serving), or PhaseFailed (a
// published table could not be made durable: the node refuses requests and
// recovery decides on reopen). The commit point is the commit-table
// intent. The write stall is the time the sources are fenced (fence to
// unfence); the drain of in-flight writes before the fence is bounded by
// Config.DrainTimeout, past which the handoff is abandoned and retried (at
// most Plan.MaxHandoffs times; if Pebble held those writes in a write
// stall, the retry waits for the stall to end, Config.StallWait). A cancel
// is an event: accepted before the fence, refused after. Operations run one
// at a time per journal: one that would begin while another is unfinished
// is refused before its begin record is written (UnfinishedError).
//
// Concurrency: an Operation's Next and Cancel may be called from different
// goroutines; a Driver runs one operation at a time, and a refused one may
// be started beside it.
//
// splitter imports routing, storage, node and internal/; its machine uses
// routing only.
package splitter
