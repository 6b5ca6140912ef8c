package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewRESTOneWriteIndexPerAlias: an alias has at most one write index,
// as OpenSearch's metadata validation requires ("alias [w] has more than one
// write index [a,b]", an IllegalStateException). Two were accepted, by one
// _aliases request or by a create whose alias named an existing write
// alias, and a write through the alias then went to whichever index sorted
// last: an acknowledged write placed by accident.
func TestReviewRESTOneWriteIndexPerAlias(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, n := range []string{"a", "b"} {
		if st := ts.do(t, "PUT", "/"+n, `{"settings":{"number_of_replicas":0}}`, nil); st != 200 {
			t.Fatal(st)
		}
	}
	var eb errBody
	st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"a","alias":"w","is_write_index":true}},{"add":{"index":"b","alias":"w","is_write_index":true}}]}`, &eb)
	if st != 500 || eb.Error.Type != "illegal_state_exception" || eb.Error.Reason != "alias [w] has more than one write index [a,b]" {
		t.Fatalf("two write indices in one request: HTTP %d %+v", st, eb)
	}
	if st := ts.do(t, "GET", "/_alias/w", "", nil); st != 404 {
		t.Fatalf("the refused request left alias w: %d", st)
	}
	if st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"a","alias":"w","is_write_index":true}}]}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/_aliases", `{"actions":[{"add":{"index":"b","alias":"w","is_write_index":true}}]}`},
		{"PUT", "/b/_alias/w", `{"is_write_index":true}`},
		{"PUT", "/c", `{"settings":{"number_of_replicas":0},"aliases":{"w":{"is_write_index":true}}}`},
	} {
		var eb errBody
		st := ts.do(t, tc.method, tc.path, tc.body, &eb)
		if st != 500 || eb.Error.Type != "illegal_state_exception" {
			t.Errorf("%s %s: HTTP %d %+v; want 500 illegal_state_exception", tc.method, tc.path, st, eb)
		}
	}
	var res struct {
		Index string `json:"_index"`
	}
	if st := ts.do(t, "PUT", "/w/_doc/1", `{}`, &res); st != 201 || res.Index != "a" {
		t.Fatalf("a write through w: %d into %q, want a", st, res.Index)
	}
	// Moving the write index in one request is fine.
	if st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"a","alias":"w","is_write_index":false}},{"add":{"index":"b","alias":"w","is_write_index":true}}]}`, nil); st != 200 {
		t.Fatalf("moving the write index: %d", st)
	}
}

// TestReviewRESTDeleteIndexIgnoresAliases: DELETE /{index} deletes only
// indices it names: an alias is refused, as OpenSearch's delete resolves
// with ignore_aliases ("The provided expression [current] matches an
// alias, specify the corresponding concrete indices instead."), and a
// wildcard matches index names only. DELETE /current deleted the index
// behind the alias, and DELETE /cur* every index with a matching alias.
func TestReviewRESTDeleteIndexIgnoresAliases(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_replicas":0},"aliases":{"current":{}}}`, nil); st != 200 {
		t.Fatal(st)
	}
	var eb errBody
	st := ts.do(t, "DELETE", "/current", "", &eb)
	if st != 400 || eb.Error.Type != "illegal_argument_exception" ||
		eb.Error.Reason != "The provided expression [current] matches an alias, specify the corresponding concrete indices instead." {
		t.Errorf("DELETE /current: HTTP %d %+v", st, eb)
	}
	if st := ts.do(t, "DELETE", "/cur*", "", nil); st != 200 {
		t.Errorf("DELETE /cur*: %d", st)
	}
	if st := ts.do(t, "HEAD", "/logs", "", nil); st != 200 {
		t.Fatalf("index logs after deletes that named only its alias: %d", st)
	}
	if st := ts.do(t, "DELETE", "/lo*", "", nil); st != 200 {
		t.Fatalf("DELETE /lo*: %d", st)
	}
	if st := ts.do(t, "HEAD", "/logs", "", nil); st != 404 {
		t.Fatalf("index logs after DELETE /lo*: %d", st)
	}
}
