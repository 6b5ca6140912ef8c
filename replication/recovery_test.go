package replication

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/storage"
)

// syncCountingFS counts each file's syncs and records how many bytes the
// file held at each.
type syncCountingFS struct {
	vfs.FS
	syncs map[string][]int64
}

type syncCountingFile struct {
	vfs.File
	fs   *syncCountingFS
	name string
}

func (f syncCountingFile) Sync() error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	f.fs.syncs[f.name] = append(f.fs.syncs[f.name], st.Size())
	return f.File.Sync()
}

func (fs *syncCountingFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, cat, opts...)
	if err != nil {
		return nil, err
	}
	return syncCountingFile{File: f, fs: fs, name: filepath.Base(name)}, nil
}

type nopEnv struct{}

func (nopEnv) Send(node, kind string, body any)                                                {}
func (nopEnv) FailCopy(shard ShardKey, aid string, term uint64, markStale bool, reason string) {}
func (nopEnv) Logger() *zap.Logger                                                             { return zap.NewNop() }

// TestARecoveryTargetSyncsEachFileOnceWhole: a target writes a file's
// chunks as they come, in any order, and syncs the file once, when its last
// chunk is in (a sync per 512 KiB chunk held the node's loop for each and
// halved the copy's speed); the files are whole and complete.
func TestARecoveryTargetSyncsEachFileOnceWhole(t *testing.T) {
	fs := &syncCountingFS{FS: storage.NewMemFS(), syncs: map[string][]int64{}}
	content := map[string][]byte{
		"a.sst":    bytes.Repeat([]byte("abcdefgh"), (2*ChunkBytes+100)/8),
		"b.sst":    []byte("small"),
		"MANIFEST": {},
	}
	files := []FileInfo{{"a.sst", int64(len(content["a.sst"]))}, {"b.sst", 5}, {"MANIFEST", 0}}
	tg := NewTarget(ShardKey{Index: "ix"}, nopEnv{}, fs, "/copy", "r1", "n1", "aid", "n2")
	if err := tg.OnManifest(recoveryManifest{ID: "r1", LCP: 7, Files: files}); err != nil {
		t.Fatal(err)
	}
	var chunks []recoveryChunk
	for i, f := range files {
		for off := int64(0); off < f.Size; off += ChunkBytes {
			data := content[f.Name][off:min(off+ChunkBytes, f.Size)]
			chunks = append(chunks, recoveryChunk{ID: "r1", File: i, Offset: off, Data: data})
		}
	}
	// Out of order, and one sent twice.
	order := []int{2, 0, 3, 0, 1}
	for _, k := range order {
		if tg.Complete() {
			t.Fatalf("complete before chunk %d", k)
		}
		if err := tg.OnChunk(chunks[k]); err != nil {
			t.Fatal(err)
		}
	}
	if !tg.Complete() || tg.LCP() != 7 {
		t.Fatalf("Complete() = %v, LCP() = %d after every chunk", tg.Complete(), tg.LCP())
	}
	for _, f := range files {
		if f.Size == 0 {
			continue
		}
		if got := fs.syncs[f.Name]; len(got) != 1 || got[0] != f.Size {
			t.Errorf("%s (%d bytes) synced at sizes %v; want once, whole", f.Name, f.Size, got)
		}
		b := make([]byte, f.Size)
		file, err := fs.Open(filepath.Join("/copy", f.Name))
		if err == nil {
			_, err = file.ReadAt(b, 0)
			_ = file.Close()
		}
		if err != nil || !bytes.Equal(b, content[f.Name]) {
			t.Errorf("%s holds %d bytes (%v), want its %d", f.Name, len(b), err, f.Size)
		}
	}
}
