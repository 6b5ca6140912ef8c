package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

// TestReviewCloseDuringResize: a resize that finishes after Close began must
// not install its target into the closed service. It did: Close swapped the
// index map and waited for the source (the resize holds its splitMu), the
// resize then persisted the target's metadata and put its open node in the
// new map, and nothing ever closed it (its Pebble stores stayed open and
// locked; reopening the directory in the same process then fails).
func TestReviewCloseDuringResize(t *testing.T) {
	for it := range 10 {
		dir := t.TempDir()
		s := openT(t, dir)
		if _, err := s.CreateIndex(CreateRequest{Name: "src", Settings: FlatSettings{SettingShards: str("2"), SettingReplicas: str("0")}}); err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			if _, err := s.IndexDoc("src", fmt.Sprintf("d%d", i), "", []byte(`{}`), WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutSettings("src", FlatSettings{SettingBlockWrite: str("true")}, IndicesOptions{}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := s.Resize(ResizeRequest{Op: routing.Split, Source: "src", Target: "dst", Settings: FlatSettings{SettingShards: str("4")}})
			done <- err
		}()
		time.Sleep(time.Duration(1+it%4) * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		resizeErr := <-done
		s.mu.RLock()
		left := len(s.indices)
		s.mu.RUnlock()
		if left != 0 {
			t.Fatalf("iteration %d: the resize (%v) installed its target after Close: %d open indices left in the closed service", it, resizeErr, left)
		}
		s2, err := Open(Config{Dir: dir})
		if err != nil {
			t.Fatalf("iteration %d: reopen after a close during a resize (%v): %v", it, resizeErr, err)
		}
		if names := s2.Names(); resizeErr != nil && len(names) != 1 {
			t.Errorf("iteration %d: a refused resize left %v", it, names)
		}
		r, err := s2.Search(SearchRequest{Indices: "src", Size: -1})
		if err != nil || r.Total != 200 {
			t.Errorf("iteration %d: src after reopen: %d %v", it, r.Total, err)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
