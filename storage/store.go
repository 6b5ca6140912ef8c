package storage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// Durability says when a write is acknowledged.
type Durability uint8

const (
	// DurabilityRequest fsyncs the WAL before acknowledging; concurrent
	// writers share fsyncs (Pebble's group commit).
	DurabilityRequest Durability = iota + 1
	// DurabilityAsync acknowledges after the write is in the memtable and
	// fsyncs on an interval, as OpenSearch's translog durability "async".
	DurabilityAsync
)

func (d Durability) String() string {
	switch d {
	case DurabilityRequest:
		return "request"
	case DurabilityAsync:
		return "async"
	}
	return fmt.Sprintf("Durability(%d)", uint8(d))
}

// ParseDurability parses "request" or "async".
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "request":
		return DurabilityRequest, nil
	case "async":
		return DurabilityAsync, nil
	}
	return 0, fmt.Errorf("storage: unknown durability %q (want request or async)", s)
}

// store is one Pebble database: a shard's own store in the per-shard
// layout, or the node's only store in the shared layout.
type store struct {
	dir    string
	db     *pebble.DB
	logger *zap.Logger
	sched  *holdScheduler
	cfs    *cancelFS // cancels the running compactions

	l0StopWrites int // Pebble's L0StopWritesThreshold for this store
	// memStopWrites is the memtables' size at which Pebble stalls writes
	// (MemTableStopWritesThreshold × MemTableSize).
	memStopWrites uint64
	flushes       *flushEvents // its flushes and WAL deletions (AwaitOwnFlush)
	// hist is the retained history of the operations its tables may lack
	// (history.go); kept only by a per-shard store's shard.
	hist *unflushed

	// idEntries: the store may hold an `_id` entry (idindex.go). False
	// only while it holds none: read at open, set before a batch that
	// writes one commits.
	idEntries atomic.Bool

	// unsynced counts the batches committed with a WAL sync their writer
	// waits for (commitSyncNoWait) whose sync has not succeeded yet.
	// Pebble makes a batch readable when it is in the memtable, before
	// its WAL fsync ends (even Apply with Sync publishes first and waits
	// after), so while one is counted a read may see what a power loss
	// takes back: readDurable syncs before such a read returns. A batch
	// whose commit or sync failed stays counted, and walErr keeps the
	// failed sync's error: Pebble's WAL error is sticky, what the
	// memtable holds may never be durable, and every later read fails.
	unsynced atomic.Int64
	walErr   atomic.Pointer[error]

	stopSync chan struct{} // closes the async syncer
	syncDone sync.WaitGroup

	// ops is held (shared) by every write commit and point read while it
	// is in Pebble, and exclusively by close, which sets shut: an operation
	// that passed its shard's closed check can otherwise reach a closed
	// Pebble, which panics ("pebble/record: closed LogWriter").
	ops  sync.RWMutex
	shut bool
	// closed is closed once Pebble is: a flush queued behind a running
	// one then never ends (Pebble's close schedules no flush), and its
	// waiter stops (flushWith).
	closed chan struct{}

	// scans counts the scans with a snapshot open (beginScan/endScan).
	// A scan cannot hold ops across its caller's callback: a callback that
	// reads the same store (a Get) would then block behind a waiting close
	// that waits for the scan. So close first sets closing, which refuses
	// new scans and stops running ones at their next document, and waits
	// for scans to reach zero; only then does it take ops.
	scanMu   sync.Mutex
	scanDone *sync.Cond // signalled when scans reaches zero; L = &scanMu
	scans    int
	closing  atomic.Bool // set under scanMu
}

// beginScan admits a scan (a snapshot or iterator held across callbacks),
// or reports the store closing; the caller calls endScan when its snapshot
// and iterators are closed.
func (s *store) beginScan() bool {
	s.scanMu.Lock()
	defer s.scanMu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.scans++
	return true
}

func (s *store) endScan() {
	s.scanMu.Lock()
	defer s.scanMu.Unlock()
	if s.scans--; s.scans == 0 && s.scanDone != nil {
		s.scanDone.Broadcast()
	}
}

// drainScans refuses new scans, stops running ones at their next
// document and waits until none has a snapshot open.
func (s *store) drainScans() {
	s.scanMu.Lock()
	defer s.scanMu.Unlock()
	s.closing.Store(true)
	if s.scanDone == nil {
		s.scanDone = sync.NewCond(&s.scanMu)
	}
	for s.scans > 0 {
		s.scanDone.Wait()
	}
}

// enter admits an operation into Pebble, or reports the store closed; the
// caller calls exit when done.
func (s *store) enter() bool {
	s.ops.RLock()
	if s.shut {
		s.ops.RUnlock()
		return false
	}
	return true
}

func (s *store) exit() { s.ops.RUnlock() }

// storeOptions are the Pebble options every store shares.
type storeOptions struct {
	fs           vfs.FS
	cache        *pebble.Cache
	fileCache    *pebble.FileCache
	durability   Durability
	syncInterval time.Duration
	logger       *zap.Logger
	clock        clock.Clock
	flushRate    int64 // bytes a second of the flushes a split starts (cancelFS.pace)
	// sib is what the store shares with the other children of its split
	// (CreateChildren): a nil pacer gives it one of its own, nil turns
	// none.
	sib siblings
}

func (o storeOptions) withNopLogger() storeOptions {
	o.logger = zap.NewNop()
	return o
}

// pebbleOptions builds the Pebble options of a store.
//
// NB: FormatNewest is required: Excise needs format major version >= 16 and
// a new store defaults to 13.
//
// Every store with a scheduler gets the 1–2 concurrency range (an unheld
// scheduler still runs one compaction at a time); the scheduler carries the
// hold. A store with a cancelFS (cfs, nil for none) ends its compactions'
// pause when a write stalls.
func (o storeOptions) pebbleOptions(sched *holdScheduler, cfs *cancelFS) *pebble.Options {
	opts := &pebble.Options{
		FS:                 o.fs,
		Cache:              o.cache,
		FileCache:          o.fileCache,
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       16 << 20,
		Logger:             zapPebbleLogger{o.logger.Sugar()},
		Cleaner:            noRecycleCleaner{},
	}
	// Few, large files: a checkpoint costs one link per file, so the time
	// to make a child grows with the file count, not the data size.
	opts.TargetFileSizes[0] = targetFileSize
	if sched != nil {
		opts.Experimental.CompactionScheduler = sched
		opts.CompactionConcurrencyRange = concurrencyRange
	}
	el := pebble.EventListener{}
	if o.logger.Core().Enabled(zap.DebugLevel) {
		// Flushes, compactions, WAL and table-stats events, at debug level:
		// where a store's time goes (how a child's open and a parent's close
		// were found waiting on them).
		el = pebble.MakeLoggingEventListener(zapPebbleLogger{o.logger.Sugar()})
	}
	logger := o.logger
	if sched != nil {
		// NB: every stall unseals, though a compaction ends only the L0
		// one (a memtable-count stall waits for a flush, which no scheduler
		// gates): Pebble reports one WriteStallBegin per stalled write, with
		// the first reason, so a memtable stall that becomes an L0 stall
		// while the write waits is never reported again. Unsealing on the
		// L0 reason alone would leave that write stalled for good.
		stallBegin := el.WriteStallBegin
		el.WriteStallBegin = func(info pebble.WriteStallBeginInfo) {
			sched.unseal() // a sealed child must not stall its own writes
			if cfs != nil {
				cfs.stallBegan() // nor a parent being split (HoldCompactions)
			}
			if stallBegin != nil {
				stallBegin(info)
			}
		}
		if cfs != nil {
			stallEnd := el.WriteStallEnd
			el.WriteStallEnd = func() {
				cfs.stallEnded()
				if stallEnd != nil {
					stallEnd()
				}
			}
		}
	}
	if cfs != nil {
		corruption := el.DataCorruption
		el.DataCorruption = func(info pebble.DataCorruptionInfo) {
			cfs.readFailed(fmt.Errorf("pebble: corruption in %s: %w", info.Path, info.Details)) // a read that returned no data (store.excise)
			if corruption != nil {
				corruption(info)
			}
		}
	}
	el.BackgroundError = func(err error) {
		if errors.Is(err, errStoreRetired) { // a store being destroyed: expected
			logger.Debug("background work of a retired store stopped", zap.Error(err))
			return
		}
		logger.Error("pebble background error", zap.Error(err))
	}
	opts.EventListener = &el
	opts.EnsureDefaults()
	return opts
}

// targetFileSize is the target size of L0 tables; each level below doubles
// it (Pebble's default is 2 MiB).
const targetFileSize = 32 << 20

// openStore opens (or creates) the store in dir. A held store runs only
// urgent compactions until releaseCompactions (see holdScheduler).
func openStore(dir string, o storeOptions, held bool) (*store, error) {
	o.clock = clock.Or(o.clock)
	o.logger = o.logger.With(zap.String("store", filepath.Base(dir)))
	sched := newHoldScheduler(held, o.clock)
	if o.sib.turns != nil {
		o.sib.turns.join(sched)
	}
	pacer := o.sib.pacer
	if pacer == nil {
		pacer = newFlushPacer(o.flushRate)
	}
	cfs := &cancelFS{FS: o.fs, pacer: pacer, dir: dir, onDisk: vfs.Root(o.fs) == vfs.Default}
	o.fs = cfs
	if held {
		// A held store is a new child (CreateChild): the flush of the WAL
		// it copied from its parent is the split's, paced like the
		// parent's.
		defer cfs.pace()()
	}
	popts := o.pebbleOptions(sched, cfs)
	sched.l0Urgent = int32(popts.Experimental.L0CompactionConcurrency)
	var flushes flushEvents
	flushes.listen(popts.EventListener, o.clock.Now)
	hist := &unflushed{}
	hist.listen(popts.EventListener)
	db, err := pebble.Open(dir, popts)
	if err != nil {
		sched.abandon()
		return nil, fmt.Errorf("storage: open store %s: %w", dir, err)
	}
	sched.opened()
	next, err := probeSeq(db)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("storage: open store %s: read its sequence number: %w", dir, err)
	}
	hist.opened(next)
	s := &store{dir: dir, db: db, sched: sched, cfs: cfs, logger: o.logger, l0StopWrites: popts.L0StopWritesThreshold, flushes: &flushes, hist: hist,
		memStopWrites: uint64(popts.MemTableStopWritesThreshold) * popts.MemTableSize, closed: make(chan struct{})}
	// A held store is a new child's checkpoint, whose index its trim reads
	// (trimIDIndex): until then it may hold its parent's entries.
	has := held
	if !held {
		if has, err = hasIDEntries(db); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("storage: open store %s: look for _id entries: %w", dir, err)
		}
	}
	s.idEntries.Store(has)
	if o.durability == DurabilityAsync {
		s.startSyncer(o.syncInterval, o.clock)
	}
	return s, nil
}

// startSyncer fsyncs the WAL every interval (async durability).
func (s *store) startSyncer(interval time.Duration, c clock.Clock) {
	if interval <= 0 {
		interval = 5 * time.Second // OpenSearch's index.translog.sync_interval default
	}
	s.stopSync = make(chan struct{})
	s.syncDone.Add(1)
	t := c.NewTicker(interval) // exists when open returns (a manual clock counts it)
	go func() {
		defer s.syncDone.Done()
		defer t.Stop()
		for {
			select {
			case <-s.stopSync:
				return
			case <-t.C():
				if err := s.db.LogData(nil, pebble.Sync); err != nil && !errors.Is(err, pebble.ErrClosed) {
					s.logger.Warn("periodic wal sync failed", zap.Error(err))
				}
			}
		}
	}()
}

// applySynced commits b and waits for its WAL fsync. A failed fsync comes
// back as an error (Pebble's Apply with Sync treats it as fatal).
func (s *store) applySynced(b *pebble.Batch) error {
	if err := s.commitSyncNoWait(b); err != nil {
		return err
	}
	return s.syncWait(b)
}

// commitSyncNoWait commits b with a WAL sync that the caller waits for
// with syncWait: b is readable on return, and counted in unsynced until
// its sync succeeds.
func (s *store) commitSyncNoWait(b *pebble.Batch) error {
	s.unsynced.Add(1) // before b can be read
	return s.db.ApplyNoSyncWait(b, pebble.Sync)
}

// syncWait waits for the WAL sync of a batch commitSyncNoWait committed.
func (s *store) syncWait(b *pebble.Batch) error {
	if err := b.SyncWait(); err != nil {
		s.walErr.CompareAndSwap(nil, &err)
		return err
	}
	s.unsynced.Add(-1)
	return nil
}

// readDurable makes durable what a read of the store has seen, before the
// read returns it: a read must not return a value that a power loss then
// takes back (a dirty read; a write a reader saw has happened). Called
// after the read (its Get, snapshot or iterator), inside the store's gate
// or a scan: a batch the read saw was counted in unsynced before it could
// be seen, so if none is counted now, every one it saw is durable;
// otherwise a synced empty WAL record covers them all, since Pebble writes
// a batch to the WAL before it makes it readable and syncs the WAL in
// order. Without DurabilityRequest nothing is counted: writes are
// acknowledged before their sync, and a power loss may take back what was
// acknowledged.
func (s *store) readDurable() error {
	if s.unsynced.Load() == 0 {
		return nil
	}
	if err := s.walErr.Load(); err != nil {
		return fmt.Errorf("storage: %s: a WAL sync failed, what the store holds may not be durable: %w", s.dir, *err)
	}
	// Not DB.LogData: Pebble's Apply with Sync calls Fatalf on a failed
	// sync, and a read is no reason to end the process.
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.LogData(nil, nil)
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		return fmt.Errorf("storage: %s: sync what a read saw: %w", s.dir, err)
	}
	if err := b.SyncWait(); err != nil {
		s.walErr.CompareAndSwap(nil, &err)
		return fmt.Errorf("storage: %s: sync what a read saw: %w", s.dir, err)
	}
	return nil
}

// sync makes every write applied so far durable. A store closed meanwhile
// answers ErrShardClosed (its shard's check alone left a window in which
// the close could finish first; Pebble then panics).
func (s *store) sync() error {
	if !s.enter() {
		return fmt.Errorf("storage: sync %s: %w", s.dir, ErrShardClosed)
	}
	defer s.exit()
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("storage: sync %s: %w", s.dir, err)
	}
	return nil
}

func (s *store) close() error { return s.closeThen(nil) }

// retireAndClose closes a store that is being destroyed: once no operation
// is in Pebble, its reads and compaction writes fail (cancelFS.retire), so
// the close waits for no compaction.
func (s *store) retireAndClose() error { return s.closeThen(s.cfs.retire) }

// closeThen closes the store, calling shut (if set) once no operation is in
// Pebble and none can enter.
func (s *store) closeThen(shut func()) error {
	s.drainScans() // a scan's open snapshot would leak into a closed Pebble
	s.ops.Lock()   // waits for the operations in Pebble
	s.shut = true
	s.ops.Unlock()
	if shut != nil {
		shut()
	}
	s.cfs.resume() // Close waits for running compactions: none may stay paused
	if s.stopSync != nil {
		close(s.stopSync)
		s.syncDone.Wait()
		s.stopSync = nil
	}
	err := s.db.Close()
	close(s.closed)
	if err != nil {
		return fmt.Errorf("storage: close %s: %w", s.dir, err)
	}
	// The WAL deletions parked during a split (waldefer.go), also a
	// retired store's (its directory's removal would free them too).
	if err := s.cfs.releaseWALDeletes(); err != nil {
		s.logger.Warn("obsolete WALs left for the next open to delete", zap.Error(err))
	}
	return nil
}

// excise removes a key range in O(metadata): whole files leave the
// manifest, boundary files become virtual.
//
// An excise during which a read of the store failed is an error
// (ErrExciseUnverified), though Pebble returned nil: to cut a table that
// straddles the range, Pebble seeks in it for the last key before the range
// and the first key after, and a seek that fails reads as "no key on this
// side" (v2.1.7 excise.go, determineLeftTableBounds and
// determineRightTableBounds check the range-deletion seek's error but not
// the point seek's). That side of the table is then dropped with the range,
// and the documents the excise should keep are gone from this store
// (simulation seed 274; TestAReadErrorDuringAnExciseFailsIt). Every caller
// excises a store that serves no one yet (a split's child, a merge target
// made from its largest source's checkpoint, a resize's target), so
// failing throws the store away and its source still has every document.
// A read that failed on another goroutine during the excise fails it too:
// safe, and only on a failing disk.
//
// An excise that overlaps unflushed writes is queued behind them (a
// flushable ingest) and cuts the tables when it is flushed: then the
// excise flushes, so that the cut happens inside the window watched.
func (s *store) excise(start, end []byte) error {
	if !s.enter() { // a closed Pebble panics
		return fmt.Errorf("storage: excise [%x, %x) from %s: %w", start, end, s.dir, ErrShardClosed)
	}
	failed := s.cfs.readFailures.Load()
	err := s.db.Excise(context.Background(), pebble.KeyRange{Start: start, End: end})
	queued := err == nil && s.db.Metrics().MemTable.Count > 1 // the excise among them, maybe
	s.exit()                                                  // before the flush, which enters by itself
	if err != nil {
		return fmt.Errorf("storage: excise [%x, %x) from %s: %w", start, end, s.dir, err)
	}
	if queued {
		if err := s.flush(); err != nil {
			return fmt.Errorf("storage: excise [%x, %x) from %s: flush it: %w", start, end, s.dir, err)
		}
	}
	if n := s.cfs.readFailures.Load() - failed; n > 0 {
		return fmt.Errorf("storage: excise [%x, %x) from %s: %d reads failed while it ran (the last: %w): %w", start, end, s.dir, n, s.cfs.lastReadFailure(), ErrExciseUnverified)
	}
	return nil
}

// ErrExciseUnverified says a read of the store failed while an excise ran,
// so the excise may have dropped documents outside its range: the store
// must be discarded (see store.excise).
var ErrExciseUnverified = errors.New("storage: a read failed during the excise, which may have dropped documents it keeps; the store must be rebuilt")

// compact runs a manual compaction of [start, end). A sealed child is
// unsealed first: someone waits for this compaction, and a sealed
// scheduler would never grant it; a held one grants it at once (see
// holdScheduler.beginManual). The caller is inside the store's gate
// (enter): a closed Pebble panics.
func (s *store) compact(ctx context.Context, start, end []byte, parallelize bool) error {
	s.sched.beginManual()
	defer s.sched.endManual()
	return s.db.Compact(ctx, start, end, parallelize)
}

// deleteRangeAndCompact removes a key range the classic way: a range
// tombstone, then a compaction that rewrites the boundary files.
func (s *store) deleteRangeAndCompact(start, end []byte) error {
	if !s.enter() {
		return fmt.Errorf("storage: delete range from %s: %w", s.dir, ErrShardClosed)
	}
	defer s.exit()
	if err := s.db.DeleteRange(start, end, pebble.Sync); err != nil {
		return fmt.Errorf("storage: delete range from %s: %w", s.dir, err)
	}
	if err := s.compact(context.Background(), start, end, true); err != nil {
		return fmt.Errorf("storage: compact %s: %w", s.dir, err)
	}
	return nil
}

// metrics returns Pebble's metrics of the store, or ErrShardClosed.
//
// NB: inside the gate. A closed DB's Metrics reads the engine's file
// cache, which Engine.Close releases, and a read beside the release
// panicked ("index out of range [15] with length 0" in the cache's
// Metrics: TestSplitFlushDecisionRacingClose).
func (s *store) metrics() (*pebble.Metrics, error) {
	if !s.enter() {
		return nil, fmt.Errorf("storage: metrics of %s: %w", s.dir, ErrShardClosed)
	}
	defer s.exit()
	return s.db.Metrics(), nil
}

// bytesWritten is the table and blob bytes written to the store since
// open: flushes, compactions, and ingested tables (a merge target's copied
// side). The WAL is not counted: flushes write the same data again.
func (s *store) bytesWritten() uint64 {
	m, err := s.metrics()
	if err != nil {
		return 0 // closed: nothing more is written
	}
	t := m.Total()
	return t.TableBytesFlushed + t.TableBytesCompacted + t.TableBytesIngested + t.BlobBytesFlushed + t.BlobBytesCompacted
}

// noRecycleCleaner deletes obsolete files like Pebble's default cleaner,
// and by claiming to need file contents it turns off WAL recycling.
//
// NB: a checkpoint copies the store's live WAL files whole. A recycled WAL
// keeps the length of the file it replaced, so after a bulk load the copy
// was a 15 MiB file holding a few KiB of records (11 % of a 134 MiB parent,
// measured). Without recycling the live WAL is only as long as what was
// written to it since the last flush.
//
// The embedding does it without naming Pebble's internal FileType: Clean
// comes from DeleteCleaner at depth one and shadows ArchiveCleaner's, and
// the unexported marker method Pebble checks for comes from ArchiveCleaner
// at depth two.
type noRecycleCleaner struct {
	pebble.DeleteCleaner
	needsContents
}

type needsContents struct{ pebble.ArchiveCleaner }

// zapPebbleLogger routes Pebble's own log lines to zap.
type zapPebbleLogger struct{ s *zap.SugaredLogger }

func (l zapPebbleLogger) Infof(format string, args ...any)  { l.s.Debugf(format, args...) }
func (l zapPebbleLogger) Errorf(format string, args ...any) { l.s.Errorf(format, args...) }
func (l zapPebbleLogger) Fatalf(format string, args ...any) { l.s.Fatalf(format, args...) }

// flushWouldStall reports whether a flush forced now would stall the
// store's writers, or bring them to the brink: Pebble checks a forced
// flush like a write that needs a new memtable, and at an L0 read
// amplification of L0StopWritesThreshold it waits, commit pipeline held,
// for a compaction to lower it. One sublevel short counts too: the flush
// adds the sublevel that stops the next memtable's writers.
//
// NB: Pebble also stalls it while an older memtable waits for its flush
// (MemTableStopWritesThreshold); that wait is bounded by one flush and is
// not avoided here.
func (s *store) flushWouldStall(m *pebble.Metrics) bool {
	return int(m.Levels[0].Sublevels) >= s.l0StopWrites-1
}

// flush flushes the store's memtable and waits for it, as DB.Flush does,
// but a failed attempt ends the wait with its error.
//
// Why: Pebble retries a failed flush at once and without a limit
// (DB.flush, v2.1.7), and DB.Flush waits until one succeeds, so a store
// whose table writes fail for good held the caller for good: a split, in
// its forced flush, with the parent's log and compactions held
// (TestAFailedForcedFlushFailsTheSplit). Pebble goes on retrying in the
// background; the caller gets the error and can give up cleanly.
func (s *store) flush() error { return s.flushWith(nil) }

// flushWith is flush, calling rotated (if not nil) once DB.AsyncFlush has
// returned: the memtable and its WAL are rotated then, and Pebble's commit
// pipeline, which AsyncFlush holds throughout, admits writes again.
func (s *store) flushWith(rotated func()) error {
	// While the store's flushes fail, AsyncFlush may never return: its
	// memtable rotation waits, holding the commit pipeline, until the
	// queued memtables are below Pebble's stop-writes size, which only a
	// successful flush brings about (TestAFailedForcedFlushFailsTheSplit-
	// AtTheMemtableLimit). Our memtable cannot flush before the one
	// Pebble is retrying anyway: fail now. Only at that size: below it the
	// last failure may be stale (a failed flush Pebble has not retried
	// since, the disk healthy again), and the simulation's liveness phase
	// found splits refused on one with no fault injected (3 of 3000 seeds).
	//
	// A closed Pebble panics in AsyncFlush: a store closed under its
	// caller (a resize's source shard destroyed behind its node,
	// TestAFailedResizeLeavesNoTarget) is an error.
	if !s.enter() {
		return fmt.Errorf("storage: flush %s: %w", s.dir, ErrShardClosed)
	}
	if err := s.flushes.failingNow(); err != nil && s.db.Metrics().MemTable.Size >= s.memStopWrites {
		s.exit()
		return err
	}
	failed, _ := s.flushes.failures()
	flushed, err := s.db.AsyncFlush()
	s.exit()
	if err != nil {
		return err
	}
	if rotated != nil {
		rotated()
	}
	for {
		changed := s.flushes.changed()
		select {
		case <-flushed:
			return nil
		default:
		}
		if n, err := s.flushes.failures(); n != failed {
			return err // the callers say which store
		}
		select {
		case <-flushed:
			return nil
		case <-changed:
		case <-s.closed:
			select {
			case <-flushed: // the close waited for it
				return nil
			default:
				return fmt.Errorf("storage: flush %s: the store closed before its memtable was flushed: %w", s.dir, ErrShardClosed)
			}
		}
	}
}

// splitProbeFile is the file probeCreate creates and removes.
const splitProbeFile = "SPLIT-PROBE"

// probeCreate creates a file in the store's directory, through the store's
// filesystem as Pebble would, and removes it: an error says Pebble could
// not create a new WAL either. Nothing is synced; a crash may leave the
// file, which no one reads (the next probe truncates it, a store's
// removal takes it).
func (s *store) probeCreate() error {
	name := s.cfs.PathJoin(s.dir, splitProbeFile)
	f, err := s.cfs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("storage: %s: cannot create a file: %w", s.dir, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("storage: %s: close %s: %w", s.dir, name, err)
	}
	if err := s.cfs.Remove(name); err != nil {
		return fmt.Errorf("storage: %s: remove %s: %w", s.dir, name, err)
	}
	return nil
}
