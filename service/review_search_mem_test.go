package service

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestReviewSearchKeepsOnlyItsPage: a search for one hit must not hold every
// matching document in memory. Search kept every match and cut the page out
// at the end; the matches were slices of the scan's buffer (see
// TestReviewSearchHitsKeepTheirSource), so the heap did not show it, but a
// hit must own its source, and copying every match would hold the whole
// index (here 60 MB) for a size=1 search. This guards the fix: each shard
// keeps at most From+Size hits (it fails with 63 MB held when all are kept).
func TestReviewSearchKeepsOnlyItsPage(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "big", Settings: FlatSettings{SettingShards: str("2"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	src := []byte(`{"pad":"` + strings.Repeat("x", 100<<10) + `"}`)
	const docs = 600 // 60 MB of sources
	for i := range docs {
		if _, err := s.IndexDoc("big", fmt.Sprintf("d%d", i), "", src, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
		}
	}()
	for range 3 {
		res, err := s.Search(SearchRequest{Indices: "big", Size: 1})
		if err != nil || res.Total != docs || len(res.Hits) != 1 {
			t.Fatalf("search: %d hits of %d, %v", len(res.Hits), res.Total, err)
		}
	}
	close(stop)
	<-sampled
	grew := int64(peak.Load()) - int64(base)
	t.Logf("heap grew by %d MB during size=1 searches over %d MB of documents", grew>>20, docs*len(src)>>20)
	if grew > 30<<20 {
		t.Fatalf("a size=1 search held %d MB: it keeps every match, not its page", grew>>20)
	}
}
