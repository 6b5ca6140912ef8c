package transport

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// msg returns a message of kind with a small JSON body.
func msg(t *testing.T, from, to, kind string, body any) Message {
	t.Helper()
	m, err := NewMessage(from, to, kind, body)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkConservation checks that every message sent or duplicated was
// delivered, dropped or is pending, per kind and in total.
func checkConservation(t *testing.T, n *Network) {
	t.Helper()
	in, out := 0, 0
	for kind, st := range n.Stats() {
		if st.Sent < 0 || st.Delivered < 0 || st.Dropped < 0 || st.Duplicated < 0 {
			t.Fatalf("kind %q: negative count %+v", kind, st)
		}
		in += st.Sent + st.Duplicated
		out += st.Delivered + st.Dropped
	}
	if in != out+n.Pending() {
		t.Fatalf("sent+duplicated = %d, delivered+dropped+pending = %d+%d", in, out, n.Pending())
	}
}

// runNetwork drives a network with faults drawn from seed and returns the
// trace of what the scheduler saw.
func runNetwork(t *testing.T, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 0))
	names := []string{"n1", "n2", "n3", "n4"}
	n := NewNetwork()
	var trace []string
	for step := range 2000 {
		a, b := names[rng.IntN(len(names))], names[rng.IntN(len(names))]
		switch r := rng.IntN(100); {
		case r < 40:
			n.Endpoint(a).Send(msg(t, a, b, fmt.Sprintf("k%d", rng.IntN(3)), ping{Term: step}))
		case r < 70 && n.Pending() > 0:
			m, ok := n.Deliver(rng.IntN(n.Pending()))
			trace = append(trace, fmt.Sprintf("deliver %s→%s %s %s ok=%t", m.From, m.To, m.Kind, m.Body, ok))
		case r < 78 && n.Pending() > 0:
			n.Drop(rng.IntN(n.Pending()))
		case r < 85 && n.Pending() > 0:
			n.Duplicate(rng.IntN(n.Pending()))
		case r < 89:
			n.Cut(a, b)
		case r < 91:
			n.Isolate(a)
		case r < 95:
			n.HealNode(a)
		case r < 97:
			trace = append(trace, fmt.Sprintf("dropto %s %d", a, n.DropTo(a)))
		default:
			n.Heal()
		}
		checkConservation(t, n)
	}
	return append(trace, fmt.Sprint(n.Stats()))
}

func TestNetworkSameCallsSameDeliveries(t *testing.T) {
	first, again := runNetwork(t, 7), runNetwork(t, 7)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Fatalf("two runs of seed 7 differ (-first +again):\n%s", diff)
	}
	if len(first) < 500 {
		t.Fatalf("seed 7 delivered %d messages, want a run that exercises the network", len(first))
	}
	if other := runNetwork(t, 8); cmp.Equal(first, other) {
		t.Fatal("seeds 7 and 8 gave the same trace: the trace does not depend on the calls")
	}
}

func TestCutIsOneWay(t *testing.T) {
	n := NewNetwork()
	n.Cut("n1", "n2")
	n.Endpoint("n1").Send(msg(t, "n1", "n2", "ping", ping{Term: 1}))
	n.Endpoint("n2").Send(msg(t, "n2", "n1", "ping", ping{Term: 2}))
	if n.Pending() != 1 {
		t.Fatalf("Pending() = %d after a send on each side of a one-way cut, want 1", n.Pending())
	}
	m, ok := n.Deliver(0)
	if !ok || m.From != "n2" || m.To != "n1" {
		t.Errorf("Deliver(0) = %s→%s ok=%t, want n2→n1 delivered", m.From, m.To, ok)
	}
	if got, want := n.Stats()["ping"], (KindStats{Sent: 2, Delivered: 1, Dropped: 1}); got != want {
		t.Errorf("Stats()[ping] = %+v, want %+v", got, want)
	}
	if n.Connected("n1", "n2") || !n.Connected("n2", "n1") {
		t.Errorf("Connected(n1,n2), Connected(n2,n1) = %t, %t, want false, true", n.Connected("n1", "n2"), n.Connected("n2", "n1"))
	}
}

func TestCutBothAndIsolateCutBothWays(t *testing.T) {
	for _, c := range []struct {
		name string
		cut  func(n *Network)
		down [][2]string // links that must be cut
		up   [][2]string // links that must stay up
	}{
		{"cut both", func(n *Network) { n.CutBoth("n1", "n2") },
			[][2]string{{"n1", "n2"}, {"n2", "n1"}}, [][2]string{{"n1", "n3"}, {"n3", "n2"}}},
		{"isolate", func(n *Network) { n.Isolate("n1") },
			[][2]string{{"n1", "n2"}, {"n2", "n1"}, {"n1", "n9"}, {"n9", "n1"}}, [][2]string{{"n2", "n3"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := NewNetwork()
			c.cut(n)
			for _, l := range c.down {
				n.Endpoint(l[0]).Send(msg(t, l[0], l[1], "ping", nil))
			}
			if n.Pending() != 0 {
				t.Errorf("%d messages pending on cut links, want 0", n.Pending())
			}
			for _, l := range c.up {
				n.Endpoint(l[0]).Send(msg(t, l[0], l[1], "ping", nil))
			}
			for range c.up {
				if m, ok := n.Deliver(0); !ok {
					t.Errorf("Deliver(%s→%s) not ok on a link that is up", m.From, m.To)
				}
			}
			n.Heal()
			for _, l := range c.down {
				if !n.Connected(l[0], l[1]) {
					t.Errorf("after Heal, %s→%s is still cut", l[0], l[1])
				}
			}
		})
	}
}

func TestCutDropsPendingMessagesAtDelivery(t *testing.T) {
	n := NewNetwork()
	n.Endpoint("n1").Send(msg(t, "n1", "n2", "append", ping{Term: 1}))
	n.Endpoint("n2").Send(msg(t, "n2", "n1", "append", ping{Term: 1}))
	n.Cut("n1", "n2")
	if m, ok := n.Deliver(0); ok {
		t.Errorf("Deliver(0) = %s→%s ok, want dropped: its link was cut while it was pending", m.From, m.To)
	}
	if _, ok := n.Deliver(0); !ok {
		t.Error("Deliver on the reverse link dropped, want delivered")
	}
	if got, want := n.Stats()["append"], (KindStats{Sent: 2, Delivered: 1, Dropped: 1}); got != want {
		t.Errorf("Stats()[append] = %+v, want %+v", got, want)
	}
}

func TestHealLinkKeepsIsolationAndHealNodeLiftsIt(t *testing.T) {
	n := NewNetwork()
	n.Cut("n1", "n2")
	n.Cut("n3", "n4")
	n.Isolate("n1")
	n.HealLink("n1", "n2")
	if n.Connected("n1", "n2") {
		t.Error("HealLink(n1, n2) reconnected an isolated node")
	}
	n.HealNode("n1")
	if !n.Connected("n1", "n2") || !n.Connected("n2", "n1") {
		t.Error("HealNode(n1) left n1 cut from n2")
	}
	if n.Connected("n3", "n4") {
		t.Error("HealNode(n1) restored a link n1 is not on")
	}
}

func TestDropAndDuplicateAreCounted(t *testing.T) {
	n := NewNetwork()
	for i := range 3 {
		n.Endpoint("n1").Send(msg(t, "n1", "n2", "append", ping{Term: i}))
	}
	n.Duplicate(0) // pending: 0 1 2 0'
	n.Drop(1)      // pending: 0 2 0'
	var terms []int
	for n.Pending() > 0 {
		m, ok := n.Deliver(0)
		if !ok {
			t.Fatalf("Deliver dropped %s→%s on a link that is up", m.From, m.To)
		}
		var p ping
		if err := m.Decode(&p); err != nil {
			t.Fatal(err)
		}
		terms = append(terms, p.Term)
	}
	if diff := cmp.Diff([]int{0, 2, 0}, terms); diff != "" {
		t.Errorf("delivered terms (-want +got):\n%s", diff)
	}
	if got, want := n.Stats()["append"], (KindStats{Sent: 3, Delivered: 3, Dropped: 1, Duplicated: 1}); got != want {
		t.Errorf("Stats()[append] = %+v, want %+v", got, want)
	}
}

func TestDropToLosesOnlyThatNodesMessages(t *testing.T) {
	n := NewNetwork()
	for _, to := range []string{"n2", "n3", "n2", "n1", "n2"} {
		n.Endpoint("n1").Send(msg(t, "n1", to, "append", nil))
	}
	if got := n.DropTo("n2"); got != 3 {
		t.Errorf("DropTo(n2) = %d, want 3", got)
	}
	var to []string
	for i := range n.Pending() {
		to = append(to, n.Peek(i).To)
	}
	if diff := cmp.Diff([]string{"n3", "n1"}, to); diff != "" {
		t.Errorf("pending recipients after DropTo(n2) (-want +got):\n%s", diff)
	}
	checkConservation(t, n)
}

func TestNetworkCopiesBodies(t *testing.T) {
	n := NewNetwork()
	buf := []byte(`{"term":1}`)
	n.Endpoint("n1").Send(Message{From: "n1", To: "n2", Kind: "ping", Body: buf})
	copy(buf, `{"term":9}`) // the sender reuses its buffer
	n.Peek(0).Body[9] = 'x' // a scheduler scribbles on what it peeked at
	n.Duplicate(0)
	first, _ := n.Deliver(0)
	first.Body[8] = '7' // the first receiver scribbles on its message
	second, _ := n.Deliver(0)
	if string(first.Body) != `{"term":7}` || string(second.Body) != `{"term":1}` {
		t.Errorf("delivered bodies %s and %s, want {\"term\":7} (changed by its receiver) and {\"term\":1}", first.Body, second.Body)
	}
}

func TestSendStampsTheEndpointsName(t *testing.T) {
	n := NewNetwork()
	n.Endpoint("n1").Send(Message{From: "n3", To: "n2", Kind: "ping"})
	if m, _ := n.Deliver(0); m.From != "n1" {
		t.Errorf("a message sent by n1's endpoint claiming From n3 arrived From %q, want n1", m.From)
	}
}
