package storage

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// Every blocking file operation of a store but its WAL's (and directory
// syncs) yields the processor after it (yieldfs.go): a file's writes and
// syncs, creating, linking, renaming and removing files, making
// directories.
func TestBlockingFileOperationsYieldButTheWALs(t *testing.T) {
	var yields int
	c := &cancelFS{FS: vfs.NewMem(), dir: "/s", yieldHook: func() { yields++ }}
	counted := func(op string, do func() error) int {
		t.Helper()
		before := yields
		if err := do(); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return yields - before
	}
	got := map[string]int{}
	got["mkdir"] = counted("mkdir", func() error { return c.MkdirAll("/s", 0o755) })
	for _, cat := range []vfs.DiskWriteCategory{walWriteCategory, flushWriteCategory, compactionWriteCategory, "pebble-manifest"} {
		var f vfs.File
		got["create "+string(cat)] = counted("create", func() (err error) {
			f, err = c.Create("/s/"+string(cat), cat)
			return err
		})
		got["write, sync, sync data "+string(cat)] = counted("write", func() error {
			if _, err := f.Write([]byte("x")); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			return f.SyncData()
		})
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got["link"] = counted("link", func() error { return c.Link("/s/pebble-manifest", "/s/linked") })
	got["rename"] = counted("rename", func() error { return c.Rename("/s/linked", "/s/renamed") })
	got["remove"] = counted("remove", func() error { return c.Remove("/s/renamed") })
	got["directory sync"] = counted("directory sync", func() error {
		d, err := c.OpenDir("/s")
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	})
	want := map[string]int{
		"mkdir": 1, "link": 1, "rename": 1, "remove": 1, "directory sync": 0,
		// A WAL's creation, writes and syncs do not yield.
		"create pebble-wal": 0, "write, sync, sync data pebble-wal": 0,
		"create pebble-memtable-flush": 1, "write, sync, sync data pebble-memtable-flush": 3,
		"create pebble-compaction": 1, "write, sync, sync data pebble-compaction": 3,
		"create pebble-manifest": 1, "write, sync, sync data pebble-manifest": 3,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("yields per operation (-want +got):\n%s", d)
	}
}

// Only a store on the operating system's filesystem yields: an in-memory
// store has no syscall to hold a processor in (yieldfs.go).
func TestOnlyAStoreOnDiskYields(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   vfs.FS
		dir  string
		want bool
	}{
		{"disk", vfs.Default, t.TempDir(), true},
		{"memory", vfs.NewMem(), "/s", false},
	} {
		st, err := openStore(tc.dir, storeOptions{fs: tc.fs, logger: zap.NewNop(), clock: clock.Real{}}, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.cfs.onDisk != tc.want {
			t.Errorf("%s: onDisk %v, want %v", tc.name, st.cfs.onDisk, tc.want)
		}
		if err := st.close(); err != nil {
			t.Fatal(err)
		}
	}
}
