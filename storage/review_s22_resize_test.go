package storage

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// linkRacingClose links shard 1 of a target engine from reviewParent's
// source shard while the engine closing is closed (the source's or the
// target's), at the instant arm's hook calls block. Neither may panic and
// the close must succeed; a link that fails must remove the target's
// directory, and one that succeeds must hold every document of the source.
func linkRacingClose(t *testing.T, fs vfs.FS, closeSource bool, arm func(targetDir string, block func())) {
	t.Helper()
	srcEng, err := Open(Options{Dir: "/src", FS: fs, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer srcEng.Close()
	dstEng, err := Open(Options{Dir: "/dst", FS: fs, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dstEng.Close()
	src := reviewParent(t, srcEng)
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

// LinkShard's checkpoint of its source ran outside the source store's
// gate: a close of the source's engine beside it closed Pebble under the
// checkpoint (which holds a version of the source's tables), as the
// in-place split's checkpoint did before TestReviewS21CheckpointRacingClose.
func TestReviewS22ResizeLinkCheckpointRacingSourceClose(t *testing.T) {
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

// After its checkpoint LinkShard opened the target's store through the
// engine (registered at once) and then read its sequence number, dropped
// the source's log and adopted the sequence number outside the store's
// gate: a close of the target's engine then closed Pebble under them.
func TestReviewS22ResizeLinkTrimRacingTargetClose(t *testing.T) {
	fs := &readHookFS{FS: vfs.NewMem()}
	linkRacingClose(t, fs, false, func(targetDir string, block func()) {
		fs.onRead = func(name string) {
			if strings.HasPrefix(name, targetDir+"/") && onStack("storage.readSeq") {
				block() // the target's sequence number is read from a linked table
			}
		}
	})
}
