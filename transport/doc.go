// Package transport carries messages between named nodes: a Message has a
// sender, a recipient, a kind and a JSON body, and Transport.Send hands one
// over for best-effort, one-way delivery.
//
// # Contract
//
// Send never blocks on the network and never fails: a message may be
// lost, delayed, reordered or duplicated, and every protocol above retries
// what it needs. Send stamps From with the sending node's name and copies
// the body: the sender may reuse its buffer, and receivers own what they
// get. Message.Decode is strict (unknown fields, trailing data and a
// missing body are a *DecodeError naming the kind).
//
// transport imports nothing of ours.
package transport
