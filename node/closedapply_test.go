package node_test

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// A table edit on a closed node (a driver still running after its node's
// Close) writes nothing: the data directory may by then be another node's,
// and a TABLE file written there would replace the reopened node's table
// under it, so that its next open reads an edit it never made.
func TestApplyOnAClosedNodeWritesNothing(t *testing.T) {
	fs := vfs.NewMem()
	old, _ := openNode(t, fs, storage.LayoutPerShard)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	reopened, eng := reopenNode(t, fs)
	defer reopened.Close()
	v := reopened.Table().Version()
	for _, edit := range []struct {
		name string
		do   func() error
	}{
		{"Apply", func() error {
			_, err := old.Apply(routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
			return err
		}},
		{"Publish", func() error {
			p, err := old.Publish(routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
			if err == nil {
				err = p.Stage()
			}
			return err
		}},
	} {
		if err := edit.do(); !errors.Is(err, node.ErrClosed) {
			t.Errorf("%s on the closed node = %v, want node.ErrClosed", edit.name, err)
		}
	}
	onDisk, err := node.LoadTable(eng)
	if err != nil {
		t.Fatal(err)
	}
	if onDisk.Version() != v {
		t.Errorf("the reopened node's table file is v%d, its table v%d: the closed node wrote it", onDisk.Version(), v)
	}
}

// tableCreateGateFS holds the first Create of the TABLE file's temporary
// once armed, until released: an edit caught between its checks and its
// write.
type tableCreateGateFS struct {
	vfs.FS
	armed   atomic.Bool
	reached chan struct{}
	release chan struct{}
}

func (fs *tableCreateGateFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if filepath.Base(name) == "TABLE.tmp" && fs.armed.CompareAndSwap(true, false) {
		close(fs.reached)
		<-fs.release
	}
	return fs.FS.Create(name, c)
}

// An Apply racing its node's Close writes nothing once Close has returned:
// editable checks that the node is open, then Apply persists, and Close
// must be kept out in between. Otherwise an Apply that passed the check as
// its node closed writes its TABLE into the data directory after a node
// reopened there has made an edit of its own: the reopened node's table
// file is replaced under it (its next open reads an edit it never made),
// and the closed node's Apply is acknowledged.
func TestApplyRacingCloseWritesNothing(t *testing.T) {
	fs := &tableCreateGateFS{FS: vfs.NewMem(), reached: make(chan struct{}), release: make(chan struct{})}
	old, _ := openNode(t, fs, storage.LayoutPerShard)
	fs.armed.Store(true)
	applied := make(chan error, 1)
	go func() {
		_, err := old.Apply(routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
		applied <- err
	}()
	<-fs.reached
	closed := make(chan error, 1)
	go func() { closed <- old.Close() }()
	// Close either waits for the edit or returns at once.
	var closeErr error
	select {
	case closeErr = <-closed:
	case <-time.After(200 * time.Millisecond):
		close(fs.release)
		closeErr = <-closed
	}
	if closeErr != nil {
		t.Fatal(closeErr)
	}
	reopened, eng := reopenNode(t, fs)
	defer reopened.Close()
	if _, err := reopened.Apply(routing.Edit{Kind: routing.BeginSplit, Shard: 1, Ways: 2}); err != nil {
		t.Fatal(err)
	}
	want := reopened.Table()
	select {
	case <-fs.release:
	default:
		close(fs.release)
	}
	applyErr := <-applied
	onDisk, err := node.LoadTable(eng)
	if err != nil {
		t.Fatal(err)
	}
	if string(onDisk.Encode()) != string(want.Encode()) {
		t.Errorf("the reopened node's table file is v%d (splits %v), its table v%d (splits %v): the closed node's Apply (err %v) wrote it",
			onDisk.Version(), onDisk.Splits(), want.Version(), want.Splits(), applyErr)
	}
	if applyErr == nil && closeErr == nil && reopened.Table() == want {
		// An Apply that finished before Close is fine only if the reopened
		// node saw its edit.
		if len(want.Splits()) != 2 {
			t.Errorf("the old node's Apply succeeded but the reopened node's table has splits %v", want.Splits())
		}
	}
	if applyErr != nil && !errors.Is(applyErr, node.ErrClosed) {
		t.Errorf("Apply racing Close = %v, want nil (before Close) or node.ErrClosed", applyErr)
	}
}
