package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestCatOptions covers _cat's h (with aliases), s (numeric, desc), v,
// bytes, help and format=json (values as strings).
func TestCatOptions(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/c", `{"settings":{"number_of_shards":3,"number_of_replicas":0}}`, nil)
	var b strings.Builder
	for i := range 60 {
		fmt.Fprintf(&b, "{\"index\":{\"_id\":\"%d\"}}\n{\"pad\":\"%s\"}\n", i, strings.Repeat("x", 100))
	}
	ts.do(t, "POST", "/c/_bulk", b.String(), nil)
	var rows []map[string]string
	ts.do(t, "GET", "/_cat/shards/c?format=json&h=s,d,sto&s=d:desc&bytes=b", "", &rows)
	if len(rows) != 3 {
		t.Fatalf("rows %v", rows)
	}
	total := 0
	prev := 1 << 30
	for _, r := range rows {
		var docs, bytes int
		fmt.Sscan(r["d"], &docs)
		if _, err := fmt.Sscan(r["sto"], &bytes); err != nil || bytes <= 0 {
			t.Fatalf("store in bytes: %v", r)
		}
		if docs > prev {
			t.Fatalf("not sorted by docs descending: %v", rows)
		}
		prev = docs
		total += docs
	}
	if total != 60 {
		t.Fatalf("%d docs", total)
	}
	var text string
	ts.do(t, "GET", "/_cat/shards/c?v&h=index,shard,prirep,state,docs&s=shard", "", &text)
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "index shard prirep state") || !strings.HasPrefix(lines[1], "c         0 p      STARTED") {
		t.Fatalf("text table:\n%s", text)
	}
	ts.do(t, "GET", "/_cat/shards?help", "", &text)
	if !strings.Contains(text, "prirep") || !strings.Contains(text, "primary or replica") {
		t.Fatalf("help:\n%s", text)
	}
	var eb errBody
	if st := ts.do(t, "GET", "/_cat/shards?h=nope", "", &eb); st != 400 || eb.Error.Reason != "Unable to find column [nope] in the table" {
		t.Fatalf("unknown column: %d %+v", st, eb)
	}
	if st := ts.do(t, "GET", "/_cat/indices?bytes=zz", "", &eb); st != 400 {
		t.Fatalf("bad unit: %d %+v", st, eb)
	}
	ts.do(t, "GET", "/_cat/indices?format=json", "", &rows)
	if len(rows) != 1 || rows[0]["docs.count"] != "60" || rows[0]["pri"] != "3" || rows[0]["health"] != "green" {
		t.Fatalf("_cat/indices json: %v", rows)
	}
}
