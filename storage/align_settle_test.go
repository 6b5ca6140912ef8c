package storage

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// failDirSyncFS fails the Sync of directories opened while fail is set.
type failDirSyncFS struct {
	vfs.FS
	fail atomic.Bool
}

func (f *failDirSyncFS) OpenDir(name string) (vfs.File, error) {
	d, err := f.FS.OpenDir(name)
	if err != nil || !f.fail.Load() {
		return d, err
	}
	return failSyncFile{d}, nil
}

type failSyncFile struct{ vfs.File }

func (failSyncFile) Sync() error { return errors.New("injected: directory fsync failed") }

// A settle that fails (here, the store directory's fsync after the WAL's
// deletion) must not be reported as a wait that reached its state: the
// splitter reports Aligned from ready.
func TestAwaitOwnFlushSettleErrorIsNotReady(t *testing.T) {
	fs := &failDirSyncFS{FS: vfs.NewMem()}
	e, parent := alignParent(t, Options{FS: fs})
	parent.HoldLog()
	// The store's flush past the hold, and its WAL's deletion (in
	// Pebble's background): the wait that follows settles at once.
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !parent.logCoversUnflushed(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the flushed WAL was not deleted within 10 s")
		}
	}
	fs.fail.Store(true)
	_, ready, err := e.AwaitOwnFlush(parent, 10*time.Second)
	fs.fail.Store(false)
	if err == nil {
		t.Fatalf("ready %v with no error: the settle did not run or did not sync the directory", ready)
	}
	if ready {
		t.Errorf("ready %v with err %v: a failed settle is reported as aligned", ready, err)
	}
}
