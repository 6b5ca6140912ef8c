package recovery

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// makeStore creates shard id's store in the data directory with one
// document, as a crash may leave it, and closes it.
func makeStore(t *testing.T, opts storage.Options, id routing.ShardID) {
	t.Helper()
	eng, err := storage.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := eng.OpenShard(id, 0, []routing.Span{{Start: 0, End: 32}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]storage.Op{{Kind: storage.OpIndex, Root: 0, Key: 1, ID: "orphan-doc", Source: []byte("v")}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
}

// Open removes a shard store that the table names neither active nor as a
// child of a split in progress: an orphan shard-7 left in place would make
// every later split that picks id 7 fail.
func TestOpenRemovesOrphanStores(t *testing.T) {
	fs := vfs.NewMem()
	opts := storage.Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20}
	n, _, _, err := Open(opts, testTable(t), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	makeStore(t, opts, 7)

	n, _, _, err = Open(opts, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := fs.Stat("/data/shard-7"); err == nil {
		t.Fatal("recovery left the orphan store /data/shard-7")
	}
	dirs, err := n.Engine().ShardDirs()
	if err != nil {
		t.Fatal(err)
	}
	if want := []routing.ShardID{0, 1}; !slices.Equal(dirs, want) {
		t.Fatalf("shard stores after recovery = %v, want %v", dirs, want)
	}
	if r := Check(n, nil, nil); !r.OK() {
		t.Fatalf("Check after removing an orphan: %v", r.Violations)
	}
}

// removeOrphans keeps the active shards and the children of a split in
// progress, and removes every other shard store.
func TestRemoveOrphansKeepsWhatTheTableNames(t *testing.T) {
	fs := vfs.NewMem()
	opts := storage.Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20}
	reserved, err := routing.Apply(testTable(t), routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := reserved.Split(0)
	stores := []routing.ShardID{0, 1, 5, 7}
	for _, c := range rec.Children {
		stores = append(stores, c.Shard)
	}
	for _, id := range stores {
		makeStore(t, opts, id)
	}
	eng, err := storage.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	removed, err := removeOrphans(eng, reserved, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := []routing.ShardID{5, 7}; !slices.Equal(removed, want) {
		t.Errorf("removeOrphans removed %v, want %v", removed, want)
	}
	left, err := eng.ShardDirs()
	if err != nil {
		t.Fatal(err)
	}
	want := []routing.ShardID{0, 1}
	for _, c := range rec.Children {
		want = append(want, c.Shard)
	}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("shard stores left = %v, want %v", left, want)
	}
}

// A data directory with shard stores but no table is refused with an error
// naming the directory and the stores, rather than recovery starting a new
// index over them.
func TestOpenRefusesStoresWithoutTable(t *testing.T) {
	for _, tt := range []struct {
		name   string
		layout storage.Layout
		store  string
	}{
		{"per-shard", storage.LayoutPerShard, "shard-3"},
		{"shared", storage.LayoutShared, "node"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			opts := storage.Options{Dir: "/data", FS: fs, Layout: tt.layout, CacheBytes: 1 << 20}
			makeStore(t, opts, 3)
			n, _, _, err := Open(opts, testTable(t), zaptest.NewLogger(t))
			if err == nil {
				_ = n.Close()
				t.Fatal("Open started a new index over existing shard stores")
			}
			if !errors.Is(err, ErrStoresWithoutTable) || !strings.Contains(err.Error(), "/data") || !strings.Contains(err.Error(), tt.store) {
				t.Fatalf("Open = %v, want ErrStoresWithoutTable naming /data and %s", err, tt.store)
			}
			if _, err := fs.Stat("/data/TABLE"); err == nil {
				t.Fatal("the refused Open wrote a table")
			}
			t.Logf("%v", err)
		})
	}
}
