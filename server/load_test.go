package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/service"
)

// TestLoadDuringSplits: bounded concurrent HTTP writers on loopback while
// in-place splits run through the API. No request may fail because of a
// split (no 5xx, every write answered 200/201), and every acknowledged
// write is present exactly once afterwards.
func TestLoadDuringSplits(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/load", `{"settings":{"number_of_shards":2,"number_of_replicas":0,"max_result_window":1000000}}`, nil); st != 200 {
		t.Fatal(st)
	}
	const writers = 6
	duration := 3 * time.Second
	if testing.Short() {
		duration = time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: writers}}
	var (
		mu     sync.Mutex
		acked  = map[string]bool{}
		failed []string
		writes atomic.Int64
	)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				url := ts.url + "/load/_doc/" + id + routingParam(id)
				req, _ := http.NewRequest("PUT", url, strings.NewReader(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%s: %v", id, err))
					mu.Unlock()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				writes.Add(1)
				mu.Lock()
				if resp.StatusCode == 200 || resp.StatusCode == 201 {
					acked[id] = true
				} else {
					failed = append(failed, fmt.Sprintf("%s: %d %s", id, resp.StatusCode, b))
				}
				mu.Unlock()
			}
		}()
	}
	// Split while they write: each active shard in turn, until 8 are active.
	splits := 0
	for ctx.Err() == nil {
		tab, _ := ts.svc.Table("load")
		active := tab.ActiveShards()
		if len(active) >= 8 {
			break
		}
		var task struct{ Task string }
		if st := ts.do(t, "POST", fmt.Sprintf("/load/_shards/%d/_split", active[splits%len(active)]), `{"number_of_splits":2}`, &task); st != 200 {
			t.Fatalf("split request: %d", st)
		}
		var done map[string]any
		ts.do(t, "GET", "/_tasks/"+task.Task+"?wait_for_completion=true", "", &done)
		if done["response"] == nil {
			t.Fatalf("split did not complete: %v", done)
		}
		splits++
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of %d writes failed during %d splits; first: %s", len(failed), writes.Load(), splits, failed[0])
	}
	if splits < 3 {
		t.Fatalf("only %d splits ran during the load", splits)
	}
	// Every acknowledged write is present once: the search returns each id
	// once and the count equals the acknowledged writes.
	var res struct {
		Hits struct {
			Total struct{ Value int } `json:"total"`
			Hits  []struct {
				ID string `json:"_id"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if st := ts.do(t, "POST", fmt.Sprintf("/load/_search?size=%d&track_total_hits=true", len(acked)+10), `{"query":{"match_all":{}}}`, &res); st != 200 {
		t.Fatalf("search: %d", st)
	}
	seen := map[string]int{}
	for _, h := range res.Hits.Hits {
		seen[h.ID]++
	}
	for id := range acked {
		if seen[id] != 1 {
			var got map[string]any
			st := ts.do(t, "GET", "/load/_doc/"+id+routingParam(id), "", &got)
			tab, _ := ts.svc.Table("load")
			t.Fatalf("acknowledged %s found %d times by the search (GET: %d %v; table v%d active %v, %d hits, total %d)",
				id, seen[id], st, got, tab.Version(), tab.ActiveShards(), len(res.Hits.Hits), res.Hits.Total.Value)
		}
	}
	if res.Hits.Total.Value != len(acked) || len(seen) != len(acked) {
		t.Fatalf("search found %d documents (%d distinct), %d acknowledged", res.Hits.Total.Value, len(seen), len(acked))
	}
	t.Logf("%d writes acknowledged by %d writers during %d in-place splits", len(acked), writers, splits)
}

// routingParam gives every fourth write of a writer a custom routing value.
func routingParam(id string) string {
	var w, i int
	if _, err := fmt.Sscanf(id, "w%d-%d", &w, &i); err != nil || i%4 != 0 {
		return ""
	}
	return fmt.Sprintf("?routing=tenant-%d", i%7)
}
