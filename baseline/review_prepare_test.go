package baseline

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// statFailFS fails Stat once armed (a compaction deleting a
// file between the directory listing and its stat, or an I/O error).
type statFailFS struct {
	vfs.FS
	armed atomic.Bool
}

var errStat = errors.New("injected: stat failed")

func (f *statFailFS) Stat(name string) (vfs.FileInfo, error) {
	if f.armed.Load() {
		return nil, errStat
	}
	return f.FS.Stat(name)
}

// A shrink with max_shard_size sizes its target from the source's store
// size. If that size cannot be measured, the target's shard count cannot
// be computed: Prepare must fail saying why, not size the target from
// whatever part of the store it managed to measure.
func TestReviewBaselinePrepareReportsAnUnmeasurableSource(t *testing.T) {
	fs := &statFailFS{FS: vfs.NewMem()}
	eng, err := storage.Open(storage.Options{Dir: "/src", FS: fs, CacheBytes: 1 << 20, Layout: storage.LayoutPerShard})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := routing.NewSettings("source", 4, 0, 1)
	tab, _ := routing.NewTable(routing.ModePartition, s)
	n, err := node.Open(node.Config{Engine: eng, Table: tab})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	r := node.NewRouter(n, tab, node.RouterConfig{})
	for i := range 2000 {
		if _, err := r.Index(fmt.Sprintf("doc-%d", i), "", []byte(strings.Repeat("v", 200))); err != nil {
			t.Fatal(err)
		}
	}
	max := int64(1)
	req := ResizeRequest{Op: routing.Shrink, Source: "source", Target: "target", MaxShardSize: &max}
	src := &Source{Node: n, WriteBlocked: true}
	want, err := Prepare(req, src, false)
	if err != nil {
		t.Fatalf("Prepare with a measurable source: %v", err)
	}
	fs.armed.Store(true)
	got, err := Prepare(req, src, false)
	if err == nil {
		t.Fatalf("Prepare with the source's store size unmeasurable = %d shards (measured: %d), nil; want an error", got.Shards, want.Shards)
	}
	if !errors.Is(err, errStat) {
		t.Errorf("Prepare's error %v does not carry the measuring error", err)
	}
}
