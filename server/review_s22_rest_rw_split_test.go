package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTReadYourWritesDuringSplits: each worker owns a few ids
// and overwrites, deletes and re-creates them over HTTP while shards split
// in place through the API, reading every id back after each acknowledged
// write: a GET must answer the last acknowledged state (the source written,
// or not found after a delete), and the _version must grow by one per
// acknowledged overwrite of a live document.
func TestReviewS22RESTReadYourWritesDuringSplits(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/rw", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	const workers, idsEach = 4, 8
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			version := map[string]int{} // 0: not live
			for n := 0; ctx.Err() == nil; n++ {
				id := fmt.Sprintf("w%d-%d", w, n%idsEach)
				routing := fmt.Sprint("r", n%idsEach%3) // one routing per id
				if n%5 == 4 {
					var res struct {
						Result string `json:"result"`
					}
					st := ts.do(t, "DELETE", "/rw/_doc/"+id+"?routing="+routing, "", &res)
					if (version[id] > 0 && st != 200) || (version[id] == 0 && st != 404) {
						errs <- fmt.Sprintf("delete %s (live version %d): HTTP %d %s", id, version[id], st, res.Result)
						return
					}
					version[id] = 0
				} else {
					var res struct {
						Version int `json:"_version"`
					}
					st := ts.do(t, "PUT", "/rw/_doc/"+id+"?routing="+routing, fmt.Sprintf(`{"n":%d}`, n), &res)
					if st != 200 && st != 201 {
						errs <- fmt.Sprintf("index %s: HTTP %d", id, st)
						return
					}
					if version[id] > 0 && res.Version != version[id]+1 {
						errs <- fmt.Sprintf("index %s over live version %d: _version %d", id, version[id], res.Version)
						return
					}
					version[id] = res.Version
				}
				var got struct {
					Found  bool            `json:"found"`
					Source json.RawMessage `json:"_source"`
				}
				st := ts.do(t, "GET", "/rw/_doc/"+id+"?routing="+routing, "", &got)
				if version[id] == 0 && (st != 404 || got.Found) {
					errs <- fmt.Sprintf("get %s after its acknowledged delete: HTTP %d %s", id, st, got.Source)
					return
				}
				if version[id] > 0 && (st != 200 || string(got.Source) != fmt.Sprintf(`{"n":%d}`, n)) {
					errs <- fmt.Sprintf("get %s after acknowledged {\"n\":%d}: HTTP %d %s", id, n, st, got.Source)
					return
				}
			}
		}()
	}
	// Split the last shard in place, again and again, until the time is up.
	splits := 0
	for ; ctx.Err() == nil; splits++ {
		tab, err := ts.svc.Table("rw")
		if err != nil {
			t.Fatal(err)
		}
		var task struct {
			Task string `json:"task"`
		}
		shard := tab.ActiveShards()[len(tab.ActiveShards())-1]
		if st := ts.do(t, "POST", fmt.Sprintf("/rw/_shards/%d/_split?wait_for_completion=true", shard), `{"number_of_splits":2}`, &task); st != 200 {
			break // too deep to split further: stop splitting, let the writers finish
		}
	}
	wg.Wait()
	t.Logf("%d splits", splits)
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
