package server_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/shardsplit/shardsplit/service"
)

// TestOneWriteIndexPerAlias: an alias has at most one write index, as
// OpenSearch's metadata validation requires ("alias [w] has more than one
// write index [a,b]", an IllegalStateException), whether by one _aliases
// request or by a create whose alias names an existing write alias: a
// write through the alias must not go to whichever index sorts last.
func TestOneWriteIndexPerAlias(t *testing.T) {
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

// TestDeleteIndexIgnoresAliases: DELETE /{index} deletes only indices it
// names: an alias is refused, as OpenSearch's delete resolves with
// ignore_aliases ("The provided expression [current] matches an alias,
// specify the corresponding concrete indices instead."), and a wildcard
// matches index names only, never the index behind a matching alias.
func TestDeleteIndexIgnoresAliases(t *testing.T) {
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

// TestReplicaCountBounded: number_of_replicas is a Java int setting and
// every replica is a shard copy the cluster's shard limit
// (cluster.max_shards_per_node, 1000 on our one node) counts, as
// OpenSearch's ShardLimitValidator does on create and on a replica
// increase. Unbounded, one PUT with a huge count would make every later
// _cat/shards, _cat/indices and _cluster/health build one row per
// unassigned replica: 99999999999 of them exhaust memory.
func TestReplicaCountBounded(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/ok", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, tc := range []struct {
		name, method, path, body string
		typ, reason              string
	}{
		{"replicas beyond a Java int", "PUT", "/huge", `{"settings":{"number_of_replicas":99999999999}}`,
			"illegal_argument_exception", "Failed to parse value [99999999999] for setting [index.number_of_replicas]"},
		{"shards times replicas over the limit", "PUT", "/many", `{"settings":{"number_of_shards":2,"number_of_replicas":2000000}}`,
			"validation_exception", "Validation Failed: 1: this action would add [4000002] total shards, but this cluster currently has [2]/[1000] maximum shards open;"},
		{"replica increase over the limit", "PUT", "/ok/_settings", `{"index":{"number_of_replicas":2147483647}}`,
			"validation_exception", "Validation Failed: 1: this action would add [4294967294] total shards, but this cluster currently has [2]/[1000] maximum shards open;"},
	} {
		// Fatal at the first acknowledged one: a _cat or health request
		// (the cleanup makes none) would then try to list its replicas.
		var eb errBody
		st := ts.do(t, tc.method, tc.path, tc.body, &eb)
		if st != 400 || eb.Status != 400 || eb.Error.Type != tc.typ || eb.Error.Reason != tc.reason {
			t.Fatalf("%s: %s %s: HTTP %d %+v; want 400 %s %q", tc.name, tc.method, tc.path, st, eb, tc.typ, tc.reason)
		}
	}
	// What is left is served at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.url+"/_cat/shards", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("_cat/shards: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("_cat/shards: %d", resp.StatusCode)
	}
	if names := ts.svc.Names(); len(names) != 1 {
		t.Fatalf("indices: %v, want only ok", names)
	}
}

// TestReadsOfAllRaceADelete: GET /_settings and GET /_all read every index
// an expression resolved to; an index deleted between the resolution and
// the read must not make the whole answer a 404 index_not_found for an
// index the request never named. OpenSearch answers from one cluster
// state, so such a read lists the index or not, and never fails for it.
func TestReadsOfAllRaceADelete(t *testing.T) {
	readsOfAllRaceDelete(t, []string{"/_settings", "/_all", "/_all/_settings"})
}

func readsOfAllRaceDelete(t *testing.T, paths []string) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/keep", `{"settings":{"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	var stop atomic.Bool
	var failures atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for _, path := range paths {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 5000 && !stop.Load(); i++ {
					var body string
					if st := ts.do(t, "GET", path, "", &body); st != 200 {
						if failures.Add(1) == 1 {
							first.Store(path + ": " + body)
						}
					}
				}
			}()
		}
	}
	for range 60 {
		if st := ts.do(t, "PUT", "/tmp", `{"settings":{"number_of_replicas":0}}`, nil); st != 200 {
			t.Fatal(st)
		}
		if st := ts.do(t, "DELETE", "/tmp", "", nil); st != 200 {
			t.Fatal(st)
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d reads of every index failed while another index was created and deleted; first: %v", n, first.Load())
	}
}

// TestReplaceIndexWithAlias: one _aliases request may replace an index by
// an alias of the same name, as OpenSearch's
// MetadataIndexAliasesService.applyAliasActions deletes every remove_index
// index first ("so we don't cause error when attempting to replace an
// index with a alias"): [add alias old to new, remove_index old] leaves the
// alias old on new, though the alias's name is still an index's when the
// add is checked.
func TestReplaceIndexWithAlias(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, ix := range []string{"old", "new"} {
		if st := ts.do(t, "PUT", "/"+ix, "", nil); st != 200 {
			t.Fatal(st)
		}
	}
	if st := ts.do(t, "PUT", "/new/_doc/1", `{"v":"new"}`, nil); st != 201 {
		t.Fatal(st)
	}
	var eb errBody
	st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"new","alias":"old"}},{"remove_index":{"index":"old"}}]}`, &eb)
	if st != 200 {
		t.Fatalf("replace index old by an alias old of new: HTTP %d %+v; want 200", st, eb.Error)
	}
	var got struct {
		Index string `json:"_index"`
		Found bool   `json:"found"`
	}
	if st := ts.do(t, "GET", "/old/_doc/1", "", &got); st != 200 || !got.Found || got.Index != "new" {
		t.Errorf("GET /old/_doc/1 through the alias: HTTP %d %+v; want new's document", st, got)
	}
	// An alias added to an index the same request removes goes with it:
	// the index is gone first, so the add names a missing index.
	if st := ts.do(t, "PUT", "/tmp", "", nil); st != 200 {
		t.Fatal(st)
	}
	if st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"tmp","alias":"t"}},{"remove_index":{"index":"tmp"}}]}`, nil); st == 200 {
		if st := ts.do(t, "GET", "/_alias/t", "", nil); st != 404 {
			t.Errorf("alias t of the removed index tmp: GET /_alias/t HTTP %d, want 404", st)
		}
	}
}

// TestHiddenAliasNotIgnored: an alias made with is_hidden: true is not
// matched by a wildcard under the default expand_wildcards=open
// (OpenSearch's WildcardExpressionResolver skips hidden index abstractions
// unless hidden is expanded). Either the alias is hidden or it is refused:
// never a visible alias the client thinks hidden.
func TestHiddenAliasNotIgnored(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs/_doc/1", `{}`, nil); st != 201 {
		t.Fatal(st)
	}
	st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"logs","alias":"hid","is_hidden":true}}]}`, nil)
	if st == 400 {
		return // refused: fine
	}
	if st != 200 {
		t.Fatalf("add a hidden alias: HTTP %d", st)
	}
	var res struct {
		Hits struct {
			Total struct {
				Value int `json:"value"`
			} `json:"total"`
		} `json:"hits"`
	}
	if st := ts.do(t, "GET", "/h*/_search", "", &res); st != 200 || res.Hits.Total.Value != 0 {
		t.Errorf("GET /h*/_search with only a hidden alias matching: HTTP %d, %d hits; want 200 and none", st, res.Hits.Total.Value)
	}
}

// TestRefreshIntervalIsATimeValue: index.refresh_interval is OpenSearch's
// time setting (IndexSettings.INDEX_REFRESH_INTERVAL_SETTING): a value that
// is not a time value is refused with a 400 naming it ("failed to parse
// setting [index.refresh_interval] with value [abc] as a time value: unit
// is missing or unrecognized"), on create and on an update.
func TestRefreshIntervalIsATimeValue(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, tc := range []struct{ method, path, body string }{
		{"PUT", "/a", `{"settings":{"index.refresh_interval":"abc"}}`},
		{"PUT", "/b", `{"settings":{"index":{"refresh_interval":"1.5s"}}}`},
	} {
		var eb errBody
		if st := ts.do(t, tc.method, tc.path, tc.body, &eb); st != 400 || eb.Error.Type != "illegal_argument_exception" {
			t.Errorf("%s %s %s: HTTP %d %+v; want 400 illegal_argument_exception", tc.method, tc.path, tc.body, st, eb.Error)
		}
	}
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"index.refresh_interval":"30s"}}`, nil); st != 200 {
		t.Fatalf("refresh_interval 30s: HTTP %d", st)
	}
	var eb errBody
	if st := ts.do(t, "PUT", "/logs/_settings", `{"index.refresh_interval":"abc"}`, &eb); st != 400 || !strings.Contains(eb.Error.Reason, "[abc]") {
		t.Errorf("update refresh_interval to abc: HTTP %d %+v; want 400 naming [abc]", st, eb.Error)
	}
	for _, ok := range []string{"-1", "1s", "500ms"} {
		if st := ts.do(t, "PUT", "/logs/_settings", `{"index.refresh_interval":"`+ok+`"}`, nil); st != 200 {
			t.Errorf("update refresh_interval to %s: HTTP %d, want 200", ok, st)
		}
	}
}

// TestRefreshIntervalMinimum: index.refresh_interval is a time setting
// with a minimum of -1ms (IndexSettings' Setting.timeSetting(..., new
// TimeValue(-1, MILLISECONDS))): "-1s" or "-1m" parse as time values but
// are refused, "failed to parse value [-1s] for setting
// [index.refresh_interval], must be >= [-1ms]".
func TestRefreshIntervalMinimum(t *testing.T) {
	ts := startServer(t, service.Config{})
	for i, bad := range []string{"-1s", "-1m", "-1h", "-1d"} {
		var eb errBody
		if st := ts.do(t, "PUT", "/a"+string(rune('a'+i)), `{"settings":{"index.refresh_interval":"`+bad+`"}}`, &eb); st != 400 ||
			eb.Error.Type != "illegal_argument_exception" || !strings.Contains(eb.Error.Reason, "["+bad+"]") || !strings.Contains(eb.Error.Reason, ">= [-1ms]") {
			t.Errorf("create with refresh_interval %s: HTTP %d %+v; want 400 naming it and the minimum -1ms", bad, st, eb.Error)
		}
	}
	for _, ok := range []string{"-1", "-1ms", "-1nanos", "0", "1s"} {
		if st := ts.do(t, "PUT", "/ok"+strings.ToLower(strings.Trim(ok, "-")), `{"settings":{"index.refresh_interval":"`+ok+`"}}`, nil); st != 200 {
			t.Errorf("create with refresh_interval %s: HTTP %d, want 200", ok, st)
		}
	}
}

// TestGetAliasMissing: GET /_alias/{name} answers as OpenSearch's
// RestGetAliasesAction: a named alias that matched nothing makes it a 404
// whose "error" is a string ("alias [x] missing"), next to the aliases that
// were found; a wildcard that matches nothing is not missing.
func TestGetAliasMissing(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"aliases":{"cur":{}}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, tc := range []struct {
		path   string
		status int
		want   map[string]any
	}{
		{"/_alias/cur", 200, map[string]any{"logs": map[string]any{"aliases": map[string]any{"cur": map[string]any{}}}}},
		{"/_alias/nope", 404, map[string]any{"error": "alias [nope] missing", "status": 404.0}},
		{"/_alias/cur,nope,gone", 404, map[string]any{"error": "aliases [nope,gone] missing", "status": 404.0,
			"logs": map[string]any{"aliases": map[string]any{"cur": map[string]any{}}}}},
		{"/_alias/no*", 200, map[string]any{}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			var got map[string]any
			st := ts.do(t, "GET", tc.path, "", &got)
			if st != tc.status {
				t.Errorf("status %d, want %d", st, tc.status)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("body (-want +got):\n%s", d)
			}
		})
	}
}

// TestAliasNamesMayHoldCapitals: OpenSearch requires lowercase of index
// names only (MetadataCreateIndexService.validateIndexName); an alias name
// passes validateIndexOrAliasName, which has no lowercase rule, so the
// official client's _cat test creates an index with alias TEST_CAT_ALIAS.
// An alias name that breaks a rule it does have is refused with
// InvalidAliasNameException's message.
func TestAliasNamesMayHoldCapitals(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/cat", `{"settings":{"number_of_replicas":0},"aliases":{"TEST_CAT_ALIAS":{}}}`, nil); st != 200 {
		t.Fatalf("create with alias TEST_CAT_ALIAS: %d", st)
	}
	if st := ts.do(t, "PUT", "/cat/_alias/Mixed_Case", "", nil); st != 200 {
		t.Fatalf("PUT /cat/_alias/Mixed_Case: %d", st)
	}
	var res struct {
		Index string `json:"_index"`
	}
	if st := ts.do(t, "PUT", "/TEST_CAT_ALIAS/_doc/1", `{}`, &res); st != 201 || res.Index != "cat" {
		t.Fatalf("a write through TEST_CAT_ALIAS: %d into %q", st, res.Index)
	}
	if st := ts.do(t, "GET", "/Mixed_Case/_doc/1", "", nil); st != 200 {
		t.Fatalf("a read through Mixed_Case: %d", st)
	}
	var eb errBody
	st := ts.do(t, "PUT", "/cat/_alias/_Bad", "", &eb)
	if st != 400 || eb.Error.Type != "invalid_alias_name_exception" ||
		eb.Error.Reason != "Invalid alias name [_Bad], must not start with '_', '-', or '+'" {
		t.Fatalf("PUT /cat/_alias/_Bad: %d %+v", st, eb)
	}
}

// TestSettingsDoNotShowRoutingShards: index.number_of_routing_shards is
// consumed at creation (MetadataCreateIndexService removes it from the
// settings) and kept as the metadata's routing_num_shards: GET _settings
// and GET /{index} do not show it, given or defaulted; _cluster/state does.
func TestSettingsDoNotShowRoutingShards(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/given", `{"settings":{"number_of_shards":2,"number_of_routing_shards":8,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/defaulted", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil)
	for index, want := range map[string]int{"given": 8, "defaulted": 1024} {
		for _, path := range []string{"/" + index + "/_settings?flat_settings=true", "/" + index + "?flat_settings=true"} {
			var body string
			if st := ts.do(t, "GET", path, "", &body); st != 200 || strings.Contains(body, "routing_shards") {
				t.Errorf("GET %s: %d %s", path, st, body)
			}
		}
		var state struct {
			Metadata struct {
				Indices map[string]struct {
					RoutingNumShards int `json:"routing_num_shards"`
				} `json:"indices"`
			} `json:"metadata"`
		}
		ts.do(t, "GET", "/_cluster/state/metadata/"+index, "", &state)
		if got := state.Metadata.Indices[index].RoutingNumShards; got != want {
			t.Errorf("%s: routing_num_shards %d, want %d", index, got, want)
		}
	}
}

// TestFloodStageBlock: index.blocks.read_only_allow_delete is
// IndexMetadata's flood-stage block: writes and metadata changes are
// refused with 429 cluster_block_exception naming
// "TOO_MANY_REQUESTS/12/...", the block itself can be cleared, and the
// index can still be deleted (the block allows releasing resources).
func TestFloodStageBlock(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/f", `{"settings":{"number_of_replicas":0}}`, nil)
	if st := ts.do(t, "PUT", "/f/_settings", `{"index.blocks.read_only_allow_delete":true}`, nil); st != 200 {
		t.Fatalf("setting the block: %d", st)
	}
	want := "index [f] blocked by: [TOO_MANY_REQUESTS/12/disk usage exceeded flood-stage watermark, index has read-only-allow-delete block];"
	for _, tc := range []struct{ method, path, body string }{
		{"PUT", "/f/_doc/1", `{}`},
		{"PUT", "/f/_settings", `{"index.number_of_replicas":1}`},
	} {
		var eb errBody
		if st := ts.do(t, tc.method, tc.path, tc.body, &eb); st != 429 || eb.Error.Type != "cluster_block_exception" || eb.Error.Reason != want {
			t.Errorf("%s %s: %d %+v", tc.method, tc.path, st, eb)
		}
	}
	if st := ts.do(t, "PUT", "/f/_settings", `{"index.blocks.read_only_allow_delete":null}`, nil); st != 200 {
		t.Fatalf("clearing the block: %d", st)
	}
	if st := ts.do(t, "PUT", "/f/_doc/1", `{}`, nil); st != 201 {
		t.Fatalf("a write after the block is cleared: %d", st)
	}
	ts.do(t, "PUT", "/f/_settings", `{"index.blocks.read_only_allow_delete":true}`, nil)
	if st := ts.do(t, "DELETE", "/f", "", nil); st != 200 {
		t.Fatalf("deleting the blocked index: %d", st)
	}
}
