package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
)

// track_total_hits is applied, not only parsed: OpenSearch counts exactly
// up to the limit (10,000 by default; true: always; an integer n: up to n)
// and answers "gte" the limit beyond it, and leaves the total out for
// false
// (https://www.elastic.co/guide/en/elasticsearch/reference/7.1/search-request-track-total-hits.html;
// RestSearchAction refuses rest_total_hits_as_int with a limit that is not
// exact).
func TestTrackTotalHits(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2}}`, nil); st != 200 {
		t.Fatal(st)
	}
	const docs = trackTotalDefaultForTest + 5
	var bulk strings.Builder
	for i := range docs {
		fmt.Fprintf(&bulk, "{\"index\":{\"_id\":\"d%d\"}}\n{}\n", i)
	}
	if st := ts.do(t, "POST", "/logs/_bulk?refresh=true", bulk.String(), nil); st != 200 {
		t.Fatal(st)
	}
	type total struct {
		Value    int    `json:"value"`
		Relation string `json:"relation"`
	}
	for _, tc := range []struct {
		query, body string
		want        *total // nil: no total in the response
	}{
		{"", "", &total{trackTotalDefaultForTest, "gte"}},
		{"?track_total_hits=true", "", &total{docs, "eq"}},
		{"?track_total_hits=7", "", &total{7, "gte"}},
		{"?track_total_hits=20000", "", &total{docs, "eq"}},
		{"", `{"track_total_hits":7}`, &total{7, "gte"}},
		{"?track_total_hits=true", `{"track_total_hits":7}`, &total{docs, "eq"}}, // the parameter wins
		{"?track_total_hits=false", "", nil},
		{"?track_total_hits=-1", "", nil},
	} {
		var res struct {
			Hits map[string]any `json:"hits"`
		}
		if st := ts.do(t, "POST", "/logs/_search"+tc.query, tc.body, &res); st != 200 {
			t.Errorf("search%s %s: HTTP %d", tc.query, tc.body, st)
			continue
		}
		var got *total
		if v, ok := res.Hits["total"].(map[string]any); ok {
			got = &total{int(v["value"].(float64)), v["relation"].(string)}
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("search%s %s: hits.total (-want +got):\n%s", tc.query, tc.body, d)
		}
	}
	var asInt struct {
		Hits struct {
			Total int `json:"total"`
		} `json:"hits"`
	}
	if st := ts.do(t, "GET", "/logs/_search?rest_total_hits_as_int=true", "", &asInt); st != 200 || asInt.Hits.Total != docs {
		t.Errorf("rest_total_hits_as_int=true: HTTP %d total %d, want %d (exact)", st, asInt.Hits.Total, docs)
	}
	for _, bad := range []string{"?rest_total_hits_as_int=true&track_total_hits=7", "?track_total_hits=-2"} {
		if st := ts.do(t, "GET", "/logs/_search"+bad, "", nil); st != 400 {
			t.Errorf("search%s: HTTP %d, want 400", bad, st)
		}
	}
}

// trackTotalDefaultForTest is OpenSearch's default track_total_hits.
const trackTotalDefaultForTest = 10_000

// TestShardsPreferenceNotANumber: a _shards preference whose id is not a
// Java int fails as OpenSearch's Integer.parseInt does (a
// NumberFormatException: 400 number_format_exception), not as a 500; a
// negative id parses and names no shard.
func TestShardsPreferenceNotANumber(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, path := range []string{"/logs/_search?preference=_shards:abc", "/logs/_count?preference=_shards:0,abc",
		"/logs/_search_shards?preference=_shards:abc"} {
		var eb errBody
		st := ts.do(t, "GET", path, "", &eb)
		if st != 400 || eb.Error.Type != "number_format_exception" || eb.Error.Reason != `For input string: "abc"` {
			t.Errorf("GET %s: HTTP %d %+v; want 400 number_format_exception", path, st, eb)
		}
	}
	var res struct {
		Shards struct{ Total int } `json:"_shards"`
	}
	if st := ts.do(t, "GET", "/logs/_search?preference=_shards:-1", "", &res); st != 200 || res.Shards.Total != 0 {
		t.Errorf("GET _shards:-1: HTTP %d, %d shards; want 200 and none", st, res.Shards.Total)
	}
}

// TestSearchesOfAllRaceADelete: the same for searches, counts and the _cat
// and health views, which read each index's documents: a store closed by a
// delete must not fail the whole request with "index closed or deleted
// during the request".
func TestSearchesOfAllRaceADelete(t *testing.T) {
	readsOfAllRaceDelete(t, []string{"/_search", "/_count", "/_cat/shards", "/_cat/indices", "/_cluster/health"})
}

// TestAliasSearchRouting: a search reaches the shards OpenSearch's
// IndexNameExpressionResolver.resolveSearchRouting chooses: an alias with
// search_routing named in the expression limits its index to those
// routing values, also beside other names ("t1,other"), and a routing
// parameter narrows them to the values in both ("t1" with search_routing a
// and ?routing=a,b searches a's shard only); neither searches a shard
// OpenSearch does not.
func TestAliasSearchRouting(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, ix := range []string{"logs", "other"} {
		if st := ts.do(t, "PUT", "/"+ix, `{"settings":{"number_of_shards":4,"number_of_replicas":0}}`, nil); st != 200 {
			t.Fatal(st)
		}
	}
	if st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"logs","alias":"t1","search_routing":"a"}}]}`, nil); st != 200 {
		t.Fatal(st)
	}
	// Two routing values on different shards of logs.
	settings, _ := routing.NewSettings("logs", 4, 0, 1)
	b := ""
	for i := range 100 {
		if v := fmt.Sprint("b", i); settings.Place("x", v).Root != settings.Place("x", "a").Root {
			b = v
			break
		}
	}
	for i, r := range []string{"a", "a", b, b, b} {
		if st := ts.do(t, "PUT", fmt.Sprintf("/logs/_doc/%d?routing=%s", i, r), `{}`, nil); st != 201 {
			t.Fatal(st)
		}
	}
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/t1/_count", 2},
		{"/t1,other/_count", 2},
		{"/t1/_count?routing=a," + b, 2},
		{"/logs/_count?routing=a," + b, 5},
		{"/t1,logs/_count", 5}, // the index named outright is not limited
	} {
		var c struct {
			Count int `json:"count"`
		}
		if st := ts.do(t, "GET", tc.path, "", &c); st != 200 || c.Count != tc.want {
			t.Errorf("GET %s: HTTP %d count %d, want %d", tc.path, st, c.Count, tc.want)
		}
	}
}

// TestCountParamsNotIgnored: _count's terminate_after stops counting after
// that many documents per shard (OpenSearch's count API: the count is at
// most terminate_after on a one-shard index, with "terminated_early":
// true) and min_score drops documents scoring less (match_all scores 1.0,
// so min_score=2 counts none). Either is answered or refused, never
// ignored.
func TestCountParamsNotIgnored(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":1}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for i := range 5 {
		if st := ts.do(t, "PUT", fmt.Sprintf("/logs/_doc/%d", i), `{}`, nil); st != 201 {
			t.Fatal(st)
		}
	}
	for _, tc := range []struct {
		param string
		want  int
	}{{"terminate_after=1", 1}, {"min_score=2", 0}} {
		var res struct {
			Count int `json:"count"`
		}
		st := ts.do(t, "GET", "/logs/_count?"+tc.param, "", &res)
		if st == 200 && res.Count != tc.want {
			t.Errorf("_count?%s: count %d, want %d (or a refusal)", tc.param, res.Count, tc.want)
		}
		if st != 200 && st != 400 {
			t.Errorf("_count?%s: HTTP %d", tc.param, st)
		}
	}
}

// TestSearchBodyValuesValidated: a search body's timeout is a time value
// and its track_total_hits a boolean or an integer, as
// SearchSourceBuilder.parseXContent reads them; another value is refused.
func TestSearchBodyValuesValidated(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", "", nil); st != 200 {
		t.Fatal(st)
	}
	for _, body := range []string{`{"timeout":"abc"}`, `{"timeout":true}`, `{"track_total_hits":"abc"}`, `{"track_total_hits":1.5}`} {
		if st := ts.do(t, "POST", "/logs/_search", body, nil); st != 400 {
			t.Errorf("search %s: HTTP %d, want 400", body, st)
		}
	}
	for _, body := range []string{`{"timeout":"10s"}`, `{"track_total_hits":false}`, `{"track_total_hits":1000}`} {
		if st := ts.do(t, "POST", "/logs/_search", body, nil); st != 200 {
			t.Errorf("search %s: HTTP %d, want 200", body, st)
		}
	}
}

// TestSearchRoutingKeepsSpaces: a search's routing values are the
// parameter split at commas and nothing else
// (Strings.splitStringByCommaToArray is String.split(",")), so a value
// with a space is the value a write used: a document written with routing
// "v " is found by the routed search that names its own routing, not
// looked for on the shard of "v".
func TestSearchRoutingKeepsSpaces(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":8}}`, nil); st != 200 {
		t.Fatal(st)
	}
	settings, _ := routing.NewSettings("logs", 8, 0, 1)
	v := ""
	for i := range 100 {
		if c := fmt.Sprint("v", i); settings.Place("x", c+" ").Root != settings.Place("x", c).Root {
			v = c + " "
			break
		}
	}
	if st := ts.do(t, "PUT", "/logs/_doc/1?routing="+url.QueryEscape(v), `{}`, nil); st != 201 {
		t.Fatal(st)
	}
	var c struct {
		Count int `json:"count"`
	}
	if st := ts.do(t, "GET", "/logs/_count?routing="+url.QueryEscape(v), "", &c); st != 200 || c.Count != 1 {
		t.Errorf("count with routing %q, the document's own: HTTP %d count %d, want 1", v, st, c.Count)
	}
}

// TestSearchHitOptions: a search's version, seq_no_primary_term and
// _source (query parameters or body fields) shape each hit, as in
// OpenSearch (SearchSourceBuilder: "version": each hit's _version;
// "seq_no_primary_term": its _seq_no and _primary_term, for optimistic
// concurrency control, Elasticsearch #37639 which OpenSearch inherits;
// "_source": false leaves _source out, a field list keeps only those
// fields): the official client's SearchHit.SeqNo is set, and a body's
// "_source": false returns no source.
func TestSearchHitOptions(t *testing.T) {
	ts := startServer(t, service.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var put struct {
		SeqNo   int `json:"_seq_no"`
		Version int `json:"_version"`
	}
	for range 2 { // _version 2
		if st := ts.do(t, "PUT", "/logs/_doc/1", `{"a":1,"b":2}`, &put); st/100 != 2 {
			t.Fatalf("put: %d", st)
		}
	}
	yes := true
	res, err := ts.client.Search(ctx, &opensearchapi.SearchReq{Indices: []string{"logs"},
		Params: opensearchapi.SearchParams{SeqNoPrimaryTerm: &yes, Version: &yes}})
	if err != nil || len(res.Hits.Hits) != 1 {
		t.Fatalf("search: %+v %v", res, err)
	}
	if h := res.Hits.Hits[0]; h.SeqNo == nil || *h.SeqNo != put.SeqNo || h.PrimaryTerm == nil || *h.PrimaryTerm != 1 {
		t.Errorf("seq_no_primary_term=true: hit _seq_no %v _primary_term %v, want %d and 1", h.SeqNo, h.PrimaryTerm, put.SeqNo)
	}

	type hit map[string]json.RawMessage
	var out struct {
		Hits struct {
			Hits []hit `json:"hits"`
		} `json:"hits"`
	}
	search := func(path, body string) (int, hit) {
		t.Helper()
		out.Hits.Hits = nil
		st := ts.do(t, "POST", path, body, &out)
		if st == 200 && len(out.Hits.Hits) != 1 {
			t.Fatalf("%s %s: %d hits", path, body, len(out.Hits.Hits))
		}
		if st != 200 {
			return st, nil
		}
		return st, out.Hits.Hits[0]
	}
	if _, h := search("/logs/_search?version=true", ""); string(h["_version"]) != "2" {
		t.Errorf("version=true: hit _version %s, want 2 (hit %s)", h["_version"], h)
	}
	if _, h := search("/logs/_search", `{"version":true,"seq_no_primary_term":true}`); string(h["_version"]) != "2" || h["_seq_no"] == nil || string(h["_primary_term"]) != "1" {
		t.Errorf(`body {"version":true,"seq_no_primary_term":true}: hit %s`, h)
	}
	if _, h := search("/logs/_search", `{"_source":false}`); h["_source"] != nil {
		t.Errorf(`body {"_source":false}: hit has _source %s`, h["_source"])
	}
	if _, h := search("/logs/_search", `{"version":false}`); h["_version"] != nil {
		t.Errorf(`body {"version":false}: hit has _version %s`, h["_version"])
	}
	// A field list either filters the source or is refused: never the
	// whole source as if it were not there.
	var get map[string]json.RawMessage
	if st := ts.do(t, "GET", "/logs/_doc/1?_source=a", "", &get); st == 200 && strings.Contains(string(get["_source"]), `"b"`) {
		t.Errorf("GET ?_source=a: _source %s has a field the request left out", get["_source"])
	}
	for _, req := range [][2]string{{"/logs/_search?_source=a", ""}, {"/logs/_search", `{"_source":["a"]}`}} {
		st, h := search(req[0], req[1])
		if st == 200 && strings.Contains(string(h["_source"]), `"b"`) {
			t.Errorf("%s %s: _source %s has a field the request left out", req[0], req[1], h["_source"])
		}
		if st != 200 && st != 400 {
			t.Errorf("%s %s: status %d", req[0], req[1], st)
		}
	}
}

// TestSearchStoredFieldsLeavesSourceOut: a search body's stored_fields
// without _source leaves each hit's _source out, as a get's stored_fields
// parameter does here and as OpenSearch's fetch phase does (a request that
// names stored fields fetches _source only when it asks for it; "_none_"
// fetches none).
func TestSearchStoredFieldsLeavesSourceOut(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs/_doc/1", `{"a":1}`, nil); st != 201 {
		t.Fatal(st)
	}
	for _, tc := range []struct {
		body       string
		wantSource bool
	}{
		{`{"stored_fields":"_none_"}`, false},
		{`{"stored_fields":["a"]}`, false},
		{`{"stored_fields":["a"],"_source":true}`, true},
	} {
		var out struct {
			Hits struct {
				Hits []map[string]json.RawMessage `json:"hits"`
			} `json:"hits"`
		}
		if st := ts.do(t, "POST", "/logs/_search", tc.body, &out); st != 200 || len(out.Hits.Hits) != 1 {
			t.Fatalf("%s: HTTP %d, %d hits", tc.body, st, len(out.Hits.Hits))
		}
		if _, has := out.Hits.Hits[0]["_source"]; has != tc.wantSource {
			t.Errorf("%s: hit has _source %v, want %v", tc.body, has, tc.wantSource)
		}
	}
}

// TestSearchShardsStateAgreesWithCatShards: while an in-place split of a
// shard runs, _search_shards names the parent SPLITTING, as _cat/shards
// does (a splitting parent is an active primary that still answers), and
// every other shard STARTED.
func TestSearchShardsStateAgreesWithCatShards(t *testing.T) {
	hold := newHoldHook("ss")
	ts := startServer(t, service.Config{SplitHook: hold.hook})
	ts.do(t, "PUT", "/ss", `{"settings":{"number_of_shards":4,"number_of_replicas":0}}`, nil)
	if st := ts.do(t, "POST", "/ss/_shards/1/_split", `{"number_of_splits":2}`, nil); st != 200 {
		t.Fatalf("split: %d", st)
	}
	<-hold.reached
	defer close(hold.released)
	var ss struct {
		Shards [][]struct {
			Shard int    `json:"shard"`
			State string `json:"state"`
		} `json:"shards"`
	}
	ts.do(t, "GET", "/ss/_search_shards", "", &ss)
	var cat string
	ts.do(t, "GET", "/_cat/shards/ss?h=shard,state", "", &cat)
	catState := map[int]string{}
	for _, line := range strings.Split(strings.TrimSpace(cat), "\n") {
		var n int
		var st string
		if _, err := fmt.Sscan(line, &n, &st); err == nil {
			catState[n] = st
		}
	}
	if len(ss.Shards) != 4 {
		t.Fatalf("_search_shards: %+v", ss)
	}
	for _, g := range ss.Shards {
		want := "STARTED"
		if g[0].Shard == 1 {
			want = "SPLITTING"
		}
		if g[0].State != want || catState[g[0].Shard] != want {
			t.Errorf("shard %d: _search_shards %s, _cat/shards %s, want %s", g[0].Shard, g[0].State, catState[g[0].Shard], want)
		}
	}
}
