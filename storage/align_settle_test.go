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
	e, parent := alignParent(t, Options{FS: fs}) // not ready
	type res struct {
		ready bool
		err   error
	}
	done := make(chan res, 1)
	go func() {
		_, r, err := e.AwaitOwnFlush(parent, 10*time.Second)
		done <- res{r, err}
	}()
	time.Sleep(50 * time.Millisecond)
	fs.fail.Store(true)
	if err := parent.st.db.Flush(); err != nil { // the store's flush, then its WAL's deletion: settle
		t.Fatal(err)
	}
	r := <-done
	fs.fail.Store(false)
	if r.err == nil {
		t.Fatalf("ready %v with no error: the settle did not run or did not sync the directory", r.ready)
	}
	if r.ready {
		t.Errorf("ready %v with err %v: a failed settle is reported as aligned", r.ready, r.err)
	}
}
