package server_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewRESTReadsOfAllRaceDelete: GET /_settings and GET /_all read every
// index an expression resolved to; an index deleted between the resolution
// and the read made the whole answer a 404 index_not_found for an index
// the request never named. OpenSearch answers from one cluster state, so
// such a read lists the index or not, and never fails for it.
func TestReviewRESTReadsOfAllRaceDelete(t *testing.T) {
	readsOfAllRaceDelete(t, []string{"/_settings", "/_all", "/_all/_settings"})
}

// TestReviewRESTSearchesOfAllRaceDelete: the same for searches, counts and
// the _cat and health views, which read each index's documents: a store
// closed by a delete failed the whole request with "index closed or
// deleted during the request".
func TestReviewRESTSearchesOfAllRaceDelete(t *testing.T) {
	readsOfAllRaceDelete(t, []string{"/_search", "/_count", "/_cat/shards", "/_cat/indices", "/_cluster/health"})
}

func readsOfAllRaceDelete(t *testing.T, paths []string) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/keep", `{"settings":{"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	var stop atomic.Bool
	var failures atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for _, path := range paths {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 5000 && !stop.Load(); i++ {
					var body string
					if st := ts.do(t, "GET", path, "", &body); st != 200 {
						if failures.Add(1) == 1 {
							first.Store(path + ": " + body)
						}
					}
				}
			}()
		}
	}
	for range 60 {
		if st := ts.do(t, "PUT", "/tmp", `{"settings":{"number_of_replicas":0}}`, nil); st != 200 {
			t.Fatal(st)
		}
		if st := ts.do(t, "DELETE", "/tmp", "", nil); st != 200 {
			t.Fatal(st)
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d reads of every index failed while another index was created and deleted; first: %v", n, first.Load())
	}
}
