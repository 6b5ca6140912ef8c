// Package transport carries messages between named nodes: a Message has a
// sender, a recipient, a kind and a JSON body, and Transport.Send hands one
// over for best-effort, one-way delivery. Receiving is the simulation's
// scheduler: a node's loop takes delivered messages as events.
//
// Network is an in-memory network for the deterministic simulation. The
// scheduler chooses which pending message to deliver, drop or duplicate,
// and cuts links one way, both ways, or around a node.
//
// # Contract
//
// Send never blocks on the network and never fails: a message may be
// lost, delayed, reordered or duplicated, and every protocol above retries
// what it needs (raft does; replication resends from its retained
// history).
//
//   - Network keeps nothing back: every loss, duplicate and delay is a call
//     of the scheduler's (Drop, Duplicate, DropTo, a cut link, the index it
//     delivers), counted per kind by Stats. Same calls, same results.
//   - Send stamps From with the sending node's name and copies the body:
//     the sender may reuse its buffer, and receivers own what they get.
//   - Message.Decode is strict (unknown fields, trailing data and a
//     missing body are a *DecodeError naming the kind).
//
// # Concurrency
//
// Network is not safe for concurrent use, by design: one goroutine (the
// simulation's scheduler) steps the nodes, which send, and delivers. It
// starts no goroutine, reads no clock and draws no random number.
//
// transport imports nothing of ours.
package transport
