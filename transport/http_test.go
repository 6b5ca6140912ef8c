package transport

import (
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// inbox collects what an HTTP transport delivers.
type inbox struct {
	mu   sync.Mutex
	msgs []Message
}

func (ib *inbox) deliver(batch []Message) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.msgs = append(ib.msgs, batch...)
}

func (ib *inbox) received() []Message {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	return append([]Message(nil), ib.msgs...)
}

// startHTTP starts a transport named name on a loopback port, delivering
// into a new inbox, and closes it when the test ends.
func startHTTP(t testing.TB, name string, tune func(*HTTPConfig)) (*HTTP, *inbox) {
	t.Helper()
	ib := &inbox{}
	cfg := HTTPConfig{Name: name, Listen: "127.0.0.1:0", Deliver: ib.deliver}
	if tt, ok := t.(*testing.T); ok {
		cfg.Logger = zaptest.NewLogger(tt)
	}
	if tune != nil {
		tune(&cfg)
	}
	h, err := NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Close(%s) = %v", name, err)
		}
	})
	return h, ib
}

// eventually waits, up to 10 s, for cond to hold.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s, still not: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hangingPeer is a listener that reads requests and never answers: a
// peer whose process is stopped (SIGSTOP) or wedged.
type hangingPeer struct {
	ln    net.Listener
	read  chan struct{} // closed once a request's first bytes arrived
	once  sync.Once
	mu    sync.Mutex
	conns []net.Conn
	done  sync.WaitGroup
}

func startHangingPeer(t *testing.T) *hangingPeer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hangingPeer{ln: ln, read: make(chan struct{})}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			p.done.Add(1)
			go func() {
				defer p.done.Done()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					p.once.Do(func() { close(p.read) })
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.done.Wait()
	})
	return p
}

// waitRequest waits, up to 10 s, for a request to reach the peer.
func (p *hangingPeer) waitRequest(t *testing.T) {
	t.Helper()
	select {
	case <-p.read:
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the hanging peer in 10 s")
	}
}

// seq returns message i's sequence number.
func seq(t *testing.T, m Message) int {
	t.Helper()
	var p ping
	if err := m.Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p.Term
}

func TestHTTPDeliversEachSendersMessagesInOrder(t *testing.T) {
	const count = 3000
	a, ina := startHTTP(t, "a", nil)
	b, inb := startHTTP(t, "b", nil)
	a.SetPeer("b", b.Addr())
	b.SetPeer("a", a.Addr())
	for i := range count {
		a.Send(msg(t, "a", "b", "append", ping{Term: i}))
		// b's messages claim another sender: Send stamps b's name.
		b.Send(msg(t, "someone", "a", "ack", ping{Term: i}))
	}
	eventually(t, "every message delivered both ways", func() bool {
		return len(ina.received()) == count && len(inb.received()) == count
	})
	for _, c := range []struct {
		got  []Message
		from string
	}{{inb.received(), "a"}, {ina.received(), "b"}} {
		for i, m := range c.got {
			if m.From != c.from || seq(t, m) != i {
				t.Fatalf("message %d at %s: from %q seq %d, want from %q seq %d", i, m.To, m.From, seq(t, m), c.from, i)
			}
		}
	}
	eventually(t, "the senders counted every message sent", func() bool {
		return a.Stats().Peers["b"].Sent == count && b.Stats().Peers["a"].Sent == count
	})
	if st := a.Stats(); st.Peers["b"].Dropped != 0 || st.Peers["b"].Errors != 0 || st.Received != count {
		t.Errorf("a.Stats() = %+v, want no drops or errors and %d received", st, count)
	}
}

func TestHTTPUnreachablePeerDoesNotBlockOthers(t *testing.T) {
	a, _ := startHTTP(t, "a", func(c *HTTPConfig) { c.RequestTimeout = time.Minute })
	b, inb := startHTTP(t, "b", nil)
	hung := startHangingPeer(t)
	refusing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refusing.Addr().String()
	refusing.Close() // nothing listens there now: connections are refused

	a.SetPeer("hung", hung.ln.Addr().String())
	a.SetPeer("gone", refusedAddr)
	a.SetPeer("b", b.Addr())
	for i := range 5 {
		a.Send(msg(t, "a", "hung", "append", ping{Term: i}))
		a.Send(msg(t, "a", "gone", "append", ping{Term: i}))
		a.Send(msg(t, "a", "nowhere", "append", ping{Term: i})) // no address known
	}
	hung.waitRequest(t)
	for i := range 100 {
		a.Send(msg(t, "a", "b", "append", ping{Term: i}))
	}
	eventually(t, "b received its 100 messages", func() bool { return len(inb.received()) == 100 })
	eventually(t, "the refused batches counted as errors and drops", func() bool {
		st := a.Stats().Peers["gone"]
		return st.Errors >= 1 && st.Dropped == 5
	})
	st := a.Stats()
	if hs := st.Peers["hung"]; hs.Errors != 0 || hs.Sent != 0 {
		t.Fatalf("the hung peer's request ended (%+v) before b's messages arrived: the test shows nothing", hs)
	}
	if ns := st.Peers["nowhere"]; ns.Dropped != 5 || ns.Queued != 0 {
		t.Errorf("Peers[nowhere] = %+v, want 5 dropped at Send (no address)", ns)
	}
	// Close aborts the request that hangs rather than wait out its timeout.
	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with a request hanging, want it aborted", d)
	}
	if hs := a.Stats().Peers["hung"]; hs.Dropped != 5 {
		t.Errorf("after Close, Peers[hung] = %+v, want its 5 messages dropped", hs)
	}
}

func TestHTTPDropsMessagesAddressedToAnotherNode(t *testing.T) {
	a, _ := startHTTP(t, "a", nil)
	b, inb := startHTTP(t, "b", nil)
	// "c" used to listen at b's address: b must not take c's messages.
	a.SetPeer("c", b.Addr())
	a.Send(msg(t, "a", "c", "append", ping{Term: 1}))
	eventually(t, "b counted the misaddressed message", func() bool { return b.Stats().Misaddressed == 1 })
	if got := inb.received(); len(got) != 0 {
		t.Fatalf("b delivered %d messages addressed to c", len(got))
	}
	// Discovery: a message with no recipient name goes to whoever listens.
	a.SendAddr(b.Addr(), Message{Kind: "hello"})
	eventually(t, "b received the discovery message", func() bool { return len(inb.received()) == 1 })
	if m := inb.received()[0]; m.Kind != "hello" || m.From != "a" {
		t.Errorf("discovery message = %+v, want kind hello from a", m)
	}
	if st := a.Stats().Peers["c"]; st.Sent != 1 || st.Errors != 0 {
		t.Errorf("a.Stats().Peers[c] = %+v: the request succeeded, the receiver dropped the message", st)
	}
}

func TestHTTPRejectsMalformedBatch(t *testing.T) {
	b, inb := startHTTP(t, "b", nil)
	for _, body := range []string{`not json`, `[{"from":"a","to":"b","kind":"x","extra":1}]`} {
		resp, err := http.Post("http://"+b.Addr()+Path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s %q = %s, want 400", Path, body, resp.Status)
		}
	}
	if st := b.Stats(); st.Rejected != 2 || len(inb.received()) != 0 {
		t.Errorf("b.Stats() = %+v with %d delivered, want 2 rejected, none delivered", st, len(inb.received()))
	}
}

func TestHTTPFullQueueDropsAndCounts(t *testing.T) {
	for _, c := range []struct {
		name       string
		tune       func(*HTTPConfig)
		body       ping
		sends      int
		wantQueued int
	}{
		{"messages", func(c *HTTPConfig) { c.QueueMessages = 4 }, ping{Term: 10}, 10, 4},
		{"bytes", func(c *HTTPConfig) { c.QueueBytes = 75 }, ping{Term: 10, Note: "1234567890123"}, 10, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, _ := startHTTP(t, "a", c.tune)
			hung := startHangingPeer(t)
			a.SetPeer("hung", hung.ln.Addr().String())
			a.Send(msg(t, "a", "hung", "append", ping{}))
			hung.waitRequest(t) // the sender holds the first message in its request: the queue is empty
			for range c.sends {
				a.Send(msg(t, "a", "hung", "append", c.body))
			}
			st := a.Stats().Peers["hung"]
			if st.Queued != c.wantQueued || st.Dropped != uint64(c.sends-c.wantQueued) {
				t.Errorf("after %d sends into a full queue: %+v, want %d queued and %d dropped",
					c.sends, st, c.wantQueued, c.sends-c.wantQueued)
			}
		})
	}
	t.Run("message too large", func(t *testing.T) {
		a, _ := startHTTP(t, "a", nil)
		a.SetPeer("b", "127.0.0.1:1")
		a.Send(Message{To: "b", Kind: "chunk", Body: make([]byte, MaxMessageBytes+1)})
		if st := a.Stats().Peers["b"]; st.Dropped != 1 || st.Queued != 0 {
			t.Errorf("a message over MaxMessageBytes: %+v, want dropped at Send", st)
		}
	})
}

// waitGoroutines waits, up to 10 s, for the number of goroutines to fall
// to at most n, as connections closed by a Close finish closing.
func waitGoroutines(t *testing.T, n int, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > n; {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines 10 s after %s, %d before:\n%s", runtime.NumGoroutine(), what, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHTTPCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	var closed atomic.Bool
	var lateDeliveries atomic.Int64
	b, inb := startHTTP(t, "b", func(c *HTTPConfig) {
		deliver := c.Deliver
		c.Deliver = func(ms []Message) {
			if closed.Load() {
				lateDeliveries.Add(1)
			}
			deliver(ms)
		}
	})
	beforeA := runtime.NumGoroutine()
	a, err := NewHTTP(HTTPConfig{Name: "a", Listen: "127.0.0.1:0", Deliver: func([]Message) {}, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	a.SetPeer("b", b.Addr())
	b.SetPeer("a", a.Addr())
	for i := range 500 {
		a.Send(msg(t, "a", "b", "append", ping{Term: i}))
		b.Send(msg(t, "b", "a", "ack", ping{Term: i}))
	}
	eventually(t, "b received a's messages", func() bool { return len(inb.received()) == 500 })
	for i := range 500 { // in flight while a closes
		a.Send(msg(t, "a", "b", "append", ping{Term: i}))
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("a second Close = %v, want nil", err)
	}
	a.Send(msg(t, "a", "b", "append", ping{}))
	if st := a.Stats().Peers["b"]; st.Sent+st.Dropped != 1001 || st.Queued != 0 {
		t.Errorf("a.Stats().Peers[b] after Close = %+v, want 1,001 sent or dropped, none queued", st)
	}
	// b still runs, with its end of a's connections open until a closes them.
	waitGoroutines(t, beforeA, "a's Close")

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	closed.Store(true)
	time.Sleep(50 * time.Millisecond)
	if n := lateDeliveries.Load(); n != 0 {
		t.Errorf("Deliver called %d times after Close returned", n)
	}
	waitGoroutines(t, before, "b's Close")
}

func TestNewHTTPRefusesNonLoopbackAddresses(t *testing.T) {
	for _, listen := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:9300", "example.com:9300"} {
		_, err := NewHTTP(HTTPConfig{Name: "a", Listen: listen, Deliver: func([]Message) {}})
		if !errors.Is(err, ErrNotLoopback) {
			t.Errorf("NewHTTP(Listen %q) = %v, want ErrNotLoopback", listen, err)
		}
	}
	for _, listen := range []string{"127.0.0.1:9300", "[::1]:9300", "localhost:9300", "127.0.0.2:9300"} {
		if err := checkLoopback(listen, false); err != nil {
			t.Errorf("checkLoopback(%q) = %v, want nil", listen, err)
		}
	}
	if err := checkLoopback("0.0.0.0:9300", true); err != nil {
		t.Errorf("checkLoopback(0.0.0.0:9300, allowed) = %v, want nil", err)
	}
	if _, err := NewHTTP(HTTPConfig{Name: "a", Listen: "127.0.0.1", Deliver: func([]Message) {}}); err == nil {
		t.Error("NewHTTP(Listen without a port) = nil error")
	}
}

// TestHTTPTellsAPeerUnreachableOnceItRefusesUntilItAnswers: a peer whose
// port refuses connections is unreachable from the failed request on, and
// reachable again once a request to it succeeds; a peer that only hangs is
// not (yet) unreachable: it is slow, not known to be gone.
func TestHTTPTellsAPeerUnreachableOnceItRefusesUntilItAnswers(t *testing.T) {
	a, _ := startHTTP(t, "a", func(c *HTTPConfig) { c.RequestTimeout = time.Minute; c.Backoff = 10 * time.Millisecond })
	hung := startHangingPeer(t)
	refusing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := refusing.Addr().String()
	refusing.Close()
	a.SetPeer("gone", addr)
	a.SetPeer("hung", hung.ln.Addr().String())
	if a.Unreachable("gone") || a.Unreachable("never-sent-to") {
		t.Fatal("a peer never sent to is unreachable")
	}
	a.Send(msg(t, "a", "gone", "append", ping{Term: 1}))
	a.Send(msg(t, "a", "hung", "append", ping{Term: 1}))
	eventually(t, "the refusing peer unreachable", func() bool { return a.Unreachable("gone") })
	hung.waitRequest(t)
	if a.Unreachable("hung") {
		t.Fatal("a peer whose request is still waiting is unreachable")
	}
	// The peer comes back at its address.
	_, inb := startHTTP(t, "gone", func(c *HTTPConfig) { c.Listen = addr })
	for i := 0; a.Unreachable("gone") && i < 1000; i++ {
		a.Send(msg(t, "a", "gone", "append", ping{Term: 2}))
		time.Sleep(10 * time.Millisecond)
	}
	eventually(t, "the peer back reachable", func() bool { return !a.Unreachable("gone") && len(inb.received()) > 0 })
}

// TestHTTPChannelsDoNotHoldBackEachOther: a message on one channel is
// delivered while the peer is still taking a message sent before it on
// another channel (a recovery's file chunk held back the replication
// operations queued behind it); within a channel the order holds.
func TestHTTPChannelsDoNotHoldBackEachOther(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	var got sync.Map
	b, _ := startHTTP(t, "b", func(c *HTTPConfig) {
		c.Deliver = func(batch []Message) {
			for _, m := range batch {
				if m.Kind == "chunk" {
					<-release
				}
				got.Store(m.Kind, true)
			}
		}
	})
	a, _ := startHTTP(t, "a", func(c *HTTPConfig) {
		c.Channel = func(kind string) string {
			if kind == "chunk" {
				return "recovery"
			}
			return ""
		}
	})
	a.SetPeer("b", b.Addr())
	a.Send(msg(t, "a", "b", "chunk", ping{Term: 1}))
	eventually(t, "the chunk posted", func() bool { return a.Stats().Peers["b[recovery]"].Queued == 0 })
	a.Send(msg(t, "a", "b", "append", ping{Term: 2}))
	eventually(t, "the default channel's message delivered while the chunk is held", func() bool {
		_, ok := got.Load("append")
		return ok
	})
	if _, ok := got.Load("chunk"); ok {
		t.Fatal("the chunk was delivered before its release")
	}
	releaseOnce.Do(func() { close(release) })
	eventually(t, "the chunk delivered once released", func() bool {
		_, ok := got.Load("chunk")
		return ok
	})
}
