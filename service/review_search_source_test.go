package service

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestReviewSearchHitsKeepTheirSource: every hit of a search carries its own
// document's source. storage's scans hand each document's source as a
// slice of the iterator's value, valid only until the iterator moves on;
// Search kept those slices as its hits, so a page of hits could show
// bytes of other documents, or of freed cache blocks, as their _source.
func TestReviewSearchHitsKeepTheirSource(t *testing.T) {
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
