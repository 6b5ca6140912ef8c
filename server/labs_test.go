package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// The routing labs of docs/labs, as Go: the same requests, checked.

func bulkBody(lines func(add func(meta, src string))) string {
	var b strings.Builder
	lines(func(meta, src string) { fmt.Fprintf(&b, "%s\n%s\n", meta, src) })
	return b.String()
}

// TestLab1RoutingByHand: user-42 on an 8-shard index is hash −1591625367,
// partition 361, shard 2 of 8; the API agrees.
func TestLab1RoutingByHand(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/lab1", `{"settings":{"number_of_shards":8,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/lab1/_doc/user-42?refresh=true", `{"user":"user-42"}`, nil)
	tab, _ := ts.svc.Table("lab1")
	p := tab.Settings().Place("user-42", "")
	if p.Hash != -1591625367 || p.Partition != 361 || p.Root != 2 || tab.Settings().RoutingShards != 1024 {
		t.Fatalf("by hand: %+v, R %d", p, tab.Settings().RoutingShards)
	}
	var ss struct {
		Shards [][]struct{ Shard int } `json:"shards"`
	}
	ts.do(t, "POST", "/lab1/_search_shards?routing=user-42", "", &ss)
	if len(ss.Shards) != 1 || ss.Shards[0][0].Shard != 2 {
		t.Fatalf("_search_shards: %+v", ss)
	}
	var cat []map[string]string
	ts.do(t, "GET", "/_cat/shards/lab1?format=json&h=shard,docs", "", &cat)
	for _, row := range cat {
		if want := map[bool]string{true: "1", false: "0"}[row["shard"] == "2"]; row["docs"] != want {
			t.Fatalf("_cat/shards row %v", row)
		}
	}
}

// inodes returns the inodes of the table files under dir.
func inodes(t *testing.T, dir string) map[uint64]bool {
	t.Helper()
	out := map[uint64]bool{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".sst") {
			out[info.Sys().(*syscall.Stat_t).Ino] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func shared(a, b map[uint64]bool) int {
	n := 0
	for ino := range a {
		if b[ino] {
			n++
		}
	}
	return n
}

// TestLab2ResizeHardLinks: write block, then _split, _shrink and _clone;
// every target holds every document and shares table files (inodes) with
// the source.
func TestLab2ResizeHardLinks(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/lab2", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil)
	ts.do(t, "POST", "/lab2/_bulk", bulkBody(func(add func(string, string)) {
		for i := range 200 {
			add(fmt.Sprintf(`{"index":{"_id":"doc-%d"}}`, i), fmt.Sprintf(`{"n":%d}`, i))
		}
	}), nil)
	var eb errBody
	if ts.do(t, "PUT", "/lab2/_split/lab2-split", `{"settings":{"index.number_of_shards":4}}`, &eb); eb.Error.Type != "illegal_state_exception" {
		t.Fatalf("split without the block: %+v", eb)
	}
	ts.do(t, "PUT", "/lab2/_settings", `{"index.blocks.write":true}`, nil)
	for _, tc := range []struct{ op, target, shards string }{{"_split", "lab2-split", "4"}, {"_shrink", "lab2-shrink", "1"}, {"_clone", "lab2-clone", "2"}} {
		body := fmt.Sprintf(`{"settings":{"index.number_of_shards":%s,"index.blocks.write":null}}`, tc.shards)
		if st := ts.do(t, "PUT", "/lab2/"+tc.op+"/"+tc.target, body, &eb); st != 200 {
			t.Fatalf("%s: %d %+v", tc.op, st, eb)
		}
		var cnt struct{ Count int }
		if ts.do(t, "GET", "/"+tc.target+"/_count", "", &cnt); cnt.Count != 200 {
			t.Fatalf("%s holds %d documents", tc.target, cnt.Count)
		}
		src, _ := ts.svc.IndexDirOf("lab2")
		dst, _ := ts.svc.IndexDirOf(tc.target)
		if n := shared(inodes(t, src), inodes(t, dst)); n == 0 {
			t.Fatalf("%s shares no table file with lab2", tc.target)
		}
	}
}

// TestLab3PartitionFanout: with routing_partition_size 3 (and R = N so that
// consecutive routing slots are different shards) a tenant's routed search
// reaches 3 shards instead of 8 and finds all its documents; with the
// default R the slots collapse into one shard.
func TestLab3PartitionFanout(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/lab3", `{"settings":{"number_of_shards":8,"number_of_routing_shards":8,"index.routing_partition_size":3,"number_of_replicas":0},"mappings":{"_routing":{"required":true}}}`, nil)
	ts.do(t, "PUT", "/lab3-default", `{"settings":{"number_of_shards":8,"index.routing_partition_size":3,"number_of_replicas":0},"mappings":{"_routing":{"required":true}}}`, nil)
	body := bulkBody(func(add func(string, string)) {
		for _, tenant := range []string{"a", "b", "c", "d"} {
			for i := range 30 {
				add(fmt.Sprintf(`{"index":{"_id":"%s-%d","routing":"tenant-%s"}}`, tenant, i, tenant), `{}`)
			}
		}
	})
	ts.do(t, "POST", "/lab3/_bulk", body, nil)
	ts.do(t, "POST", "/lab3-default/_bulk", body, nil)
	groups := func(path string) int {
		var ss struct {
			Shards [][]struct{ Shard int } `json:"shards"`
		}
		ts.do(t, "POST", path, "", &ss)
		return len(ss.Shards)
	}
	if n := groups("/lab3/_search_shards"); n != 8 {
		t.Fatalf("unrouted: %d shards", n)
	}
	for _, tenant := range []string{"a", "b", "c", "d"} {
		if n := groups("/lab3/_search_shards?routing=tenant-" + tenant); n != 3 {
			t.Fatalf("tenant-%s: %d shards, want 3", tenant, n)
		}
		var cnt struct{ Count int }
		ts.do(t, "POST", "/lab3/_count?routing=tenant-"+tenant, fmt.Sprintf(`{"query":{"term":{"_routing":"tenant-%s"}}}`, tenant), &cnt)
		if cnt.Count != 30 {
			t.Fatalf("tenant-%s: routed search found %d of 30", tenant, cnt.Count)
		}
		if n := groups("/lab3-default/_search_shards?routing=tenant-" + tenant); n < 1 || n > 2 {
			t.Fatalf("lab3-default tenant-%s: %d shards", tenant, n)
		}
	}
}

// TestLab4InPlaceSplit: the same index split in place (no write block, no
// new index): user-42 moves from shard 2 to child 9, as
// `splitdemo route --shards 8 --split 2:2 user-42` says, and nothing is lost;
// then the children are merged back into shard 10, as
// `splitdemo route --shards 8 --split 2:2 --merge 8+9 user-42` says.
func TestLab4InPlaceSplit(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/lab4", `{"settings":{"number_of_shards":8,"number_of_replicas":0}}`, nil)
	ts.do(t, "POST", "/lab4/_bulk", bulkBody(func(add func(string, string)) {
		for i := range 400 {
			add(fmt.Sprintf(`{"index":{"_id":"doc-%d"}}`, i), `{}`)
		}
	}), nil)
	ts.do(t, "PUT", "/lab4/_doc/user-42", `{"user":"user-42"}`, nil)
	var task struct{ Task string }
	ts.do(t, "POST", "/lab4/_shards/2/_split", `{"number_of_splits":2}`, &task)
	var done struct {
		Completed bool
		Response  struct {
			Children    []int
			LinkedBytes int64 `json:"linked_bytes"`
			CopiedBytes int64 `json:"copied_bytes"`
		}
	}
	ts.do(t, "GET", "/_tasks/"+task.Task+"?wait_for_completion=true", "", &done)
	if !done.Completed || fmt.Sprint(done.Response.Children) != "[8 9]" || done.Response.LinkedBytes+done.Response.CopiedBytes == 0 {
		t.Fatalf("task: %+v", done)
	}
	var ss struct {
		Shards [][]struct{ Shard int } `json:"shards"`
	}
	ts.do(t, "POST", "/lab4/_search_shards?routing=user-42", "", &ss)
	if ss.Shards[0][0].Shard != 9 {
		t.Fatalf("user-42 after the split: shard %d, want 9", ss.Shards[0][0].Shard)
	}
	var cnt struct{ Count int }
	if ts.do(t, "GET", "/lab4/_count", "", &cnt); cnt.Count != 401 {
		t.Fatalf("%d documents after the split, want 401", cnt.Count)
	}
	var cat []map[string]string
	ts.do(t, "GET", "/_cat/shards/lab4?format=json&h=shard,state", "", &cat)
	if len(cat) != 9 {
		t.Fatalf("_cat/shards after the split: %v", cat)
	}
	for _, row := range cat {
		if row["state"] != "STARTED" || row["shard"] == "2" {
			t.Fatalf("_cat/shards after the split: %v", cat)
		}
	}

	var refused struct{ Status int }
	if st := ts.do(t, "POST", "/lab4/_shards/_merge", `{"shards":[8,3]}`, &refused); st != 400 || refused.Status != 400 {
		t.Fatalf("merge of shards in different roots: %d %+v", st, refused)
	}
	ts.do(t, "POST", "/lab4/_shards/_merge", `{"shards":[8,9]}`, &task)
	ts.do(t, "GET", "/_cat/shards/lab4?format=json&h=shard,state", "", &cat)
	states := map[string]string{}
	for _, row := range cat {
		states[row["shard"]] = row["state"]
	}
	if states["8"] != "MERGING" || states["9"] != "MERGING" || states["10"] != "INITIALIZING" {
		t.Fatalf("_cat/shards during the merge: %v", states)
	}
	var merged struct {
		Completed bool
		Response  struct{ Target int }
	}
	ts.do(t, "GET", "/_tasks/"+task.Task+"?wait_for_completion=true", "", &merged)
	if !merged.Completed || merged.Response.Target != 10 {
		t.Fatalf("merge task: %+v", merged)
	}
	ts.do(t, "POST", "/lab4/_search_shards?routing=user-42", "", &ss)
	if ss.Shards[0][0].Shard != 10 {
		t.Fatalf("user-42 after the merge: shard %d, want 10", ss.Shards[0][0].Shard)
	}
	if ts.do(t, "GET", "/lab4/_count", "", &cnt); cnt.Count != 401 {
		t.Fatalf("%d documents after the merge, want 401", cnt.Count)
	}
	ts.do(t, "GET", "/_cat/shards/lab4?format=json&h=shard,state", "", &cat)
	if len(cat) != 8 {
		t.Fatalf("_cat/shards after the merge: %v", cat)
	}
	for _, row := range cat {
		if row["state"] != "STARTED" || row["shard"] == "8" || row["shard"] == "9" {
			t.Fatalf("_cat/shards after the merge: %v", cat)
		}
	}
}
