package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

func str(s string) *string { return &s }

func openT(t *testing.T, dir string) *Service { return openService(t, Config{Dir: dir}) }

// openService opens a service for a test (in a new temporary directory
// unless cfg names one), closed when the test ends.
func openService(t *testing.T, cfg Config) *Service {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func errType(err error) string {
	if err == nil {
		return "no error"
	}
	return AsError(err).Type
}

// TestLifecycle creates an index, writes, splits in place, resizes, and
// reopens the data directory: everything comes back.
func TestLifecycle(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	if _, err := s.CreateIndex(CreateRequest{Name: "logs", Settings: FlatSettings{SettingShards: str("2"), SettingReplicas: str("0")},
		Aliases: map[string]AliasMeta{"current": {}}}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		r := ""
		if i%3 == 0 {
			r = fmt.Sprintf("tenant-%d", i%7)
		}
		res, err := s.IndexDoc("current", fmt.Sprintf("d%d", i), r, []byte(fmt.Sprintf(`{"n":%d}`, i)), WriteOptions{})
		if err != nil || res.Result != "created" || res.Version != 1 {
			t.Fatalf("index d%d: %+v %v", i, res, err)
		}
	}
	res, err := s.IndexDoc("logs", "d1", "", []byte(`{"n":-1}`), WriteOptions{})
	if err != nil || res.Result != "updated" || res.Version != 2 {
		t.Fatalf("update: %+v %v", res, err)
	}
	if _, err := s.IndexDoc("logs", "d1", "", []byte(`{}`), WriteOptions{Create: true}); errType(err) != TypeVersionConflict {
		t.Fatalf("create of an existing doc: %v", err)
	}
	task, err := s.StartSplit(SplitRequest{Index: "logs", Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := task.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if snap := task.Status(); snap.Phase != "done" || snap.Err != nil {
		t.Fatalf("split ended in %s: %v", snap.Phase, snap.Err)
	}
	if _, err := s.StartSplit(SplitRequest{Index: "logs", Shard: 0, Ways: 2}); errType(err) != TypeIllegalArgument {
		t.Fatalf("second split of a split parent: %v", err)
	}
	if err := s.PutSettings("logs", FlatSettings{SettingBlockWrite: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IndexDoc("logs", "x", "", []byte(`{}`), WriteOptions{}); errType(err) != TypeClusterBlock {
		t.Fatalf("write to a blocked index: %v", err)
	}
	// A split index cannot be resized by linking.
	if _, _, err := s.Resize(ResizeRequest{Op: routing.Clone, Source: "logs", Target: "logs2"}); errType(err) != TypeIllegalArgument {
		t.Fatalf("clone of a split index: %v", err)
	}
	if _, err := s.CreateIndex(CreateRequest{Name: "src", Settings: FlatSettings{SettingShards: str("2"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := s.IndexDoc("src", fmt.Sprintf("s%d", i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Resize(ResizeRequest{Op: routing.Split, Source: "src", Target: "src4", Settings: FlatSettings{SettingShards: str("4")}}); errType(err) != TypeIllegalState {
		t.Fatalf("split without a write block: %v", err)
	}
	if err := s.PutSettings("src", FlatSettings{SettingBlockWrite: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Resize(ResizeRequest{Op: routing.Split, Source: "src", Target: "src4",
		Settings: FlatSettings{SettingShards: str("4"), SettingBlockWrite: nil}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IndexDoc("src4", "new", "", []byte(`{}`), WriteOptions{}); err != nil {
		t.Fatalf("write to the split target (write block nulled): %v", err)
	}
	count := func(s *Service, idx string) int {
		r, err := s.Search(SearchRequest{Indices: idx, Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		return r.Total
	}
	if got := count(s, "src4"); got != 51 {
		t.Fatalf("src4 holds %d docs, want 51", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir)
	defer s.Close()
	if got := count(s, "current"); got != n {
		t.Fatalf("after reopen: %d docs through the alias, want %d", got, n)
	}
	if got := count(s, "src4"); got != 51 {
		t.Fatalf("after reopen src4 holds %d docs, want 51", got)
	}
	if _, err := s.IndexDoc("logs", "x", "", []byte(`{}`), WriteOptions{}); errType(err) != TypeClusterBlock {
		t.Fatalf("after reopen, write to a blocked index: %v", err)
	}
	d, found, err := s.GetDoc("logs", "d1", "")
	if err != nil || !found || d.Version != 2 || string(d.Source) != `{"n":-1}` {
		t.Fatalf("get d1 after reopen: %+v %v %v", d, found, err)
	}
	tab, _ := s.Table("logs")
	if len(tab.ActiveShards()) != 3 {
		t.Fatalf("after reopen: active shards %v, want 3", tab.ActiveShards())
	}
}

// TestMissingMetadataKeepsIndexData: a data directory whose metadata file
// is gone but which still holds index directories (a partial copy or
// restore, an operator's mistake) must not be opened as a new, empty
// cluster, whose fresh metadata would make every index directory an orphan
// to remove. Open refuses and leaves the directories for the operator
// (OpenSearch keeps index data it does not know of as dangling indices; it
// never deletes it at startup).
func TestMissingMetadataKeepsIndexData(t *testing.T) {
	dir, ixDir := closedDirWithLogs(t)
	if err := os.Remove(filepath.Join(dir, stateDir, stateFile)); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(Config{Dir: dir})
	if err == nil {
		names := s2.Names()
		_ = s2.Close()
		t.Errorf("Open without metadata but with index data succeeded (indices %v)", names)
	}
	if _, err := os.Stat(ixDir); err != nil {
		t.Fatalf("the index directory is gone after Open: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, stateDir, stateFile)); err == nil {
		t.Errorf("Open wrote fresh metadata over a directory with index data")
	}
}

// TestAnIndexWhoseDirectoryIsGoneIsNotReopenedEmpty: the metadata names an
// index whose data directory is missing (deleted by hand, a partial
// restore). Recovery handed the index's initial table would make a new,
// empty index in its place: every acknowledged document gone without a
// word, and the next write would make the loss permanent. Open refuses,
// naming the index and the directory.
func TestAnIndexWhoseDirectoryIsGoneIsNotReopenedEmpty(t *testing.T) {
	dir, ixDir := closedDirWithLogs(t)
	if err := os.RemoveAll(ixDir); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(Config{Dir: dir})
	if err == nil {
		r, _ := s2.Search(SearchRequest{Indices: "logs", Size: 0})
		_ = s2.Close()
		t.Fatalf("Open with the index's directory gone succeeded; logs holds %d of the 20 acknowledged documents", r.Total)
	}
	for _, want := range []string{"logs", ixDir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, serr := os.Stat(ixDir); serr == nil {
		t.Errorf("the refused Open made %s", ixDir)
	}
}

// closedDirWithLogs makes a data directory holding index logs with 20
// documents, closes its service, and returns the directory and the index's.
func closedDirWithLogs(t *testing.T) (dir, ixDir string) {
	t.Helper()
	dir = t.TempDir()
	s := openT(t, dir)
	if _, err := s.CreateIndex(CreateRequest{Name: "logs", Settings: FlatSettings{SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := s.IndexDoc("logs", fmt.Sprintf("d%d", i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ixDir, _ = s.IndexDirOf("logs")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, ixDir
}
