package service

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/storage"
)

// TestSearchDuringASplitSeesEveryDocument: a search of several indices
// chooses each index's shards and scans each index's table; an in-place
// split of one index that commits between the two (here while another
// index of the request is scanned) must not report the split shard's
// documents under children the older choice does not hold, leaving them
// out of hits and total. Every acknowledged document is found while a
// split publishes: a split in place does not change what a search answers.
func TestSearchDuringASplitSeesEveryDocument(t *testing.T) {
	s := openService(t, Config{Durability: storage.DurabilityAsync})
	const big, small = 20000, 200
	for name, n := range map[string]int{"a": big, "b": small} {
		if _, err := s.CreateIndex(CreateRequest{Name: name, Settings: FlatSettings{SettingShards: str("1")}}); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := s.IndexDoc(name, fmt.Sprint(i), "", []byte(`{"f":"some text to make the scan of a take a while"}`), WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var stop atomic.Bool
	var wrong atomic.Value
	var searches atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			res, err := s.Search(SearchRequest{Indices: "a,b", Size: -1})
			searches.Add(1)
			if err != nil || res.Total != big+small {
				wrong.Store(fmt.Sprintf("search of a,b during a split of b: total %d (want %d), err %v", res.Total, big+small, err))
				return
			}
		}
	}()
	for i := 0; i < 12 && wrong.Load() == nil; i++ {
		tab, err := s.Table("b")
		if err != nil {
			t.Fatal(err)
		}
		task, err := s.StartSplit(SplitRequest{Index: "b", Shard: tab.ActiveShards()[0], Ways: 2})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = task.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if w := wrong.Load(); w != nil {
		t.Fatal(w)
	}
	t.Logf("%d searches, every one exact", searches.Load())
}

// TestPagesAreStableAcrossSplits: with no writes, paging through a search
// with from and size visits every document once even when shards split in
// place between the pages: a split moves no document and must not reorder
// the hits (ordered by shard id, the split shard's documents would move to
// the end with its children's new, higher ids, and the later pages would
// repeat some documents and skip others).
func TestPagesAreStableAcrossSplits(t *testing.T) {
	s := openService(t, Config{Durability: storage.DurabilityAsync})
	if _, err := s.CreateIndex(CreateRequest{Name: "ix", Settings: FlatSettings{SettingShards: str("2")}}); err != nil {
		t.Fatal(err)
	}
	const n, size = 200, 20
	for i := range n {
		if _, err := s.IndexDoc("ix", fmt.Sprint(i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	for from := 0; from < n; from += size {
		res, err := s.Search(SearchRequest{Indices: "ix", From: from, Size: size})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range res.Hits {
			seen[h.ID]++
		}
		// Split the first active shard before the next page.
		tab, _ := s.Table("ix")
		task, err := s.StartSplit(SplitRequest{Index: "ix", Shard: tab.ActiveShards()[0], Ways: 2})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = task.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	var dup, missing []string
	for i := range n {
		switch id := fmt.Sprint(i); seen[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			dup = append(dup, id)
		}
	}
	if len(dup) > 0 || len(missing) > 0 {
		t.Errorf("paging %d documents by %d across in-place splits: %d seen twice or more (%v), %d never seen (%v)",
			n, size, len(dup), dup, len(missing), missing)
	}
}

// TestSearchKeepsOnlyItsPage: a search for one hit must not hold every
// matching document in memory. A hit owns its source
// (TestSearchHitsKeepTheirSource), so keeping every match and cutting the
// page out at the end would hold the whole index (here 60 MB) for a size=1
// search: each shard keeps at most From+Size hits (with every match kept
// the test fails, 63 MB held).
func TestSearchKeepsOnlyItsPage(t *testing.T) {
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

// TestSearchHitsKeepTheirSource: every hit of a search carries its own
// document's source. storage's scans hand each document's source as a
// slice of the iterator's value, valid only until the iterator moves on: a
// hit that kept the slice could show bytes of other documents, or of freed
// cache blocks, as its _source.
func TestSearchHitsKeepTheirSource(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "src", Settings: FlatSettings{SettingShards: str("2"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	const n = 600 // about 60 MB: more than the block cache holds
	for i := range n {
		id := fmt.Sprintf("d%03d", i)
		// Unique sources of about 100 KB: flushed to tables, read back
		// through the block cache during the scan.
		src := []byte(fmt.Sprintf(`{"id":%q,"pad":%q}`, id, strings.Repeat(string(rune('a'+i%26)), 100<<10)))
		want[id] = src
		if _, err := s.IndexDoc("src", id, "", src, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, size := range []int{10, n} {
		res, err := s.Search(SearchRequest{Indices: "src", Size: size})
		if err != nil || len(res.Hits) != size {
			t.Fatalf("search size %d: %d hits, %v", size, len(res.Hits), err)
		}
		bad := 0
		for _, h := range res.Hits {
			if !bytes.Equal(h.Source, want[h.ID]) {
				if bad < 3 {
					got := h.Source
					if len(got) > 60 {
						got = got[:60]
					}
					t.Errorf("size %d: hit %s has the source %q..., not its own", size, h.ID, got)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Fatalf("size %d: %d of %d hits carry a source that is not theirs", size, bad, len(res.Hits))
		}
	}
}
