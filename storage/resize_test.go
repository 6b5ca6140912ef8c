package storage

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/shardsplit/shardsplit/routing"
)

// A shard owning several spans given out of order (OpenShard and SetOwned
// take them as given; foreignRanges needs them sorted): trimming it to
// what it owns keeps the documents it owns and removes only the others.
func TestTrimToOwnedWithSpansOutOfOrder(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	owned := []routing.Span{{Start: 64, End: 96}, {Start: 0, End: 32}} // of root 0
	s := openShard(t, e, 0, 0, rootSpan(0))
	want := 0
	for _, id := range idsInRoot(0, 400) {
		op := opFor(id, OpIndex, "v")
		if inSpans(owned, op.Key) {
			want++
		}
		if _, err := s.Write([]Op{op}, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.SetOwned(owned)
	if _, err := s.TrimToOwned(); err != nil {
		t.Fatal(err)
	}
	got := 0
	if err := s.Scan(func(Doc) error { got++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ForeignDocs(); err != nil || n != 0 || got != want {
		t.Errorf("after TrimToOwned: %d owned documents (want %d), %d foreign (%v; want 0)", got, want, n, err)
	}
}

// linkRacingClose links shard 1 of a target engine from loadedParent's
// source shard while the engine closing is closed (the source's or the
// target's), at the instant arm's hook calls block. Neither may panic and
// the close must succeed; a link that fails must remove the target's
// directory, and one that succeeds must hold every document of the source.
func linkRacingClose(t *testing.T, fs vfs.FS, closeSource bool, arm func(targetDir string, block func())) {
	t.Helper()
	srcEng := openEngine(t, Options{Dir: "/src", FS: fs})
	defer srcEng.Close()
	dstEng := openEngine(t, Options{Dir: "/dst", FS: fs})
	defer dstEng.Close()
	src := loadedParent(t, srcEng)
	closing := dstEng
	if closeSource {
		closing = srcEng
	}
	targetDir := dstEng.ShardDir(1)
	var linked *Shard
	closeErr, linkErr, p := closeDuring(t, closing, func(block func()) error {
		arm(targetDir, block)
		var err error
		linked, _, err = LinkShard(dstEng, src, 1, 0, []routing.Span{rootSpan(0)})
		return err
	})
	if p != nil {
		t.Fatalf("LinkShard racing the close panicked: %v", p)
	}
	if closeErr != nil {
		t.Errorf("Close during LinkShard = %v, want nil", closeErr)
	}
	if linkErr != nil {
		if _, err := fs.Stat(targetDir); err == nil {
			t.Errorf("the failed link (%v) left the target's directory %s", linkErr, targetDir)
		}
		return
	}
	if closeSource { // the target's engine is open: the target must be whole
		n := 0
		if err := linked.Scan(func(Doc) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != 300 {
			t.Errorf("a link that succeeded beside the source's close holds %d documents, want 300", n)
		}
	}
}

// LinkShard's checkpoint of its source runs inside the source store's
// gate: outside it, a close of the source's engine beside it closes Pebble
// under the checkpoint (which holds a version of the source's tables), as
// TestChildCheckpointRacingCloseFailsCleanly checks of the in-place
// split's checkpoint.
func TestLinkShardCheckpointRacingSourceClose(t *testing.T) {
	fs := &createHookFS{FS: vfs.NewMem()}
	linkRacingClose(t, fs, true, func(targetDir string, block func()) {
		fs.onCreate = func(name string) {
			if strings.HasPrefix(name, targetDir+"/") {
				block() // the checkpoint is writing the target's files
			}
		}
	})
}

// readHookFS calls onRead (if set) before every read of a file it opened.
type readHookFS struct {
	vfs.FS
	onRead func(name string)
}

func (f *readHookFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	return &readHookFile{File: file, name: name, fs: f}, nil
}

type readHookFile struct {
	vfs.File
	name string
	fs   *readHookFS
}

func (f *readHookFile) ReadAt(p []byte, off int64) (int, error) {
	if f.fs.onRead != nil {
		f.fs.onRead(f.name)
	}
	return f.File.ReadAt(p, off)
}

// After its checkpoint LinkShard reads the target's sequence number, drops
// the source's log and adopts the sequence number before the target's
// store is registered with its engine: a store registered at once, with
// that work outside its gate, would let a close of the target's engine
// close Pebble under them.
func TestLinkShardTrimRacingTargetClose(t *testing.T) {
	fs := &readHookFS{FS: vfs.NewMem()}
	linkRacingClose(t, fs, false, func(targetDir string, block func()) {
		fs.onRead = func(name string) {
			if strings.HasPrefix(name, targetDir+"/") && onStack("storage.readSeq") {
				block() // the target's sequence number is read from a linked table
			}
		}
	})
}
