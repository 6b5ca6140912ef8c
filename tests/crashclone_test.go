package tests

// The crash cloner of the rfc crash test (rfc_crash_test.go): a crash
// clone of a crashfs disk at every durable operation while armed, with the
// model's cut around it. lab/crashpoint has its own for the split and
// merge enumeration. It clones through crashfs.Disk, never MemFS.CrashClone
// directly: Pebble's MemFS.Lock and Link nest read locks that a concurrent
// CrashClone deadlocks (crashfs.go): TestRFCCleanupCrashPoints hangs so,
// a writer left in Batch.SyncWait.

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/storage/crashfs"
)

type crashClone struct {
	fs    vfs.FS
	at    model.Cut // the model's clock read before and after the clone
	index int
}

// crashCloner sends a crash clone of its disk on clones at every durable
// operation while armed, with the model's cut around it.
type crashCloner struct {
	armed  atomic.Bool
	mu     sync.RWMutex // held (shared) from the armed check to the send; disarm takes it
	clones chan crashClone
	fs     vfs.FS // the disk, watched: the store's filesystem
}

// disarm stops the clones: when it returns no clone is being sent, and
// clones may be closed (Pebble's background work goes on doing durable
// operations).
func (c *crashCloner) disarm() {
	c.mu.Lock()
	c.armed.Store(false)
	c.mu.Unlock()
}

func newCrashCloner(disk *crashfs.Disk, m *model.Model, rng *rand.Rand) *crashCloner {
	c := &crashCloner{clones: make(chan crashClone, 64)}
	var index atomic.Int64
	var rngMu sync.Mutex
	c.fs = disk.FS(func() {
		c.mu.RLock()
		defer c.mu.RUnlock()
		if !c.armed.Load() {
			return
		}
		rngMu.Lock()
		keep, seed := 0, uint64(0)
		if rng.IntN(2) == 0 { // half the clones keep a random part of the unsynced data
			keep, seed = 50, rng.Uint64()
		}
		rngMu.Unlock()
		// Writes go on concurrently: every write acknowledged before the
		// clone must be in it, and none attempted after it can be.
		before := m.Now()
		clone := disk.Crash(keep, seed)
		at := model.Cut{Acked: before, Attempted: m.Now()}
		c.clones <- crashClone{fs: clone.FS(nil), at: at, index: int(index.Add(1))}
	})
	return c
}
