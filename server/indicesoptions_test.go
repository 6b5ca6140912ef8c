package server_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/service"
)

// allow_no_indices and ignore_unavailable are read, with each request's
// OpenSearch default (IndicesOptions), not accepted and ignored: a search
// of logs,missing with ignore_unavailable=true answers logs' hits, a
// wildcard matching nothing under allow_no_indices=false is a 404, and
// the cluster state and _search_shards are lenient by default.
func TestIndicesOptionsParameters(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatalf("create: %d", st)
	}
	if st := ts.do(t, "PUT", "/logs/_doc/1?refresh=true", `{"a":1}`, nil); st != 201 {
		t.Fatalf("index: %d", st)
	}
	type result struct {
		Status int
		Type   string
		Reason string
		Hits   int
	}
	do := func(method, path, body string) result {
		var out struct {
			errBody
			Hits struct {
				Total struct {
					Value int `json:"value"`
				} `json:"total"`
			} `json:"hits"`
		}
		st := ts.do(t, method, path, body, &out)
		return result{st, out.Error.Type, out.Error.Reason, out.Hits.Total.Value}
	}
	notFound := func(reason string) result { return result{404, "index_not_found_exception", reason, 0} }
	for _, tc := range []struct {
		method, path, body string
		want               result
	}{
		{"GET", "/logs,missing/_search", "", notFound("no such index [missing]")},
		{"GET", "/logs,missing/_search?ignore_unavailable=true", "", result{200, "", "", 1}},
		{"GET", "/missing/_search?ignore_unavailable=true", "", result{200, "", "", 0}},
		{"GET", "/missing/_search?ignore_unavailable=true&allow_no_indices=false", "", notFound("no such index [missing]")},
		{"GET", "/missing,gone/_search?ignore_unavailable=true&allow_no_indices=false", "", notFound("no such index [null]")},
		{"GET", "/nope*/_search", "", result{200, "", "", 0}},
		{"GET", "/nope*/_search?allow_no_indices=false", "", notFound("no such index [nope*]")},
		{"GET", "/nope*/_count?allow_no_indices=false", "", notFound("no such index [nope*]")},
		{"GET", "/logs/_search?ignore_unavailable=maybe", "", result{400, "illegal_argument_exception", "Failed to parse value [maybe] as only [true] or [false] are allowed.", 0}},
		{"PUT", "/nope*/_settings", `{"index.number_of_replicas":0}`, notFound("no such index [nope*]")},
		{"PUT", "/nope*/_settings?allow_no_indices=true", `{"index.number_of_replicas":0}`, result{200, "", "", 0}},
		{"PUT", "/logs,missing/_settings?ignore_unavailable=true", `{"index.number_of_replicas":0}`, result{200, "", "", 0}},
		{"GET", "/missing/_settings", "", notFound("no such index [missing]")},
		{"GET", "/missing/_settings?ignore_unavailable=true", "", result{200, "", "", 0}},
		{"GET", "/missing/_search_shards", "", result{200, "", "", 0}},
		{"GET", "/missing/_search_shards?ignore_unavailable=false", "", notFound("no such index [missing]")},
		{"GET", "/_cluster/state/metadata/missing", "", result{200, "", "", 0}},
		{"POST", "/logs,missing/_refresh?ignore_unavailable=true", "", result{200, "", "", 0}},
		{"DELETE", "/missing?ignore_unavailable=true", "", result{200, "", "", 0}},
		{"DELETE", "/missing", "", notFound("no such index [missing]")},
	} {
		if diff := cmp.Diff(tc.want, do(tc.method, tc.path, tc.body)); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
		}
	}
	if got := do("GET", "/logs/_search", ""); got.Hits != 1 {
		t.Errorf("logs after the requests: %+v, want its one document", got)
	}
}

// preserve_existing=true is refused, not ignored: ignoring it overwrote
// the settings it asks to keep.
func TestPreserveExistingIsRefused(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_replicas":0,"refresh_interval":"5s"}}`, nil); st != 200 {
		t.Fatalf("create: %d", st)
	}
	var out errBody
	if st := ts.do(t, "PUT", "/logs/_settings?preserve_existing=true", `{"index.refresh_interval":"1s"}`, &out); st != 400 ||
		out.Error.Reason != "parameter [preserve_existing] is not supported by shardsplit" {
		t.Errorf("preserve_existing=true: %d %+v, want 400 not supported", st, out.Error)
	}
	var got map[string]struct {
		Settings map[string]string `json:"settings"`
	}
	if st := ts.do(t, "GET", "/logs/_settings?flat_settings=true", "", &got); st != 200 || got["logs"].Settings["index.refresh_interval"] != "5s" {
		t.Errorf("refresh_interval after the refused update: %d %v, want 5s", st, got["logs"].Settings["index.refresh_interval"])
	}
	if st := ts.do(t, "PUT", "/logs/_settings?preserve_existing=false", `{"index.refresh_interval":"1s"}`, nil); st != 200 {
		t.Errorf("preserve_existing=false: %d, want 200", st)
	}
}
