package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestResizeAndAliasREST covers the resize rules the client test does not:
// the target's request settings, inherited blocks, aliases in the body,
// and the single-alias endpoints.
func TestResizeAndAliasREST(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/src", `{"settings":{"number_of_shards":2,"number_of_replicas":0},"mappings":{"properties":{"a":{"type":"keyword"}}}}`, nil)
	ts.do(t, "PUT", "/src/_doc/1", `{"a":"x"}`, nil)
	for _, tc := range []struct {
		name, path, body string
		status           int
		typ, reason      string
	}{
		{"missing source", "/nope/_clone/t", "", 404, "index_not_found_exception", "no such index [nope]"},
		{"no write block", "/src/_clone/t", "", 500, "illegal_state_exception",
			`index src must block write operations to resize index. use "index.blocks.write=true"`},
		{"read_only target", "/src/_clone/t", `{"settings":{"index.blocks.read_only":true,"index.blocks.metadata":true}}`, 400, "action_request_validation_exception",
			"Validation Failed: 1: target index [t] will be blocked by [index.blocks.read_only=true], this will disable metadata writes and cause the shards to be unassigned;" +
				"2: target index [t] will be blocked by [index.blocks.metadata=true], this will disable metadata writes and cause the shards to be unassigned;"},
		{"mappings in a resize", "/src/_clone/t", `{"mappings":{}}`, 400, "illegal_argument_exception", ""},
		{"unknown body field", "/src/_clone/t", `{"bogus":{}}`, 400, "parse_exception", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var eb errBody
			if st := ts.do(t, "PUT", tc.path, tc.body, &eb); st != tc.status || eb.Error.Type != tc.typ || (tc.reason != "" && eb.Error.Reason != tc.reason) {
				t.Fatalf("%d %+v", st, eb)
			}
		})
	}
	// read_only on the source is a write block; the target inherits it,
	// which is refused unless the request clears it.
	ts.do(t, "PUT", "/src/_settings", `{"index.blocks.read_only":true}`, nil)
	var eb errBody
	if st := ts.do(t, "PUT", "/src/_clone/t", "", &eb); st != 400 || eb.Error.Type != "illegal_argument_exception" {
		t.Fatalf("inherited read_only: %d %+v", st, eb)
	}
	if st := ts.do(t, "PUT", "/src/_clone/t", `{"settings":{"index.blocks.read_only":null},"aliases":{"t-alias":{}}}`, &eb); st != 200 {
		t.Fatalf("clone clearing read_only: %d %+v", st, eb)
	}
	var got map[string]any
	ts.do(t, "GET", "/t-alias/_doc/1", "", &got)
	if got["found"] != true || got["_index"] != "t" {
		t.Fatalf("get through the target's alias: %v", got)
	}
	var mapping map[string]map[string]any
	ts.do(t, "GET", "/t/_mapping", "", &mapping)
	if mapping["t"]["mappings"] == nil || len(mapping["t"]["mappings"].(map[string]any)) == 0 {
		t.Fatalf("the target did not keep the source's mappings: %v", mapping)
	}
	// Single-alias endpoints.
	if st := ts.do(t, "PUT", "/t/_alias/one", `{"routing":"r"}`, nil); st != 200 {
		t.Fatal(st)
	}
	var aliases map[string]map[string]map[string]map[string]any
	ts.do(t, "GET", "/_alias/one", "", &aliases)
	if aliases["t"]["aliases"]["one"]["index_routing"] != "r" || len(aliases) != 1 {
		t.Fatalf("GET /_alias/one: %v", aliases)
	}
	if st := ts.do(t, "DELETE", "/t/_alias/one", "", nil); st != 200 {
		t.Fatal(st)
	}
	var missing map[string]any
	if st := ts.do(t, "GET", "/_alias/one", "", &missing); st != 404 || missing["error"] != "alias [one] missing" {
		t.Fatalf("GET of a deleted alias: %d %+v", st, missing)
	}
	if st := ts.do(t, "DELETE", "/t/_alias/one", "", &eb); st != 404 {
		t.Fatalf("DELETE of a missing alias: %d %+v", st, eb)
	}
}

// OpenSearch's ResizeRequest.validate refuses, as
// action_request_validation_exception (400), a _split without the target's
// index.number_of_shards and a max_shard_size that is not above 0 (which
// would shrink the index to one shard).
func TestResizeRequestValidation(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/src", `{"settings":{"number_of_shards":4,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/src/_doc/1", `{"a":"x"}`, nil)
	ts.do(t, "PUT", "/src/_settings", `{"index.blocks.write":true}`, nil)
	for _, tc := range []struct {
		name, path, body string
		reason           string
	}{
		{"split without number_of_shards", "/src/_split/t", "",
			"Validation Failed: 1: index.number_of_shards is required for split operations;"},
		{"split with a null number_of_shards", "/src/_split/t", `{"settings":{"index.number_of_shards":null}}`,
			"Validation Failed: 1: index.number_of_shards is required for split operations;"},
		{"shrink with max_shard_size 0", "/src/_shrink/t", `{"max_shard_size":"0b"}`,
			"Validation Failed: 1: max_shard_size must be greater than 0;"},
		{"both, with a read_only target", "/src/_split/t", `{"settings":{"index.blocks.read_only":true}}`,
			"Validation Failed: 1: index.number_of_shards is required for split operations;" +
				"2: target index [t] will be blocked by [index.blocks.read_only=true], this will disable metadata writes and cause the shards to be unassigned;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var eb errBody
			st := ts.do(t, "PUT", tc.path, tc.body, &eb)
			if st != 400 || eb.Error.Type != "action_request_validation_exception" || eb.Error.Reason != tc.reason {
				t.Fatalf("got %d %s %q, want 400 action_request_validation_exception %q", st, eb.Error.Type, eb.Error.Reason, tc.reason)
			}
		})
	}
	if st := ts.do(t, "HEAD", "/t", "", nil); st != 404 {
		t.Errorf("a refused resize left its target: HEAD /t = %d", st)
	}
}

// A resize's target index.number_of_shards above 1024 is refused as
// OpenSearch's TransportResizeAction reads it (Setting.parseInt, before any
// shard selection): 400 illegal_argument_exception naming the value, not
// the selection's error (for a split a 500 illegal_state_exception about
// routing shards).
func TestResizeTargetShardsAboveTheMaximum(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/src", `{"settings":{"number_of_shards":4,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/src/_settings", `{"index.blocks.write":true}`, nil)
	const reason = "Failed to parse value [2048] for setting [index.number_of_shards] must be <= 1024"
	for _, op := range []string{"_split", "_shrink", "_clone"} {
		t.Run(op, func(t *testing.T) {
			var eb errBody
			st := ts.do(t, "PUT", "/src/"+op+"/t", `{"settings":{"index.number_of_shards":2048}}`, &eb)
			if st != 400 || eb.Error.Type != "illegal_argument_exception" || eb.Error.Reason != reason {
				t.Fatalf("got %d %s %q, want 400 illegal_argument_exception %q", st, eb.Error.Type, eb.Error.Reason, reason)
			}
		})
	}
}

// A source whose index.blocks.read_only the target would inherit is refused
// with TransportResizeAction's message, verbatim.
func TestResizeInheritedReadOnlyMessage(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/src", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/src/_settings", `{"index.blocks.read_only":true}`, nil)
	const reason = "target index [t] will be blocked by [index.blocks.read_only=true] which is copied from the source index [src], " +
		"this will disable metadata writes and cause the shards to be unassigned"
	var eb errBody
	st := ts.do(t, "PUT", "/src/_clone/t", "", &eb)
	if st != 400 || eb.Error.Type != "illegal_argument_exception" || eb.Error.Reason != reason {
		t.Fatalf("got %d %s %q, want 400 illegal_argument_exception %q", st, eb.Error.Type, eb.Error.Reason, reason)
	}
}
