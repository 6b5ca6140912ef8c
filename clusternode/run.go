package clusternode

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/transport"
)

// ErrStopped answers a call on a process whose loop has stopped.
var ErrStopped = errors.New("clusternode: the node's loop has stopped")

// drainLimit bounds how many messages and calls one turn of the loop takes
// before it flushes: the batch one fsync per shard covers.
const drainLimit = 4096

// Process runs a Node in a process: one goroutine steps it, taking the
// messages the transport delivered and the calls of request handlers,
// ticking it every tick, and flushing once per turn (so the writes of
// every request that arrived meanwhile share one fsync per shard).
type Process struct {
	n     *Node
	inbox <-chan []transport.Message
	calls chan func(*Node)
	stop  chan struct{}
	done  chan struct{}
	err   error
	// leader is the cluster manager the node knew at its last turn,
	// readable without a turn of the loop.
	leader atomic.Pointer[string]
}

// Inbox is the channel a transport delivers to; its Deliver blocks while
// the loop is behind (backpressure, bounded by the transport's queues).
func Inbox() chan []transport.Message { return make(chan []transport.Message, 1024) }

// Run starts n's loop: it takes messages from inbox, ticks every tick of
// c, and stops (closing n) on Stop.
func Run(n *Node, inbox <-chan []transport.Message, c clock.Clock, tick time.Duration) *Process {
	p := &Process{n: n, inbox: inbox, calls: make(chan func(*Node), 1024), stop: make(chan struct{}), done: make(chan struct{})}
	p.publish()
	go p.loop(clock.Or(c), tick)
	return p
}

func (p *Process) loop(c clock.Clock, tick time.Duration) {
	defer close(p.done)
	t := c.NewTicker(tick)
	defer t.Stop()
	for {
		// A tick that came due goes before more work: the heartbeats,
		// follower checks and resends it drives must not wait behind a
		// backlog of requests, or a node busy serving them is declared
		// left by a cluster manager that stopped hearing it.
		select {
		case <-t.C():
			p.n.Tick()
		default:
		}
		select {
		case <-p.stop:
			p.err = p.n.Close()
			return
		case msgs := <-p.inbox:
			if p.take(msgs, nil, t.C()) {
				p.n.Tick()
			}
		case f := <-p.calls:
			if p.take(nil, f, t.C()) {
				p.n.Tick()
			}
		case <-t.C():
			p.n.Tick()
		}
		p.publish()
	}
}

// publish makes the node's leader readable outside the loop.
func (p *Process) publish() {
	if l := p.n.mgr.Leader(); p.leader.Load() == nil || *p.leader.Load() != l {
		p.leader.Store(&l)
	}
}

// take steps the node with what arrived, then with whatever else is
// waiting, up to drainLimit or until a tick comes due, and flushes once.
// It reports whether it took a tick from tick, which the caller runs.
func (p *Process) take(msgs []transport.Message, f func(*Node), tick <-chan time.Time) (ticked bool) {
drain:
	for n := 0; ; n++ {
		for _, m := range msgs {
			p.n.route(m)
		}
		if f != nil {
			f(p.n)
		}
		if n >= drainLimit {
			break
		}
		select {
		case <-tick:
			ticked = true
			break drain
		default:
		}
		select {
		case msgs = <-p.inbox:
			f = nil
		case f = <-p.calls:
			msgs = nil
		default:
			break drain
		}
	}
	p.n.finish()
	return ticked
}

// Do runs f on the node's loop and returns once it ran.
func (p *Process) Do(f func(*Node)) error {
	ran := make(chan struct{})
	select {
	case p.calls <- func(n *Node) { f(n); close(ran) }:
	case <-p.done:
		return ErrStopped
	}
	select {
	case <-ran:
		return nil
	case <-p.done:
		return ErrStopped
	}
}

// Stop stops the loop and closes the node.
func (p *Process) Stop() error {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	return p.err
}

// call runs a request on the loop and waits for its answer or ctx.
func call[T any](ctx context.Context, p *Process, start func(n *Node, done func(T))) (T, error) {
	var zero T
	ch := make(chan T, 1)
	if err := p.Do(func(n *Node) { start(n, func(v T) { ch <- v }) }); err != nil {
		return zero, err
	}
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-p.done:
		return zero, ErrStopped
	}
}

type docReply struct {
	r   DocResult
	err error
}

// IndexDoc indexes a document through the node (create: refused if it
// exists) and waits for the answer.
func (p *Process) IndexDoc(ctx context.Context, index, id, routing string, source []byte, create bool) (DocResult, error) {
	v, err := call(ctx, p, func(n *Node, done func(docReply)) {
		n.IndexDoc(index, id, routing, source, create, func(r DocResult, err error) { done(docReply{r, err}) })
	})
	if err != nil {
		return DocResult{}, err
	}
	return v.r, v.err
}

// DeleteDoc deletes a document through the node.
func (p *Process) DeleteDoc(ctx context.Context, index, id, routing string) (DocResult, error) {
	v, err := call(ctx, p, func(n *Node, done func(docReply)) {
		n.DeleteDoc(index, id, routing, func(r DocResult, err error) { done(docReply{r, err}) })
	})
	if err != nil {
		return DocResult{}, err
	}
	return v.r, v.err
}

type getReply struct {
	d     Doc
	found bool
	err   error
}

// GetDoc reads a document through the node.
func (p *Process) GetDoc(ctx context.Context, index, id, routing string) (Doc, bool, error) {
	v, err := call(ctx, p, func(n *Node, done func(getReply)) {
		n.GetDoc(index, id, routing, func(d Doc, found bool, err error) { done(getReply{d, found, err}) })
	})
	if err != nil {
		return Doc{}, false, err
	}
	return v.d, v.found, v.err
}

type searchReply struct {
	r   SearchResult
	err error
}

// Search reads the documents of an index that match query through the
// node.
func (p *Process) Search(ctx context.Context, index string, query json.RawMessage, size int) (SearchResult, error) {
	v, err := call(ctx, p, func(n *Node, done func(searchReply)) {
		n.Search(index, query, size, func(r SearchResult, err error) { done(searchReply{r, err}) })
	})
	if err != nil {
		return SearchResult{}, err
	}
	return v.r, v.err
}

// CreateIndex creates an index through the cluster manager.
func (p *Process) CreateIndex(ctx context.Context, name string, settings map[string]string, mappings json.RawMessage, creationDate int64) error {
	v, err := call(ctx, p, func(n *Node, done func(error)) { n.CreateIndex(name, settings, mappings, creationDate, done) })
	if err != nil {
		return err
	}
	return v
}

// DeleteIndex deletes an index through the cluster manager.
func (p *Process) DeleteIndex(ctx context.Context, name string) error {
	v, err := call(ctx, p, func(n *Node, done func(error)) { n.DeleteIndex(name, done) })
	if err != nil {
		return err
	}
	return v
}

// UpdateReplicas sets an index's number_of_replicas.
func (p *Process) UpdateReplicas(ctx context.Context, name string, replicas int) error {
	v, err := call(ctx, p, func(n *Node, done func(error)) { n.UpdateReplicas(name, replicas, done) })
	if err != nil {
		return err
	}
	return v
}

// SplitShard proposes the in-place split of a shard into children and
// waits until it began (or was refused).
func (p *Process) SplitShard(ctx context.Context, index string, shard routing.ShardID, children int) error {
	v, err := call(ctx, p, func(n *Node, done func(error)) { n.SplitShard(index, shard, children, done) })
	if err != nil {
		return err
	}
	return v
}

// CancelSplit proposes the cancel of a split in progress and waits until it
// was applied (or refused).
func (p *Process) CancelSplit(ctx context.Context, index string, shard routing.ShardID, reason string) error {
	v, err := call(ctx, p, func(n *Node, done func(error)) { n.CancelSplit(index, shard, reason, done) })
	if err != nil {
		return err
	}
	return v
}

// CopyStats asks every node to describe its copies.
func (p *Process) CopyStats(ctx context.Context) ([]CopyStat, error) {
	return call(ctx, p, func(n *Node, done func([]CopyStat)) { n.CopyStats(done) })
}

// SentBytes returns the bytes this node sent to other nodes, by kind of
// traffic (Node.SentBytes).
func (p *Process) SentBytes() (TransportBytes, error) {
	var out TransportBytes
	err := p.Do(func(n *Node) { out = n.SentBytes() })
	return out, err
}

// State returns the node's applied cluster state (it does not wait for a
// turn of the loop: states are never modified once applied).
func (p *Process) State() (*cluster.State, error) {
	select {
	case <-p.done:
		return nil, ErrStopped
	default:
	}
	return p.n.mgr.SharedState(), nil
}

// Copies describes the node's copies.
func (p *Process) Copies() ([]CopyInfo, error) {
	var out []CopyInfo
	err := p.Do(func(n *Node) { out = n.Copies() })
	return out, err
}

// Fatal returns why the node cannot take part in its cluster, or nil.
func (p *Process) Fatal() error {
	var err error
	if e := p.Do(func(n *Node) { err = n.Fatal() }); e != nil {
		return e
	}
	return err
}

// Done is closed when the loop stops.
func (p *Process) Done() <-chan struct{} { return p.done }

// Leader returns the name of the cluster manager this node knew at its
// loop's last turn.
func (p *Process) Leader() (string, error) {
	select {
	case <-p.done:
		return "", ErrStopped
	default:
	}
	return *p.leader.Load(), nil
}
