package transport

import (
	"fmt"
	"slices"
)

// Network is an in-memory network for a deterministic simulation. Sends
// append to a list of pending messages; the scheduler picks which pending
// message to deliver, drop or duplicate (by index, from its seed), so delay
// and reordering are its choices, and Network only carries out faults:
// lost messages, duplicates, and cut links (one-way, both ways, or a node
// isolated from everyone).
//
// Every message is counted by kind (Stats); at any moment, per kind,
//
//	Sent + Duplicated = Delivered + Dropped + pending
//
// Network starts no goroutine, reads no clock and draws no random number:
// the same sequence of calls gives the same results. It is not safe for
// concurrent use: the scheduler and the nodes it steps share one goroutine
// (a Send from another goroutine is a bug the race detector reports).
type Network struct {
	pending  []Message
	cut      map[link]bool   // one-way links cut by Cut or CutBoth
	isolated map[string]bool // nodes cut from everyone, both ways
	stats    map[string]*KindStats
}

// link is the one-way path from one node to another.
type link struct{ from, to string }

// KindStats counts the messages of one kind.
type KindStats struct {
	Sent       int // Send calls, including those dropped at once on a cut link
	Delivered  int // handed to the scheduler by Deliver
	Dropped    int // lost: on a cut link (at Send or Deliver), by Drop or by DropTo
	Duplicated int // extra copies made by Duplicate
}

// NewNetwork returns a network with no pending messages and every link up.
func NewNetwork() *Network {
	return &Network{cut: map[link]bool{}, isolated: map[string]bool{}, stats: map[string]*KindStats{}}
}

// Endpoint returns the Transport of the node name: its Send stamps From
// with name and appends a copy of the message to the pending list, or drops
// it if the link to m.To is cut.
func (n *Network) Endpoint(name string) Transport { return endpoint{n: n, name: name} }

type endpoint struct {
	n    *Network
	name string
}

func (e endpoint) Send(m Message) {
	m.From = e.name
	st := e.n.kind(m.Kind)
	st.Sent++
	if e.n.isCut(m.From, m.To) {
		st.Dropped++
		return
	}
	e.n.pending = append(e.n.pending, m.clone())
}

// Pending returns the number of messages sent and not yet delivered or
// dropped.
func (n *Network) Pending() int { return len(n.pending) }

// Peek returns a copy of the i-th pending message (0 <= i < Pending()),
// leaving it pending.
func (n *Network) Peek(i int) Message { return n.at(i).clone() }

// Deliver removes the i-th pending message and returns it; the scheduler
// delivers it by stepping the receiving node. If the message's link was
// cut after it was sent, it is dropped instead: Deliver returns it with
// ok false, for the scheduler's trace, and the receiver must not see it.
// The order of the other pending messages is kept.
func (n *Network) Deliver(i int) (m Message, ok bool) {
	m = n.remove(i)
	st := n.kind(m.Kind)
	if n.isCut(m.From, m.To) {
		st.Dropped++
		return m, false
	}
	st.Delivered++
	return m, true
}

// Drop loses the i-th pending message.
func (n *Network) Drop(i int) {
	m := n.remove(i)
	n.kind(m.Kind).Dropped++
}

// Duplicate appends a copy of the i-th pending message to the pending list
// (the original stays where it is).
func (n *Network) Duplicate(i int) {
	m := n.at(i)
	n.kind(m.Kind).Duplicated++
	n.pending = append(n.pending, m.clone())
}

// DropTo loses every pending message to the node name (its process died:
// what was in its socket buffers is gone) and returns how many.
func (n *Network) DropTo(name string) int {
	kept := n.pending[:0]
	dropped := 0
	for _, m := range n.pending {
		if m.To != name {
			kept = append(kept, m)
			continue
		}
		n.kind(m.Kind).Dropped++
		dropped++
	}
	clear(n.pending[len(kept):]) // release the dropped bodies
	n.pending = kept
	return dropped
}

// Cut cuts the one-way link from one node to another: messages sent on it
// are dropped, at Send or, if already pending, at Deliver. The reverse
// link is untouched.
func (n *Network) Cut(from, to string) { n.cut[link{from, to}] = true }

// CutBoth cuts the links between a and b in both directions.
func (n *Network) CutBoth(a, b string) {
	n.Cut(a, b)
	n.Cut(b, a)
}

// Isolate cuts the node name from every other node, both ways, including
// nodes that have not sent anything yet.
func (n *Network) Isolate(name string) { n.isolated[name] = true }

// HealLink restores the one-way link from one node to another cut by Cut
// or CutBoth. It does not lift an isolation (HealNode, Heal).
func (n *Network) HealLink(from, to string) { delete(n.cut, link{from, to}) }

// HealNode lifts the isolation of the node name and restores every link
// cut to or from it.
func (n *Network) HealNode(name string) {
	delete(n.isolated, name)
	for l := range n.cut {
		if l.from == name || l.to == name {
			delete(n.cut, l)
		}
	}
}

// Heal restores every link and lifts every isolation.
func (n *Network) Heal() {
	clear(n.cut)
	clear(n.isolated)
}

// Connected reports whether a message sent from one node to another now
// would be kept.
func (n *Network) Connected(from, to string) bool { return !n.isCut(from, to) }

// Stats returns the counts per message kind.
func (n *Network) Stats() map[string]KindStats {
	out := make(map[string]KindStats, len(n.stats))
	for k, st := range n.stats {
		out[k] = *st
	}
	return out
}

func (n *Network) isCut(from, to string) bool {
	return n.cut[link{from, to}] || n.isolated[from] || n.isolated[to]
}

func (n *Network) kind(kind string) *KindStats { return entry(n.stats, kind) }

// entry returns m[k], adding a zero value first if k is absent.
func entry[K comparable, V any](m map[K]*V, k K) *V {
	v, ok := m[k]
	if !ok {
		v = new(V)
		m[k] = v
	}
	return v
}

// at returns the i-th pending message, panicking with the bounds if i is
// out of range: the scheduler chose an index that does not exist.
func (n *Network) at(i int) Message {
	if i < 0 || i >= len(n.pending) {
		panic(fmt.Sprintf("transport: pending message %d of %d", i, len(n.pending)))
	}
	return n.pending[i]
}

func (n *Network) remove(i int) Message {
	m := n.at(i)
	n.pending = slices.Delete(n.pending, i, i+1)
	return m
}
