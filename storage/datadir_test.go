package storage

import (
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// An open that created the data directory but failed to sync its parent
// leaves the directory's entry unsynced; the next open must sync it, or a
// power loss later takes the whole index (and every acknowledged write)
// with it. Found by the simulation (tests/sim, seeds 39, 66, 67, 138).
func TestOpenMakesAnExistingDataDirectoryDurable(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var fail atomic.Bool
	fail.Store(true)
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if fail.Load() && op.Kind == errorfs.OpFileSync && op.Path == "/" {
			fail.Store(false)
			return fmt.Errorf("injected: %w", syscall.EIO)
		}
		return nil
	})
	fs := errorfs.Wrap(mem, inj)
	if _, err := Open(Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20}); err == nil {
		t.Fatalf("Open with the parent's sync failing succeeded")
	}
	e := openEngine(t, Options{FS: fs})
	defer e.Close()
	if err := e.WriteFileAtomic("TABLE", []byte("acknowledged")); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	f, err := crashed.Open("/data/TABLE")
	if err != nil {
		t.Fatalf("after a power loss: %v; want the synced /data/TABLE", err)
	}
	data, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil || string(data) != "acknowledged" {
		t.Fatalf("after a power loss /data/TABLE = %q, %v", data, err)
	}
}
