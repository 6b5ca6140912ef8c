package server_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/service"
)

// require_alias=true (a parameter of index, create and bulk, or a bulk
// action line's field) refuses a target that is not an alias, as
// OpenSearch's TransportBulkAction, instead of writing to it, or creating
// an index by that name when it names nothing.
func TestRequireAlias(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs-1", `{"settings":{"number_of_replicas":0},"aliases":{"logs":{}}}`, nil); st != 200 {
		t.Fatalf("create: %d", st)
	}
	type result struct {
		Status int
		Type   string
		Reason string
		Index  string
	}
	do := func(method, path, body string) result {
		var out errBody
		st := ts.do(t, method, path, body, &out)
		return result{st, out.Error.Type, out.Error.Reason, out.Error.Index}
	}
	refused := func(name string) result {
		return result{404, "index_not_found_exception",
			"no such index [" + name + "] and [require_alias] request flag is [true] and [" + name + "] is not an alias", name}
	}
	for _, tc := range []struct {
		method, path, body string
		want               result
	}{
		{"PUT", "/typo/_doc/1?require_alias=true", `{"a":1}`, refused("typo")},
		{"POST", "/typo/_doc?require_alias", `{"a":1}`, refused("typo")},
		{"PUT", "/typo/_create/1?require_alias=true", `{"a":1}`, refused("typo")},
		{"PUT", "/logs-1/_doc/1?require_alias=true", `{"a":1}`, refused("logs-1")},
		{"PUT", "/logs/_doc/1?require_alias=true", `{"a":1}`, result{Status: 201}},
		{"PUT", "/logs/_doc/2?require_alias=false", `{"a":1}`, result{Status: 201}},
		{"PUT", "/logs/_doc/3?require_alias=yes", `{"a":1}`, result{400, "illegal_argument_exception", "Failed to parse value [yes] as only [true] or [false] are allowed.", ""}},
		{"POST", "/_bulk", `{"index":{"_index":"typo2","_id":"1","require_alias":true}}` + "\n{}\n", result{Status: 200}},
		{"POST", "/_bulk", `{"index":{"_index":"typo2","_id":"1","require_alias":""}}` + "\n{}\n", result{400, "illegal_argument_exception", "Failed to parse value [] as only [true] or [false] are allowed.", ""}},
	} {
		if diff := cmp.Diff(tc.want, do(tc.method, tc.path, tc.body)); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
		}
	}
	// A bulk with the parameter: the item naming no alias fails alone; an
	// action line's require_alias false overrides the parameter.
	var bulk struct {
		Errors bool `json:"errors"`
		Items  []map[string]struct {
			Status int `json:"status"`
			Error  struct {
				Reason string `json:"reason"`
			} `json:"error"`
		} `json:"items"`
	}
	body := `{"index":{"_index":"typo3","_id":"1"}}` + "\n{}\n" +
		`{"index":{"_index":"logs","_id":"4"}}` + "\n{}\n" +
		`{"create":{"_index":"made","_id":"1","require_alias":false}}` + "\n{}\n"
	if st := ts.do(t, "POST", "/_bulk?require_alias=true", body, &bulk); st != 200 || !bulk.Errors || len(bulk.Items) != 3 {
		t.Fatalf("bulk: %d %+v", st, bulk)
	}
	var got []int
	for _, it := range bulk.Items {
		for _, r := range it {
			got = append(got, r.Status)
		}
	}
	if diff := cmp.Diff([]int{404, 201, 201}, got); diff != "" {
		t.Errorf("bulk item statuses (-want +got):\n%s", diff)
	}
	// No index was created by a refused write.
	for _, name := range []string{"typo", "typo2", "typo3"} {
		if st := ts.do(t, "HEAD", "/"+name, "", nil); st != 404 {
			t.Errorf("HEAD /%s: %d, want 404 (created by a write that required an alias)", name, st)
		}
	}
	if st := ts.do(t, "HEAD", "/made", "", nil); st != 200 {
		t.Errorf("HEAD /made: %d, want 200 (its action line said require_alias false)", st)
	}
}
