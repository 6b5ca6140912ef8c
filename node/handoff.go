package node

import (
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Fence is a shard's apply lock held across the steps of a handoff: taken
// by Node.Fence, released by Release. While it is held no write to the
// shard is applied.
type Fence struct {
	s     *storage.Shard
	clock clock.Clock
	start time.Time
	done  bool
}

// Fence takes shard id's apply lock, waiting at most drain for writes in
// flight (storage.ErrLockTimeout past it). The caller must Release it.
func (n *Node) Fence(id routing.ShardID, drain time.Duration) (*Fence, error) {
	s, ok := n.ShardStore(id)
	if !ok {
		return nil, fmt.Errorf("node: fence: no shard %d", id)
	}
	if err := s.Fence(drain); err != nil {
		return nil, err
	}
	return &Fence{s: s, clock: n.clock, start: n.clock.Now()}, nil
}

// Clock returns the node's clock.
func (n *Node) Clock() clock.Clock { return n.clock }

// Release releases the apply lock and returns how long it was held. A
// second Release does nothing and returns 0.
func (f *Fence) Release() time.Duration {
	if f == nil || f.done {
		return 0
	}
	f.done = true
	held := f.clock.Since(f.start)
	f.s.Unfence()
	return held
}

// Stage writes and syncs the published table's new file, which only
// Install makes the table (it may run while the caller syncs what the
// table points at). A failure fails the node.
func (p *PendingTable) Stage() error {
	if p.done {
		return fmt.Errorf("node: table v%d staged after its commit", p.t.Version())
	}
	p.n.writing.RLock()
	defer p.n.writing.RUnlock()
	// Closed too, not only failed: Close marks a pending table failed only
	// after it has waited for the writes under way (writing), so a Stage
	// that came later could pass a failure check alone and write into a
	// directory that may be another node's by then.
	if err := p.n.editable(); err != nil {
		return p.Fail(err)
	}
	staged, err := p.n.eng.StageFile(tableFile, p.t.Encode())
	if err != nil {
		return p.Fail(err)
	}
	p.staged = staged
	return nil
}

// Install makes the staged table durable (the commit point) and
// acknowledges the writes that waited for it. A failure fails the node.
func (p *PendingTable) Install() error {
	if p.done {
		return fmt.Errorf("node: table v%d committed twice", p.t.Version())
	}
	if p.staged == nil {
		return p.Fail(fmt.Errorf("node: table v%d installed before it was staged", p.t.Version()))
	}
	p.n.writing.RLock()
	defer p.n.writing.RUnlock()
	if err := p.n.editable(); err != nil { // as Stage
		return p.Fail(err)
	}
	if err := p.staged.Install(); err != nil {
		return p.Fail(err)
	}
	p.finish(nil)
	return nil
}

// Fail gives up on the published table: the node fails (every later
// request gets ErrFailed) and the writes that waited for the table are
// answered with the failure. It returns the node's failure.
func (p *PendingTable) Fail(cause error) error {
	if p.done {
		return p.n.failure()
	}
	err := fmt.Errorf("%w: table v%d: %w", ErrFailed, p.t.Version(), cause)
	p.finish(err)
	return err
}

// finish ends the pending table: durable (err nil) or failed.
func (p *PendingTable) finish(err error) {
	p.done = true
	n := p.n
	defer n.publish.Unlock()
	n.commitMu.Lock()
	if err != nil {
		n.failed.Store(&err)
	} else {
		n.durable.Store(p.t)
	}
	close(n.commitCh)
	n.commitCh = make(chan struct{})
	n.commitMu.Unlock()
	if err != nil {
		n.logger.Error("published table not made durable: node failed", zap.Uint64("version", uint64(p.t.Version())), zap.Error(err))
		return
	}
	n.logger.Info("table published", zap.Uint64("version", uint64(p.t.Version())), zap.Stringer("edit", p.e))
}

// Commit makes a published table durable: it runs before (which makes
// durable what the table points at, such as the children's catch-up) while
// the table's new file is staged, then installs the file (the commit
// point), then acknowledges the writes that waited for it. If either step
// fails the node fails (ErrFailed) and Commit says why.
func (p *PendingTable) Commit(before func() error) error {
	var stageErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		stageErr = p.Stage()
	}()
	var err error
	if before != nil {
		err = before()
	}
	wg.Wait()
	switch {
	case stageErr != nil:
		return stageErr
	case err != nil:
		return p.Fail(err)
	}
	return p.Install()
}
