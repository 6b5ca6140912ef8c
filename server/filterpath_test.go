package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestFilterPath: filter_path filters every JSON response as OpenSearch's
// XContent filtering does: dotted paths through objects and arrays, '*'
// within a name, "**" for any depth, a leading '-' to exclude; nothing
// matched is {}; an error body is not filtered.
func TestFilterPath(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/fp", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/fp/_doc/1?refresh=true", `{"a":{"b":1,"c":2}}`, nil)
	for _, tc := range []struct{ path, want string }{
		{"/fp/_doc/1?filter_path=_id,_source.a.b", `{"_id":"1","_source":{"a":{"b":1}}}`},
		{"/fp/_doc/1?filter_path=_s*", `{"_seq_no":0,"_source":{"a":{"b":1,"c":2}}}`},
		{"/fp/_doc/1?filter_path=**.c", `{"_source":{"a":{"c":2}}}`},
		{"/fp/_doc/1?filter_path=-_source,-_seq_no,-_primary_term,-_version", `{"_id":"1","_index":"fp","found":true}`},
		{"/fp/_doc/1?filter_path=_source,-_source.a.c", `{"_source":{"a":{"b":1}}}`},
		{"/fp/_doc/1?filter_path=nothing", `{}`},
		{"/fp/_search?filter_path=hits.hits._id", `{"hits":{"hits":[{"_id":"1"}]}}`},
		{"/_cat/indices?format=json&filter_path=index", `[{"index":"fp"}]`},
		{"/nope/_doc/1?filter_path=status", `{"error":{"index":"nope","index_uuid":"_na_","reason":"no such index [nope]","resource.id":"nope","resource.type":"index_or_alias","root_cause":[{"index":"nope","index_uuid":"_na_","reason":"no such index [nope]","resource.id":"nope","resource.type":"index_or_alias","type":"index_not_found_exception"}],"type":"index_not_found_exception"},"status":404}`},
	} {
		var got string
		ts.do(t, "GET", tc.path, "", &got)
		if got != tc.want {
			t.Errorf("GET %s:\n got %s\nwant %s", tc.path, got, tc.want)
		}
	}
}

// TestIncludeDefaultsHonouredOrRefused: include_defaults adds the
// defaults where this server knows them (cluster settings) and is refused
// where it does not (index settings), rather than ignored.
func TestIncludeDefaultsHonouredOrRefused(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/d", `{"settings":{"number_of_replicas":0}}`, nil)
	for _, path := range []string{"/d/_settings?include_defaults=true", "/d?include_defaults=true"} {
		var eb errBody
		if st := ts.do(t, "GET", path, "", &eb); st != 400 || eb.Error.Reason != "parameter [include_defaults] is not supported by shardsplit on index settings" {
			t.Errorf("GET %s: %d %+v", path, st, eb)
		}
	}
	if st := ts.do(t, "GET", "/d/_settings?include_defaults=false", "", nil); st != 200 {
		t.Errorf("include_defaults=false: %d", st)
	}
	var cs map[string]any
	if st := ts.do(t, "GET", "/_cluster/settings?include_defaults=true", "", &cs); st != 200 || cs["defaults"] == nil {
		t.Errorf("cluster settings with defaults: %d %v", st, cs)
	}
}
