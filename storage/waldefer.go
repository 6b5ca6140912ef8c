package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
)

// walDeletes parks the deletion of a store's obsolete WAL files while the
// store is being split, so that no unlink lands among the split's steps.
//
// Why: the split's forced flush of the parent makes the flushed memtable's
// WAL obsolete, and Pebble unlinks it in the background ~10 ms later, in
// the middle of the split. On this machine's filesystem (mounted with
// discard) an unlink delays the fsyncs of the writers' group commits beside
// it by 6–12 ms: at the request, the longest gap of a split's window sat
// where the flush ended (five probe runs at 100 MiB,
// design/2026-11-30-split-scale.md). Pebble's WAL recycling takes the
// unlink away too, and shortened those stalls in probes, but it makes every
// live WAL as long as the file it replaced (checkpoints copied the stale
// tail) and it lengthened the 4 GiB stall in question 11's own runs, so it
// is off.
//
// A parked file is only a file Pebble no longer needs: Pebble deletes a
// WAL once the flush that made it obsolete is in the MANIFEST, and numbers
// WALs without reuse. If the split commits, the parent's retirement
// deletes them, after the handoff; if it is cancelled, the release deletes
// them; if the process dies, Pebble's next open deletes every WAL below
// the MANIFEST's oldest unflushed one.
//
// The unlink still happens, after the handoff: removing a retired parent's
// directory took 14–43 ms with it against 4–9 ms without (ten alternated
// probe pairs at 100 MiB and 4 GiB). Freeing the file's preallocated
// blocks in steps first (as shrink frees a retired store's large files)
// moves that time into the close without shortening the writers' gaps
// after the handoff, so a parked WAL is unlinked whole.
//
// Only Pebble's Remove of a *.log file directly in the store's directory
// is parked (its cleaner's path): no other file, and no other directory a
// checkpoint of the store writes through the same filesystem.
type walDeletes struct {
	mu     sync.Mutex
	held   bool
	parked []string
}

// holdWALDeletes parks the store's WAL deletions until releaseWALDeletes
// (ReleaseCompactions, or the store's close).
func (c *cancelFS) holdWALDeletes() {
	c.walDel.mu.Lock()
	defer c.walDel.mu.Unlock()
	c.walDel.held = true
}

// releaseWALDeletes ends the hold and deletes the files it parked. A file
// it cannot delete stays behind and is harmless: the store's next open
// deletes it.
//
// NB: unlinked through the wrapped filesystem, not c.Remove: a retired
// store's Remove frees a large file in steps first (shrink), and the
// parked WALs of a split's parent are released by its retirement's close,
// where freeing them in steps was measured and not kept (see walDeletes;
// TestARetiredParentsParkedWALIsUnlinkedWhole).
func (c *cancelFS) releaseWALDeletes() error {
	parked := c.takeWALDeletes()
	var errs []error
	for _, name := range parked {
		if err := c.FS.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("storage: delete obsolete WAL %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (c *cancelFS) takeWALDeletes() []string {
	c.walDel.mu.Lock()
	defer c.walDel.mu.Unlock()
	parked := c.walDel.parked
	c.walDel.held, c.walDel.parked = false, nil
	return parked
}

// parkedWALDeletes returns the files parked now.
func (c *cancelFS) parkedWALDeletes() []string {
	c.walDel.mu.Lock()
	defer c.walDel.mu.Unlock()
	return append([]string(nil), c.walDel.parked...)
}

// parkWALDelete parks the deletion of name if the hold is on and name is a
// WAL file of the store's own directory (cancelFS.Remove, which Pebble's
// cleaner deletes obsolete WALs with).
func (c *cancelFS) parkWALDelete(name string) bool {
	if c.dir == "" || !strings.HasSuffix(name, ".log") || c.FS.PathDir(name) != c.FS.PathDir(c.FS.PathJoin(c.dir, "x")) {
		return false
	}
	c.walDel.mu.Lock()
	defer c.walDel.mu.Unlock()
	if !c.walDel.held {
		return false
	}
	c.walDel.parked = append(c.walDel.parked, name)
	return true
}
