package replication

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
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

// oneFileCheckpoint is a Checkpointer whose checkpoint is one small file.
type oneFileCheckpoint struct {
	fs  storage.FS
	lcp int64
}

func (c oneFileCheckpoint) Checkpoint(dir string) (int64, error) {
	if err := c.fs.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	f, err := c.fs.Create(filepath.Join(dir, "data"), storage.WriteCategoryUnspecified)
	if err != nil {
		return 0, err
	}
	if _, err := f.Write([]byte("checkpoint")); err != nil {
		return 0, err
	}
	return c.lcp, f.Close()
}

// TestARecoveryWhoseTargetOpenedResendsNoChunk: a target opens its files
// once every chunk arrived, and says so; an acknowledgement of a chunk may
// still be lost on the way back. The source, which deletes its checkpoint
// when the target opened, must not resend that chunk from the deleted
// files (the read fails and cancels the recovery, and the cancel wipes a
// target that holds every file).
func TestARecoveryWhoseTargetOpenedResendsNoChunk(t *testing.T) {
	g := newGroup(t, 1, "n1", "n2")
	fs := storage.NewMemFS()
	s, err := StartSource(g.copies["n1"], oneFileCheckpoint{fs: fs, lcp: -1}, fs, "/recovery/r1", "r1", "a-n3", "n3")
	if err != nil {
		t.Fatal(err)
	}
	s.OnAck(recoveryAck{Shard: g.shard, ID: "r1", Manifest: true}) // the chunk goes; its acknowledgement is lost
	s.OnOpened(recoveryOpened{Shard: g.shard, ID: "r1", LCP: -1})
	g.queue = nil
	for range 20 {
		s.Tick()
	}
	if s.Done() {
		t.Fatal("the recovery ended (cancelled) after its target opened every file")
	}
	for _, e := range g.queue {
		if e.kind == KindRecoveryCancel || e.kind == KindRecoveryChunk {
			t.Fatalf("the source sent %s to a target that opened its files: %s", e.kind, e.body)
		}
	}
}

// bigFileCheckpoint is a Checkpointer whose checkpoint is one file of
// size bytes.
type bigFileCheckpoint struct {
	fs   storage.FS
	size int
}

func (c bigFileCheckpoint) Checkpoint(dir string) (int64, error) {
	if err := c.fs.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	f, err := c.fs.Create(filepath.Join(dir, "data"), storage.WriteCategoryUnspecified)
	if err != nil {
		return 0, err
	}
	if _, err := f.Write(bytes.Repeat([]byte{'x'}, c.size)); err != nil {
		return 0, err
	}
	return -1, f.Close()
}

// TestARecoverySourceResendsChunksOnlyToASilentTarget: a target that
// acknowledges chunks, however slowly, is sent each chunk once (a resend
// per chunk on a timer shorter than a loaded link's service time sent the
// parent several times over, each copy queued ahead of the writes'
// operations to that node). A target that falls silent gets its
// unacknowledged chunks again, less often the longer it stays silent.
func TestARecoverySourceResendsChunksOnlyToASilentTarget(t *testing.T) {
	g := newGroup(t, 1, "n1", "n2")
	fs := storage.NewMemFS()
	chunks := chunkWindow + 4
	s, err := StartSource(g.copies["n1"], bigFileCheckpoint{fs: fs, size: chunks * ChunkBytes}, fs, "/recovery/r1", "r1", "a-n3", "n3")
	if err != nil {
		t.Fatal(err)
	}
	g.queue = nil
	s.OnAck(recoveryAck{Shard: g.shard, ID: "r1", Manifest: true})
	sent := func() map[int64]int {
		m := map[int64]int{}
		for _, e := range g.queue {
			if e.kind == KindRecoveryChunk {
				var c recoveryChunk
				if err := json.Unmarshal(e.body, &c); err != nil {
					t.Fatal(err)
				}
				m[c.Offset]++
			}
		}
		return m
	}
	// A slow target: one acknowledgement every resendTicks-1 ticks, the
	// oldest chunk first.
	for acked := 0; acked < chunks-2; acked++ {
		for range resendTicks - 1 {
			s.Tick()
		}
		s.OnAck(recoveryAck{Shard: g.shard, ID: "r1", Offset: int64(acked) * ChunkBytes})
	}
	got := sent()
	for i := range chunks {
		if n := got[int64(i)*ChunkBytes]; n != 1 {
			t.Fatalf("chunk %d sent %d times to a target acknowledging every %d ticks; want once (%v)", i, n, resendTicks-1, got)
		}
	}
	// The target falls silent with two chunks unacknowledged.
	var resentAt []int
	for tick := 1; tick <= 40; tick++ {
		before := len(g.queue)
		s.Tick()
		if len(g.queue) > before {
			resentAt = append(resentAt, tick)
		}
	}
	if want := []int{resendTicks, 3 * resendTicks, 7 * resendTicks}; !slices.Equal(resentAt, want) {
		t.Fatalf("a silent target's chunks resent at ticks %v of its silence; want %v", resentAt, want)
	}
	if s.Done() {
		t.Fatal("the recovery was cancelled before giveUp ticks of silence")
	}
}
