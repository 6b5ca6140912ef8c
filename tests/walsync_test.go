package tests

import (
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// walSyncFault fails the next sync of a WAL file once armed.
type walSyncFault struct{ armed atomic.Bool }

func (f *walSyncFault) MaybeError(op errorfs.Op) error {
	sync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
	if sync && strings.HasSuffix(op.Path, ".log") && f.armed.CompareAndSwap(true, false) {
		return syscall.EIO
	}
	return nil
}

func (f *walSyncFault) String() string { return "wal-sync" }

// A write whose WAL sync fails is answered with an error, but it stays in
// the shard's memtable: if later gets returned it, a crash would then lose
// a value a client saw (a dirty read; the write's own client was told it
// may not have happened, the reader was not). PostgreSQL and Pebble treat
// a failed WAL fsync as fatal for this reason, and so does the node
// (node.ErrFailed), for a shard's WAL as for its table: a value a get
// returns after the failed write must survive a power loss. The
// simulation draws this case since the model requires a write a get
// returned to survive (model.Observe).
func TestNoDirtyReadAfterAFailedWALSync(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fault := &walSyncFault{}
	fs := errorfs.Wrap(mem, fault)
	n, tab := openFailpathLogged(t, fs)
	r := node.NewRouter(n, tab, node.RouterConfig{})
	fault.armed.Store(true)
	_, werr := r.Index("d0", "", []byte("dirty"))
	if werr == nil {
		_ = n.Close()
		t.Skip("the armed WAL sync fault did not fail the write")
	}
	t.Logf("write failed as armed: %v", werr)
	d, found, gerr := r.Get("d0", "")
	t.Logf("get after the failed write: found=%v source=%q err=%v", found, d.Source, gerr)
	crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // a power loss keeps only what was synced
	_ = n.Close()
	n2 := reopen(t, crashed, tab)
	defer n2.Close()
	d2, found2, err := node.NewRouter(n2, tab, node.RouterConfig{}).Get("d0", "")
	if err != nil {
		t.Fatal(err)
	}
	if gerr == nil && found && string(d.Source) == "dirty" && !(found2 && string(d2.Source) == "dirty") {
		t.Errorf("a get returned d0 = %q after its write failed (%v), and after a power loss d0 = %q (found %v): a value a reader saw vanished",
			d.Source, werr, d2.Source, found2)
	}
}

// openFailpathLogged opens openFailpath's index with a logger whose fatal
// panics instead of exiting the test binary (Pebble calls Fatalf on some WAL
// failures).
func openFailpathLogged(t *testing.T, fs vfs.FS) (*node.Node, *routing.Table) {
	t.Helper()
	logger := zap.NewNop().WithOptions(zap.WithFatalHook(zapcore.WriteThenPanic))
	n, _, tab := openIndex(t, storage.Options{FS: fs, Logger: logger}, 20)
	return n, tab
}
