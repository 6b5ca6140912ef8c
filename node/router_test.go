package node_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// A routed Get while a published table is not yet durable must not return
// a write that only that table admits: the write is not acknowledged
// (INV-9), and if the commit fails, recovery rolls it back, so a reader
// would have seen a value that then vanishes (not linearizable: no write
// of the older state follows). The Get is answered from the durable
// table's owner (the parent), which holds the acknowledged state.
func TestGetDuringAPendingTableIsNotADirtyRead(t *testing.T) {
	fs := vfs.NewMem()
	n, _ := openNode(t, fs, storage.LayoutPerShard)
	_, p := publishSplit(t, n)
	r := node.NewRouter(n, p.Table(), node.RouterConfig{})
	id, acked := writeToAChild(t, n, r, p.Table(), "dirty")
	type got struct {
		doc   storage.Doc
		found bool
		err   error
	}
	read := make(chan got, 1)
	go func() {
		d, found, err := r.Get(id, "")
		read <- got{d, found, err}
	}()
	var early *got
	select {
	case g := <-read:
		early = &g
	case <-time.After(50 * time.Millisecond):
	}
	if err := p.Commit(func() error { return errors.New("injected: fsync failed") }); !errors.Is(err, node.ErrFailed) {
		t.Fatalf("Commit = %v, want ErrFailed", err)
	}
	if err := <-acked; !errors.Is(err, node.ErrFailed) {
		t.Fatalf("the write = %v, want ErrFailed", err)
	}
	g := early
	if g == nil {
		x := <-read
		g = &x
	}
	if g.found {
		t.Errorf("a Get during the pending table returned the unacknowledged write %q (err %v)", g.doc.Source, g.err)
	} else if g.err != nil && !errors.Is(g.err, node.ErrFailed) {
		t.Errorf("the Get during the pending table = %v, want not found or ErrFailed", g.err)
	}
	_ = n.Close()
	n2, _, _, err := recovery.Open(storage.Options{Dir: "/data", FS: fs, Layout: storage.LayoutPerShard, CacheBytes: 1 << 20}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	if _, found, err := node.NewRouter(n2, n2.Table(), node.RouterConfig{}).Get(id, ""); err != nil || found {
		t.Fatalf("after recovery the rolled-back write is found %v (%v): the case needs it gone", found, err)
	}
}

// In the shared layout the durable owner of a key the pending table moves
// (the parent) reads the same store and keys as its new owner (the child):
// a get in the handoff window sees a write only the pending table admits.
// That write is not rolled back by a failed commit there, so returning it
// is no dirty read once it is durable, but not before: a get that passed
// the node's checks before the write, and read once the write was applied
// and its WAL sync had failed, returned a value a power loss then took
// back (the simulation's seed 1047, where the sync was only late).
func TestAGetInThePendingWindowReturnsNoChildWriteBeforeItsWALSync(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fault := &walSyncFault{}
	var parked atomic.Pointer[getPark]
	opts := storage.Options{Dir: "/data", FS: errorfs.Wrap(mem, fault), Layout: storage.LayoutShared, CacheBytes: 1 << 20,
		Logger: zap.NewNop().WithOptions(zap.WithFatalHook(zapcore.WriteThenPanic)), // Pebble's Fatalf: a panic, not an exit
		BeforeGet: func(routing.ShardID) {
			if p := parked.Swap(nil); p != nil {
				close(p.arrived)
				<-p.release
			}
		}}
	n, _ := openNodeOn(t, opts, twoShards(t, 256))
	defer func() { _ = n.Close() }()
	_, p := publishSplit(t, n)
	r := node.NewRouter(n, p.Table(), node.RouterConfig{})
	id := idOn(t, p.Table(), func(s routing.ShardID) bool { return s != 1 })

	park := &getPark{arrived: make(chan struct{}), release: make(chan struct{})}
	parked.Store(park)
	type got struct {
		doc   storage.Doc
		found bool
		err   error
	}
	read := make(chan got, 1)
	go func() {
		d, found, err := r.Get(id, "")
		read <- got{d, found, err}
	}()
	<-park.arrived // past the node's checks, reading from the parent
	fault.armed.Store(true)
	if _, err := r.Index(id, "", []byte("dirty")); !errors.Is(err, node.ErrFailed) {
		t.Fatalf("the write whose WAL sync fails = %v, want ErrFailed", err)
	}
	close(park.release)
	g := <-read
	crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // a power loss keeps only what was synced
	n2, _, _, err := recovery.Open(storage.Options{Dir: "/data", FS: crashed, Layout: storage.LayoutShared, CacheBytes: 1 << 20}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	d2, found2, err := node.NewRouter(n2, n2.Table(), node.RouterConfig{}).Get(id, "")
	if err != nil {
		t.Fatal(err)
	}
	if g.err == nil && g.found && !(found2 && string(d2.Source) == string(g.doc.Source)) {
		t.Errorf("a get in the pending window returned %s = %q; after a power loss %s = %q (found %v): a value a reader saw vanished",
			id, g.doc.Source, id, d2.Source, found2)
	}
}

// getPark parks the next point read (storage.Options.BeforeGet) until
// released.
type getPark struct{ arrived, release chan struct{} }

// walSyncFault fails every sync of a WAL file once armed.
type walSyncFault struct{ armed atomic.Bool }

func (f *walSyncFault) MaybeError(op errorfs.Op) error {
	sync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
	if sync && f.armed.Load() && strings.HasSuffix(op.Path, ".log") {
		return syscall.EIO
	}
	return nil
}

func (f *walSyncFault) String() string { return "wal-sync" }

// A negative MaxRetries means no retries: the request is still sent once,
// not skipped with a failure wrapping a nil error ("%!w(<nil>)") that
// loses every context.
func TestRouterWithNegativeMaxRetriesSendsOnce(t *testing.T) {
	n, _ := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	defer n.Close()
	r := node.NewRouter(n, n.Table(), node.RouterConfig{MaxRetries: -1})
	if _, err := r.Index("doc-1", "", []byte("v")); err != nil {
		if strings.Contains(err.Error(), "%!") {
			t.Fatalf("Index with MaxRetries -1 = %q: a malformed error", err)
		}
		t.Fatalf("Index with MaxRetries -1 = %v, want it sent once and applied", err)
	}
}

// A write to a shard the published table names as the owner, whose store
// is closed (destroyed under the node), is not stale routing: no newer
// table or other shard will take it. It must fail at once with the store's
// error, not be retried as stale until the router gives up with a message
// saying the shard does not own a document it does own.
func TestWriteToAClosedOwnerIsNotStale(t *testing.T) {
	n, eng := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	defer n.Close()
	if err := eng.DestroyShard(1); err != nil {
		t.Fatal(err)
	}
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	id := idOn(t, n.Table(), func(s routing.ShardID) bool { return s == 1 })
	_, err := r.Index(id, "", []byte("v"))
	if !errors.Is(err, storage.ErrShardClosed) || errors.Is(err, node.ErrRetriesExhausted) || r.Retries() != 0 {
		t.Fatalf("write to the closed owner = %v after %d retries; want storage.ErrShardClosed at once", err, r.Retries())
	}
	var stale *node.StaleRoutingError
	if errors.As(err, &stale) {
		t.Fatalf("write to the closed owner answered stale routing: %v", err)
	}
}
