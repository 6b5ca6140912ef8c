package server_test

import (
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// Mappings with "_routing": {"required": true} are applied, not only
// stored: OpenSearch refuses every document operation without a routing
// value on such an index with RoutingMissingException (400, "routing is
// required for [index]/[id]", its message and status in OpenSearch's
// exception tests).
// An alias's index_routing is a routing value.
func TestRoutingRequiredByTheMappings(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/r", `{"mappings":{"_routing":{"required":true}},"aliases":{"ra":{"index_routing":"u1"}}}`, nil); st != 200 {
		t.Fatal(st)
	}
	type errBody struct {
		Error struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"error"`
	}
	for _, tc := range []struct{ method, path, body string }{
		{"PUT", "/r/_doc/1", `{"v":1}`},
		{"POST", "/r/_doc/1", `{"v":1}`},
		{"PUT", "/r/_create/1", `{"v":1}`},
		{"GET", "/r/_doc/1", ""},
		{"DELETE", "/r/_doc/1", ""},
	} {
		var e errBody
		st := ts.do(t, tc.method, tc.path, tc.body, &e)
		if st != 400 || e.Error.Type != "routing_missing_exception" || e.Error.Reason != "routing is required for [r]/[1]" {
			t.Errorf("%s %s without routing: HTTP %d %+v, want 400 routing_missing_exception \"routing is required for [r]/[1]\"", tc.method, tc.path, st, e.Error)
		}
	}
	if st := ts.do(t, "PUT", "/r/_doc/1?routing=u1", `{"v":1}`, nil); st != 201 {
		t.Errorf("a write with routing: HTTP %d, want 201", st)
	}
	if st := ts.do(t, "PUT", "/ra/_doc/2", `{"v":2}`, nil); st != 201 {
		t.Errorf("a write through an alias with index_routing: HTTP %d, want 201", st)
	}
	var bulk struct {
		Errors bool `json:"errors"`
		Items  []map[string]struct {
			Status int `json:"status"`
			Error  struct {
				Type string `json:"type"`
			} `json:"error"`
		} `json:"items"`
	}
	body := strings.Join([]string{`{"index":{"_index":"r","_id":"3"}}`, `{}`, `{"index":{"_index":"r","_id":"4","routing":"u1"}}`, `{}`}, "\n") + "\n"
	if st := ts.do(t, "POST", "/_bulk", body, &bulk); st != 200 || len(bulk.Items) != 2 {
		t.Fatalf("bulk: HTTP %d, %d items", st, len(bulk.Items))
	}
	if it := bulk.Items[0]["index"]; it.Status != 400 || it.Error.Type != "routing_missing_exception" {
		t.Errorf("bulk item without routing: %+v, want 400 routing_missing_exception", it)
	}
	if it := bulk.Items[1]["index"]; it.Status != 201 {
		t.Errorf("bulk item with routing: %+v, want 201", it)
	}
}

// TestPartitionedIndexRequiresRouting: a partitioned index
// (routing_partition_size > 1) must have _routing.required in its mapping
// (DocumentMapper: "mapping type [_doc] must have routing required for
// partitioned index [p]", an illegal_argument_exception): mappings that do
// not say so refuse the creation; an index created without mappings
// refuses every write, as OpenSearch's first dynamic mapping does.
func TestPartitionedIndexRequiresRouting(t *testing.T) {
	ts := startServer(t, service.Config{})
	var eb errBody
	st := ts.do(t, "PUT", "/p", `{"settings":{"number_of_shards":4,"index.routing_partition_size":2,"number_of_replicas":0},"mappings":{"properties":{"a":{"type":"keyword"}}}}`, &eb)
	if st != 400 || eb.Error.Type != "illegal_argument_exception" || eb.Error.Reason != "mapping type [_doc] must have routing required for partitioned index [p]" {
		t.Fatalf("a partitioned index without _routing.required: %d %+v", st, eb)
	}
	if st := ts.do(t, "PUT", "/bare", `{"settings":{"number_of_shards":4,"index.routing_partition_size":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatalf("a partitioned index without mappings: %d", st)
	}
	if st := ts.do(t, "PUT", "/bare/_doc/1?routing=u", `{}`, &eb); st != 400 || eb.Error.Reason != "mapping type [_doc] must have routing required for partitioned index [bare]" {
		t.Fatalf("a write to it: %d %+v", st, eb)
	}
	if st := ts.do(t, "PUT", "/ok", `{"settings":{"number_of_shards":4,"index.routing_partition_size":2,"number_of_replicas":0},"mappings":{"_routing":{"required":true}}}`, nil); st != 200 {
		t.Fatalf("with _routing.required: %d", st)
	}
	if st := ts.do(t, "PUT", "/ok/_doc/1?routing=u", `{}`, nil); st != 201 {
		t.Fatalf("a routed write: %d", st)
	}
}
