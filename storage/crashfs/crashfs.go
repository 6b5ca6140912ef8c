// Package crashfs is a crashable in-memory disk for crash-point
// enumeration (after Pebble's TestDBWALRotationCrash): Pebble's crashable
// memory filesystem, watched at every operation that can change what
// survives a crash, and cloned as a power loss at that instant would leave
// it. It lives under storage/ because only storage may import Pebble; its
// users pass Disk.FS to storage.Options.FS.
package crashfs

import (
	"io"
	"math/rand/v2"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// Disk is a crashable in-memory disk.
type Disk struct {
	mem *vfs.MemFS
	// locking is held for reading by every FS.Lock and FS.Link and for
	// writing by Crash (see lockGuarded).
	locking sync.RWMutex
}

// New returns an empty disk.
func New() *Disk { return &Disk{mem: vfs.NewCrashableMem()} }

// FS returns the disk's filesystem; onDurable, if set, is called (from
// Pebble's goroutines, concurrently) before every operation that can
// change what survives a crash.
func (d *Disk) FS(onDurable func()) vfs.FS {
	fs := lockGuarded{MemFS: d.mem, d: d}
	if onDurable == nil {
		return fs
	}
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if IsDurableOp(op.Kind) {
			onDurable()
		}
		return nil
	}))
}

// Crash returns the disk as a power loss now would leave it: every
// unsynced byte and directory entry dropped, or, with keepPercent > 0,
// each kept with that probability (drawn from seed).
func (d *Disk) Crash(keepPercent int, seed uint64) *Disk {
	cfg := vfs.CrashCloneCfg{}
	if keepPercent > 0 {
		cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: keepPercent, RNG: rand.New(rand.NewPCG(seed, 1))}
	}
	return d.CrashWith(cfg)
}

// CrashWith is Crash with Pebble's clone configuration given whole (the
// simulation draws its own RNG for what survives).
func (d *Disk) CrashWith(cfg vfs.CrashCloneCfg) *Disk {
	d.locking.Lock()
	defer d.locking.Unlock()
	return &Disk{mem: d.mem.CrashClone(cfg)}
}

// lockGuarded is the disk's MemFS with its directory locks kept apart from
// Crash.
//
// NB: Pebble v2.1.7's MemFS.Lock read-locks the clone mutex and then calls
// Create, which read-locks it again. A CrashClone (its write lock) that
// arrives between the two waits for the first read lock and blocks the
// second, and both hang: a child's pebble.Open (LockDirectory) beside a
// crash point fired by the parent's WAL sync hangs so (question 9 of
// splitdemo findings --quick). With locking, no CrashClone can be
// waiting while a Lock is between its two read locks. (A Lock never
// crashes the disk itself: errorfs consults the crash hook before it, and
// MemFS.Lock's Create is MemFS's own, not errorfs's.) MemFS.Link nests its
// read locks the same way (the old name, then the new one's directory):
// a split flushes its parent, and a child's checkpoint linking the
// parent's tables beside a crash point hung TestCrashPointEnumeration so;
// Link is guarded too.
type lockGuarded struct {
	*vfs.MemFS
	d *Disk
}

// Lock implements vfs.FS.
func (g lockGuarded) Lock(name string) (io.Closer, error) {
	g.d.locking.RLock()
	defer g.d.locking.RUnlock()
	return g.MemFS.Lock(name)
}

// Link implements vfs.FS.
func (g lockGuarded) Link(oldname, newname string) error {
	g.d.locking.RLock()
	defer g.d.locking.RUnlock()
	return g.MemFS.Link(oldname, newname)
}

// IsDurableOp reports whether an operation can change what survives a
// crash (with unsynced data dropped, plain writes and closes cannot).
func IsDurableOp(k errorfs.OpKind) bool {
	switch k {
	case errorfs.OpCreate, errorfs.OpLink, errorfs.OpRemove, errorfs.OpRemoveAll, errorfs.OpRename,
		errorfs.OpReuseForWrite, errorfs.OpMkdirAll, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return true
	}
	return false
}
