package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Path is where an HTTP transport receives batches of messages: a POST
// whose body is a JSON array of Message.
const Path = "/_transport/messages"

// The bounds of the HTTP transport.
const (
	// DefaultQueueMessages and DefaultQueueBytes bound the messages waiting
	// for one destination (HTTPConfig.QueueMessages, QueueBytes): past
	// either, Send drops the message and counts it. At the benchmark's rate
	// (BenchmarkHTTPSend) 4,096 messages are tens of milliseconds of
	// traffic, enough to ride out a scheduling hiccup, not enough to hide a
	// dead peer for long.
	DefaultQueueMessages = 4096
	DefaultQueueBytes    = 64 << 20

	// MaxMessageBytes bounds one message's body; Send drops a larger one
	// (protocols that move files send them in chunks).
	MaxMessageBytes = 16 << 20

	// batchMessages and batchBytes bound one POST; a batch always takes at
	// least one message, so a request body stays under maxRequestBytes.
	batchMessages   = 1024
	batchBytes      = 1 << 20
	maxRequestBytes = 2*MaxMessageBytes + batchBytes
)

// ErrNotLoopback is returned by NewHTTP for a listen address whose host is
// not a loopback address, unless HTTPConfig.AllowNonLoopback is set.
var ErrNotLoopback = errors.New("transport: listen address is not loopback")

// HTTPConfig configures an HTTP transport.
type HTTPConfig struct {
	// Name is this node's name: Send stamps it as From, and the receiver
	// drops a message whose To is another name.
	Name string
	// Listen is the host:port to receive on ("127.0.0.1:0" picks a port).
	Listen string
	// AllowNonLoopback permits a Listen host that is not a loopback
	// address.
	AllowNonLoopback bool
	// Deliver receives each batch of messages addressed to this node. It is
	// called from the server's connection goroutines, possibly at the same
	// time for different senders, and must not block long (enqueue and
	// return). The messages and their bodies are the callee's.
	Deliver func([]Message)
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// QueueMessages and QueueBytes bound each destination's queue
	// (defaults DefaultQueueMessages, DefaultQueueBytes of bodies).
	QueueMessages int
	QueueBytes    int
	// DialTimeout bounds connecting to a peer (default 1 s); RequestTimeout
	// bounds a whole request, on both sides (default 10 s).
	DialTimeout    time.Duration
	RequestTimeout time.Duration
	// Backoff is how long a destination's sender waits after a failed
	// request before it posts again (default 100 ms). The failed batch is
	// dropped; messages queued meanwhile wait.
	Backoff time.Duration
	// Channel names the channel a message of a kind travels on (nil or ""
	// the default one). Each channel to a peer has its own queue and
	// sender, in order within the channel and unordered across channels,
	// as OpenSearch's transport keeps separate connections per type
	// (recovery, bulk, reg, state, ping): a recovery's file chunks
	// queued to a peer do not hold back its replication operations.
	Channel func(kind string) string
}

// HTTP sends messages to other nodes' HTTP transports over net/http and
// receives theirs. See the package doc for its contract.
type HTTP struct {
	cfg    HTTPConfig
	log    *zap.Logger
	ln     net.Listener
	srv    *http.Server
	client *http.Client
	ctx    context.Context // cancelled by Close: aborts requests and back-offs
	cancel context.CancelFunc
	wg     sync.WaitGroup // the server's Serve and every destination's sender

	// handlers counts the receive handlers between their check of closed
	// and their return, so Close can wait for every call of Deliver.
	handlers sync.WaitGroup

	mu     sync.Mutex
	closed bool
	book   map[string]string // node name → address
	dests  map[dest]*queue
	recv   receiveStats
}

// dest is where a queue's messages go: a node by name (Send), resolved in
// the address book at each request, or an address (SendAddr).
type dest struct{ name, addr, channel string }

func (d dest) String() string {
	s := d.addr
	if d.name != "" {
		s = d.name
	}
	if d.channel != "" {
		s += "[" + d.channel + "]"
	}
	return s
}

// channel is the channel of a message of kind.
func (h *HTTP) channel(kind string) string {
	if h.cfg.Channel == nil {
		return ""
	}
	return h.cfg.Channel(kind)
}

// queue holds one destination's messages, in send order, and the counts
// of what became of them. A sender goroutine runs while it has messages.
type queue struct {
	msgs    []Message
	bytes   int  // body bytes in msgs
	running bool // a sender goroutine owns the queue
	failing bool // the last request failed (log the change, not each failure)
	stats   PeerStats
}

// PeerStats counts the messages for one destination.
type PeerStats struct {
	Addr    string // the address of the last request ("" if none was known)
	Queued  int    // waiting now
	Sent    uint64 // in requests the peer answered with success
	Dropped uint64 // no address, queue full, too large, failed request, or Close
	Errors  uint64 // failed requests (each dropped its batch)
}

// HTTPStats counts an HTTP transport's traffic.
type HTTPStats struct {
	// Peers is keyed by node name, or by address for SendAddr's
	// destinations, followed by "[channel]" for a channel not the default.
	Peers map[string]PeerStats
	// Received counts messages handed to Deliver; Misaddressed those dropped
	// because their To named another node; Rejected the requests refused as
	// malformed.
	Received, Misaddressed, Rejected uint64
}

type receiveStats struct{ received, misaddressed, rejected uint64 }

var _ Transport = (*HTTP)(nil)

// NewHTTP listens on cfg.Listen and returns the transport; Close stops it.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	if cfg.Name == "" {
		return nil, errors.New("transport: HTTPConfig.Name is empty")
	}
	if cfg.Deliver == nil {
		return nil, fmt.Errorf("transport: node %q: HTTPConfig.Deliver is nil", cfg.Name)
	}
	if err := checkLoopback(cfg.Listen, cfg.AllowNonLoopback); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("transport: node %q: %w", cfg.Name, err)
	}
	h := &HTTP{
		cfg:   cfg,
		log:   cfg.Logger.With(zap.String("node", cfg.Name)),
		ln:    ln,
		book:  map[string]string{},
		dests: map[dest]*queue{},
		client: &http.Client{
			Timeout: cfg.RequestTimeout,
			Transport: &http.Transport{
				Proxy:               nil, // loopback never goes through a proxy
				DialContext:         (&net.Dialer{Timeout: cfg.DialTimeout}).DialContext,
				MaxIdleConnsPerHost: 2,
				IdleConnTimeout:     30 * time.Second, // under the server's IdleTimeout
				DisableCompression:  true,
			},
		},
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, h.receive)
	h.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: cfg.RequestTimeout,
		ReadTimeout:       cfg.RequestTimeout,
		WriteTimeout:      cfg.RequestTimeout,
		IdleTimeout:       time.Minute,
		ErrorLog:          zap.NewStdLog(h.log),
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		if err := h.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			h.log.Error("transport server stopped", zap.Error(err))
		}
	}()
	return h, nil
}

func (c HTTPConfig) withDefaults() HTTPConfig {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.QueueMessages <= 0 {
		c.QueueMessages = DefaultQueueMessages
	}
	if c.QueueBytes <= 0 {
		c.QueueBytes = DefaultQueueBytes
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.Backoff <= 0 {
		c.Backoff = 100 * time.Millisecond
	}
	return c
}

// checkLoopback refuses a listen address whose host is not loopback
// (an empty host listens on every interface).
func checkLoopback(listen string, allowed bool) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("transport: listen address %q: %w", listen, err)
	}
	if allowed || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%w: %q (set HTTPConfig.AllowNonLoopback to listen there)", ErrNotLoopback, listen)
	}
	return nil
}

// Addr returns the address the transport listens on.
func (h *HTTP) Addr() string { return h.ln.Addr().String() }

// SetPeer records the address of the node name (from the seed hosts or the
// cluster state); an empty addr forgets it. Messages queued for name go to
// the new address.
func (h *HTTP) SetPeer(name, addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if addr == "" {
		delete(h.book, name)
		return
	}
	h.book[name] = addr
}

// Send queues m for the node m.To at its address in the book, stamping
// From with this node's name. It never blocks on the network: with no
// address for m.To, a full queue, a body over MaxMessageBytes or after
// Close, the message is dropped and counted.
func (h *HTTP) Send(m Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := dest{name: m.To, channel: h.channel(m.Kind)}
	if _, ok := h.book[m.To]; !ok {
		h.queue(d).stats.Dropped++
		return
	}
	h.enqueue(d, m)
}

// SendAddr queues m for whatever node listens at addr, for discovery,
// when its name is not known yet: m.To may be empty, and the receiver
// takes a message with an empty To as addressed to it. Otherwise as Send.
func (h *HTTP) SendAddr(addr string, m Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.enqueue(dest{addr: addr, channel: h.channel(m.Kind)}, m)
}

// queue returns d's queue, creating it. h.mu is held.
func (h *HTTP) queue(d dest) *queue { return entry(h.dests, d) }

// enqueue appends a copy of m to d's queue and starts its sender if none
// runs. h.mu is held.
func (h *HTTP) enqueue(d dest, m Message) {
	q := h.queue(d)
	size := len(m.Body)
	if h.closed || size > MaxMessageBytes || len(q.msgs) >= h.cfg.QueueMessages || q.bytes+size > h.cfg.QueueBytes {
		q.stats.Dropped++
		return
	}
	m.From = h.cfg.Name
	q.msgs = append(q.msgs, m.clone())
	q.bytes += size
	if !q.running {
		q.running = true
		h.wg.Add(1)
		go h.sender(d, q)
	}
}

// sender posts d's queue in batches, in order, one request at a time, and
// exits when the queue is empty or the transport closed.
func (h *HTTP) sender(d dest, q *queue) {
	defer h.wg.Done()
	for {
		batch, addr, ok := h.next(d, q)
		if !ok {
			return
		}
		err := h.post(addr, batch)
		if h.settle(d, q, addr, len(batch), err) {
			select {
			case <-h.ctx.Done():
			case <-time.After(h.cfg.Backoff):
			}
		}
	}
}

// next takes the next batch off q with the address to post it to; ok is
// false, and the sender must exit, when there is nothing to send. A batch
// for a name with no address left is dropped.
func (h *HTTP) next(d dest, q *queue) (batch []Message, addr string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		if h.closed || len(q.msgs) == 0 {
			q.running = false
			return nil, "", false
		}
		n, size := 0, 0
		for n < len(q.msgs) && n < batchMessages && (n == 0 || size+len(q.msgs[n].Body) <= batchBytes) {
			size += len(q.msgs[n].Body)
			n++
		}
		batch, q.msgs, q.bytes = q.msgs[:n:n], q.msgs[n:], q.bytes-size
		addr = d.addr
		if d.name != "" {
			addr = h.book[d.name]
		}
		if addr != "" {
			return batch, addr, true
		}
		q.stats.Dropped += uint64(n)
	}
}

// settle counts a request's outcome and reports whether the sender should
// back off.
func (h *HTTP) settle(d dest, q *queue, addr string, n int, err error) (backoff bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q.stats.Addr = addr
	if err == nil {
		q.stats.Sent += uint64(n)
		if q.failing {
			q.failing = false
			h.log.Info("transport peer reachable", zap.Stringer("peer", d), zap.String("addr", addr))
		}
		return false
	}
	q.stats.Errors++
	q.stats.Dropped += uint64(n)
	if !q.failing && !h.closed {
		q.failing = true
		h.log.Warn("transport peer unreachable; dropping its batches until it answers",
			zap.Stringer("peer", d), zap.String("addr", addr), zap.Int("messages", n), zap.Error(err))
	}
	return !h.closed
}

// Unreachable reports whether the last request to the node failed (it
// refused or dropped the connection, or did not answer in time): its
// process is gone or cut off, not merely slow to speak.
func (h *HTTP) Unreachable(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.dests[dest{name: name}]
	return q != nil && q.failing
}

// post sends one batch and waits for the peer's answer.
func (h *HTTP) post(addr string, batch []Message) error {
	body, err := json.Marshal(batch)
	if err != nil {
		return fmt.Errorf("encode batch: %w", err)
	}
	req, err := http.NewRequestWithContext(h.ctx, http.MethodPost, "http://"+addr+Path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	// Read the (empty) body to the end so the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("POST %s at %s: status %s", Path, addr, resp.Status)
	}
	return nil
}

// receive is the handler of Path: it decodes the batch, drops what is
// addressed to another node, and delivers the rest before answering, so
// one sender's batches reach Deliver in order.
func (h *HTTP) receive(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		http.Error(w, "transport: node "+h.cfg.Name+" is closing", http.StatusServiceUnavailable)
		return
	}
	h.handlers.Add(1)
	h.mu.Unlock()
	defer h.handlers.Done()

	var batch []Message
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&batch); err != nil {
		h.mu.Lock()
		h.recv.rejected++
		h.mu.Unlock()
		http.Error(w, fmt.Sprintf("transport: decode batch: %v", err), http.StatusBadRequest)
		return
	}
	kept := batch[:0]
	for _, m := range batch {
		if m.To == h.cfg.Name || m.To == "" {
			kept = append(kept, m)
		}
	}
	h.mu.Lock()
	h.recv.received += uint64(len(kept))
	h.recv.misaddressed += uint64(len(batch) - len(kept))
	h.mu.Unlock()
	if len(kept) > 0 {
		h.cfg.Deliver(kept)
	}
	w.WriteHeader(http.StatusNoContent)
}

// Stats returns the counts per destination and of received messages.
func (h *HTTP) Stats() HTTPStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := HTTPStats{
		Peers:        make(map[string]PeerStats, len(h.dests)),
		Received:     h.recv.received,
		Misaddressed: h.recv.misaddressed,
		Rejected:     h.recv.rejected,
	}
	for d, q := range h.dests {
		ps := q.stats
		ps.Queued = len(q.msgs)
		s.Peers[d.String()] = ps
	}
	return s
}

// Close stops receiving and sending: it drops (and counts) what is queued,
// aborts requests in flight, waits for the handlers running Deliver and for
// every goroutine it started, and closes its connections. Deliver is not
// called after Close returns. Close is idempotent.
func (h *HTTP) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	for _, q := range h.dests {
		q.stats.Dropped += uint64(len(q.msgs))
		q.msgs, q.bytes = nil, 0
	}
	h.mu.Unlock()

	h.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.RequestTimeout)
	defer cancel()
	err := h.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, h.srv.Close())
	}
	h.handlers.Wait()
	h.wg.Wait()
	h.client.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("transport: close node %q: %w", h.cfg.Name, err)
	}
	return nil
}
