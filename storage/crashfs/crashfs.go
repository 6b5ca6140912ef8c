// Package crashfs is a crashable in-memory disk for crash-point
// enumeration (after Pebble's TestDBWALRotationCrash): Pebble's crashable
// memory filesystem, watched at every operation that can change what
// survives a crash, and cloned as a power loss at that instant would leave
// it. It lives under storage/ because only storage may import Pebble; its
// users pass Disk.FS to storage.Options.FS.
package crashfs

import (
	"math/rand/v2"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// Disk is a crashable in-memory disk.
type Disk struct{ mem *vfs.MemFS }

// New returns an empty disk.
func New() *Disk { return &Disk{mem: vfs.NewCrashableMem()} }

// FS returns the disk's filesystem; onDurable, if set, is called (from
// Pebble's goroutines, concurrently) before every operation that can
// change what survives a crash.
func (d *Disk) FS(onDurable func()) vfs.FS {
	if onDurable == nil {
		return d.mem
	}
	return errorfs.Wrap(d.mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
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
	return &Disk{mem: d.mem.CrashClone(cfg)}
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
