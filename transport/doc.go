// Package transport carries messages between named nodes: a Message has a
// sender, a recipient, a kind and a JSON body, and Transport.Send hands one
// over for best-effort, one-way delivery. Receiving is a callback (or, in
// the simulation, the scheduler): a node's loop takes delivered messages as
// events, one batch at a time.
//
// Two implementations sit behind Transport:
//
//   - Network, an in-memory network for the deterministic simulation. The
//     scheduler chooses which pending message to deliver, drop or
//     duplicate, and cuts links one way, both ways, or around a node.
//   - HTTP, for processes: each destination has one ordered queue and one
//     goroutine posting it in batches (POST /_transport/messages, a JSON
//     array) over keep-alive connections; the receiving handler hands each
//     batch addressed to its node to a Deliver callback.
//
// # Contract
//
// Send never blocks on the network and never fails: a message may be
// lost, delayed, reordered or duplicated, and every protocol above retries
// what it needs (raft does; replication resends from its retained
// history). What each implementation adds:
//
//   - Network keeps nothing back: every loss, duplicate and delay is a call
//     of the scheduler's (Drop, Duplicate, DropTo, a cut link, the index it
//     delivers), counted per kind by Stats. Same calls, same results.
//   - HTTP loses but never duplicates or reorders: the messages of one
//     destination's queue that arrive, arrive in send order (one request
//     at a time, delivered before it is answered). It loses a message when
//     the destination has no address, its queue is full
//     (DefaultQueueMessages, DefaultQueueBytes), the body exceeds
//     MaxMessageBytes, a request fails (the whole batch; the sender backs
//     off HTTPConfig.Backoff before its next request, other destinations
//     unaffected) or the transport closes. A failed request may still have
//     been delivered (a timeout after the receiver took it): it counts as
//     dropped, and is not resent.
//   - A receiver takes a message only if its To is the receiver's name, so
//     a node restarted under another name at the same port does not take
//     the old node's messages; an empty To (HTTP.SendAddr, discovery of a
//     node whose name is not known yet) is taken by whoever listens.
//   - Send stamps From with the sending node's name and copies the body:
//     the sender may reuse its buffer, and receivers own what they get.
//   - Message.Decode is strict (unknown fields, trailing data and a
//     missing body are a *DecodeError naming the kind).
//   - HTTP listens on loopback only, unless HTTPConfig.AllowNonLoopback.
//     Every request is bounded (dial and total timeouts, a request body
//     limit), and Close stops every goroutine HTTP started.
//
// # Concurrency
//
// Network is not safe for concurrent use, by design: one goroutine (the
// simulation's scheduler) steps the nodes, which send, and delivers. It
// starts no goroutine, reads no clock and draws no random number.
//
// HTTP is safe for concurrent use. Send and SendAddr take a mutex and
// append; a destination's goroutine runs while it has messages queued and
// exits when the queue is empty. Deliver is called from the server's
// connection goroutines, possibly concurrently for different senders, and
// must not block long: it should enqueue into the node's inbox and return.
// Deliver is never called after Close returns.
//
// transport imports nothing of ours.
package transport
