package replication

import (
	"path/filepath"
	"testing"

	"github.com/shardsplit/shardsplit/storage"
)

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
