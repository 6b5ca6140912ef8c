package tests

// The crash cloner of the rfc crash test (rfc_crash_test.go): a crash
// clone of a MemFS at every durable operation while armed, with the
// model's cut around it. internal/crashpoint has its own for the split and
// merge enumeration.

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/internal/model"
)

type crashClone struct {
	fs    *vfs.MemFS
	at    model.Cut // the model's clock read before and after the clone
	index int
}

// crashCloner sends a crash clone of mem on clones at every durable
// operation while armed, with the model's cut around it.
type crashCloner struct {
	armed  atomic.Bool
	mu     sync.RWMutex // held (shared) from the armed check to the send; disarm takes it
	clones chan crashClone
	inj    errorfs.Injector
}

// disarm stops the clones: when it returns no clone is being sent, and
// clones may be closed (Pebble's background work goes on doing durable
// operations).
func (c *crashCloner) disarm() {
	c.mu.Lock()
	c.armed.Store(false)
	c.mu.Unlock()
}

func newCrashCloner(mem *vfs.MemFS, m *model.Model, rng *rand.Rand) *crashCloner {
	c := &crashCloner{clones: make(chan crashClone, 64)}
	var index atomic.Int64
	var rngMu sync.Mutex
	c.inj = errorfs.InjectorFunc(func(op errorfs.Op) error {
		c.mu.RLock()
		defer c.mu.RUnlock()
		if !c.armed.Load() || !isDurableOp(op.Kind) {
			return nil
		}
		rngMu.Lock()
		cfg := vfs.CrashCloneCfg{}
		if rng.IntN(2) == 0 { // half the clones keep a random part of the unsynced data
			cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}
		}
		rngMu.Unlock()
		// Writes go on concurrently: every write acknowledged before the
		// clone must be in it, and none attempted after it can be.
		before := m.Now()
		clone := mem.CrashClone(cfg)
		at := model.Cut{Acked: before, Attempted: m.Now()}
		c.clones <- crashClone{fs: clone, at: at, index: int(index.Add(1))}
		return nil
	})
	return c
}
