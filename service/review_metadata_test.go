package service

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReviewMissingMetadataKeepsIndexData: a data directory whose metadata
// file is gone but which still holds index directories (a partial copy or
// restore, an operator's mistake) must not be opened as a new, empty
// cluster: Open wrote fresh metadata and then removed every index
// directory as an orphan, destroying all the data. It refuses now and
// leaves the directories for the operator (OpenSearch keeps index data it
// does not know of as dangling indices; it never deletes it at startup).
func TestReviewMissingMetadataKeepsIndexData(t *testing.T) {
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
// restore). Open used to hand recovery the index's initial table, and
// recovery made a new, empty index in its place: every acknowledged
// document gone without a word, and the next write made the loss
// permanent. Open refuses now, naming the index and the directory.
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
