package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
	"github.com/shardsplit/shardsplit/splitter"
)

type testDoc struct{ id, routing string }

func docsFor(prefix string, n int) []testDoc {
	var out []testDoc
	for i := range n {
		d := testDoc{id: fmt.Sprintf("%s-%d", prefix, i)}
		if i%3 == 0 {
			d.routing = fmt.Sprintf("user-%d", i%5)
		}
		out = append(out, d)
	}
	return out
}

// statusOf returns the HTTP status and OpenSearch error type of a client
// error.
func statusOf(t *testing.T, err error) (int, string) {
	t.Helper()
	var se *opensearch.StructError
	if !errors.As(err, &se) {
		t.Fatalf("want an OpenSearch error body, got %T: %v", err, err)
	}
	return se.Status, se.Err.Type
}

// holdHook holds the first split of an index before it creates its
// children, until released.
type holdHook struct {
	index    string
	armed    atomic.Bool
	reached  chan struct{}
	released chan struct{}
}

func newHoldHook(index string) *holdHook {
	h := &holdHook{index: index, reached: make(chan struct{}), released: make(chan struct{})}
	h.armed.Store(true)
	return h
}

func (h *holdHook) hook(index string, _ splitter.Phase, next splitter.Intent) {
	if index == h.index && next.Kind == splitter.IntentBuildTargets && h.armed.CompareAndSwap(true, false) {
		close(h.reached)
		<-h.released
	}
}

// TestOfficialClient drives the server with opensearch-go: create, index
// with routing, get, bulk, _search_shards, _cat/shards, settings, write
// block, _split, _clone, _shrink, an alias swap, an in-place split as a
// task (status, _cat/shards during it, cancel) and one to completion; then
// every document is where _search_shards?routing= says and where
// routing.Place and the table compute.
func TestOfficialClient(t *testing.T) {
	hold := newHoldHook("logs8")
	ts := startServer(t, service.Config{SplitHook: hold.hook})
	c := ts.client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	info, err := c.Info(ctx, nil)
	if err != nil || info.Version.Number != service.Version || info.ClusterName == "" || info.Name == "" {
		t.Fatalf("info: %+v %v", info, err)
	}
	if _, err := c.Indices.Create(ctx, opensearchapi.IndicesCreateReq{Index: "logs",
		Body: strings.NewReader(`{"settings":{"index":{"number_of_shards":4,"number_of_replicas":0}}}`)}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Indices.Create(ctx, opensearchapi.IndicesCreateReq{Index: "logs"})
	if st, typ := statusOf(t, err); st != 400 || typ != "resource_already_exists_exception" {
		t.Fatalf("create twice: %d %s", st, typ)
	}
	docs := docsFor("doc", 60)
	for _, d := range docs[:30] {
		resp, err := c.Index(ctx, opensearchapi.IndexReq{Index: "logs", DocumentID: d.id,
			Body: strings.NewReader(fmt.Sprintf(`{"id":%q}`, d.id)), Params: opensearchapi.IndexParams{Routing: d.routing}})
		if err != nil || resp.Result != "created" {
			t.Fatalf("index %s: %+v %v", d.id, resp, err)
		}
	}
	var bulk strings.Builder
	for _, d := range docs[30:] {
		meta := map[string]any{"_id": d.id}
		if d.routing != "" {
			meta["routing"] = d.routing
		}
		b, _ := json.Marshal(map[string]any{"index": meta})
		fmt.Fprintf(&bulk, "%s\n{\"id\":%q}\n", b, d.id)
	}
	bresp, err := c.Bulk(ctx, opensearchapi.BulkReq{Index: "logs", Body: strings.NewReader(bulk.String())})
	if err != nil || bresp.Errors || len(bresp.Items) != 30 {
		t.Fatalf("bulk: %+v %v", bresp, err)
	}
	for _, d := range docs {
		g, err := c.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "logs", DocumentID: d.id,
			Params: opensearchapi.DocumentGetParams{Routing: d.routing}})
		if err != nil || !g.Found || string(g.Source) != fmt.Sprintf(`{"id":%q}`, d.id) {
			t.Fatalf("get %s: %+v %v", d.id, g, err)
		}
	}
	// _search_shards agrees with routing.Place on the index's settings.
	settings, _ := routing.NewSettings("logs", 4, 0, 1)
	for _, d := range docs {
		r := d.routing
		if r == "" {
			r = d.id
		}
		ss, err := c.SearchShards(ctx, &opensearchapi.SearchShardsReq{Indices: []string{"logs"}, Params: opensearchapi.SearchShardsParams{Routing: r}})
		if err != nil || len(ss.Shards) != 1 || len(ss.Shards[0]) != 1 {
			t.Fatalf("search_shards routing=%s: %+v %v", r, ss, err)
		}
		if want := int(settings.Place(d.id, d.routing).Root); ss.Shards[0][0].Shard != want {
			t.Fatalf("search_shards routing=%s: shard %d, routing.Place says %d", r, ss.Shards[0][0].Shard, want)
		}
	}
	cat, err := c.Cat.Shards(ctx, &opensearchapi.CatShardsReq{Indices: []string{"logs"}})
	if err != nil || len(cat.Shards) != 4 {
		t.Fatalf("cat shards: %+v %v", cat, err)
	}
	total := 0
	for _, s := range cat.Shards {
		n, _ := strconv.Atoi(*s.Docs)
		total += n
		if s.State != "STARTED" || s.Prirep != "p" || s.Store == nil {
			t.Fatalf("cat shards row %+v", s)
		}
	}
	if total != len(docs) {
		t.Fatalf("cat shards: %d docs, want %d", total, len(docs))
	}

	// Write block, then the three resizes.
	if _, err := c.Indices.Settings.Put(ctx, opensearchapi.SettingsPutReq{Indices: []string{"logs"},
		Body: strings.NewReader(`{"index":{"blocks":{"write":true}}}`)}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Index(ctx, opensearchapi.IndexReq{Index: "logs", DocumentID: "blocked", Body: strings.NewReader(`{}`)})
	if st, typ := statusOf(t, err); st != 403 || typ != "cluster_block_exception" {
		t.Fatalf("write to a blocked index: %d %s", st, typ)
	}
	gs, err := c.Indices.Settings.Get(ctx, &opensearchapi.SettingsGetReq{Indices: []string{"logs"}})
	if err != nil || !strings.Contains(string(gs.GetIndices()["logs"].Settings), `"write":"true"`) {
		t.Fatalf("get settings: %+v %v", gs, err)
	}
	unblock := `{"settings":{"index.number_of_shards":%d,"index.blocks.write":null}}`
	if _, err := c.Indices.Split(ctx, opensearchapi.IndicesSplitReq{Index: "logs", Target: "logs8",
		Body: strings.NewReader(fmt.Sprintf(unblock, 8))}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Indices.Clone(ctx, opensearchapi.IndicesCloneReq{Index: "logs", Target: "logsc",
		Body: strings.NewReader(fmt.Sprintf(unblock, 4))}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Indices.Shrink(ctx, opensearchapi.IndicesShrinkReq{Index: "logs", Target: "logs1",
		Body: strings.NewReader(fmt.Sprintf(unblock, 1))}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Indices.Split(ctx, opensearchapi.IndicesSplitReq{Index: "logs", Target: "logs3",
		Body: strings.NewReader(fmt.Sprintf(unblock, 3))})
	if st, typ := statusOf(t, err); st != 400 || typ != "illegal_argument_exception" {
		t.Fatalf("split 4 -> 3: %d %s", st, typ)
	}
	_, err = c.Indices.Clone(ctx, opensearchapi.IndicesCloneReq{Index: "logs", Target: "logs8"})
	if st, typ := statusOf(t, err); st != 400 || typ != "resource_already_exists_exception" {
		t.Fatalf("clone onto an existing index: %d %s", st, typ)
	}
	for _, idx := range []string{"logs8", "logsc", "logs1"} {
		cnt, err := c.Indices.Count(ctx, &opensearchapi.IndicesCountReq{Indices: []string{idx}})
		if err != nil || cnt.Count != len(docs) {
			t.Fatalf("count %s: %+v %v", idx, cnt, err)
		}
	}

	// Alias swap: atomically from logs to logs8; writes go to logs8.
	if _, err := c.Aliases(ctx, opensearchapi.AliasesReq{Body: strings.NewReader(`{"actions":[{"add":{"index":"logs","alias":"current"}}]}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Aliases(ctx, opensearchapi.AliasesReq{Body: strings.NewReader(
		`{"actions":[{"remove":{"index":"logs","alias":"current"}},{"add":{"index":"logs8","alias":"current"}}]}`)}); err != nil {
		t.Fatal(err)
	}
	ir, err := c.Index(ctx, opensearchapi.IndexReq{Index: "current", DocumentID: "via-alias", Body: strings.NewReader(`{"id":"via-alias"}`)})
	if err != nil || ir.Index != "logs8" {
		t.Fatalf("write through the alias: %+v %v", ir, err)
	}
	docs = append(docs, testDoc{id: "via-alias"})

	// An in-place split as a task, held before it makes its children.
	var started struct {
		Task string `json:"task"`
	}
	if _, err := opensearch.Do(ctx, c.Client, "POST", rawReq{path: "/logs8/_shards/3/_split", body: `{"number_of_splits":2}`}, &started); err != nil {
		t.Fatal(err)
	}
	<-hold.reached
	task, err := c.Tasks.Get(ctx, opensearchapi.TasksGetReq{TaskID: started.Task})
	if err != nil || task.Completed || task.Task.Action != service.SplitAction || !task.Task.Cancellable {
		t.Fatalf("task during the split: %+v %v", task, err)
	}
	var status struct {
		Phase string `json:"phase"`
	}
	if err := json.Unmarshal(task.Task.Status, &status); err != nil || status.Phase != "clone" {
		t.Fatalf("task status %s: %v", task.Task.Status, err)
	}
	states := map[int]string{}
	cat, err = c.Cat.Shards(ctx, &opensearchapi.CatShardsReq{Indices: []string{"logs8"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cat.Shards {
		states[s.Shard] = s.State
		if s.State == "INITIALIZING" && s.Docs != nil {
			t.Fatalf("an initializing child shows a document count: %q", *s.Docs)
		}
	}
	if states[3] != "SPLITTING" || states[8] != "INITIALIZING" || states[9] != "INITIALIZING" || len(states) != 10 {
		t.Fatalf("cat shards during the split: %v", states)
	}
	// Writes during the split succeed.
	for i := range 5 {
		id := fmt.Sprintf("during-%d", i)
		if _, err := c.Index(ctx, opensearchapi.IndexReq{Index: "current", DocumentID: id, Body: strings.NewReader(fmt.Sprintf(`{"id":%q}`, id))}); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, testDoc{id: id})
	}
	if _, err := c.Tasks.Cancel(ctx, opensearchapi.TasksCancelReq{TaskID: started.Task}); err != nil {
		t.Fatal(err)
	}
	close(hold.released)
	var done map[string]any
	if st := ts.do(t, "GET", "/_tasks/"+started.Task+"?wait_for_completion=true", "", &done); st != 200 {
		t.Fatalf("wait for the cancelled task: %d %v", st, done)
	}
	if done["completed"] != true || done["task"].(map[string]any)["status"].(map[string]any)["phase"] != "aborted" {
		t.Fatalf("cancelled task: %v", done)
	}
	tab, _ := ts.svc.Table("logs8")
	if len(tab.ActiveShards()) != 8 || len(tab.InProgress()) != 0 {
		t.Fatalf("after the cancel: active %v, in progress %v", tab.ActiveShards(), tab.InProgress())
	}
	// The same split to completion.
	var result map[string]any
	if _, err := opensearch.Do(ctx, c.Client, "POST", rawReq{path: "/logs8/_shards/3/_split?wait_for_completion=true", body: `{"number_of_splits":2}`}, &result); err != nil {
		t.Fatal(err)
	}
	if result["phase"] != "done" {
		t.Fatalf("split result: %v", result)
	}
	var list struct {
		Task string `json:"task"`
	}
	if _, err := opensearch.Do(ctx, c.Client, "POST", rawReq{path: "/logs8/_shards/5/_split", body: `{"number_of_splits":3}`}, &list); err != nil {
		t.Fatal(err)
	}
	if st := ts.do(t, "GET", "/_tasks/"+list.Task+"?wait_for_completion=true", "", &done); st != 200 || done["completed"] != true || done["response"] == nil {
		t.Fatalf("second split task: %d %v", st, done)
	}
	_, err = c.Tasks.Cancel(ctx, opensearchapi.TasksCancelReq{TaskID: list.Task})
	if st, typ := statusOf(t, err); st != 400 || typ != service.TypeIllegalState {
		t.Fatalf("cancel of a finished split: %d %s", st, typ)
	}

	// Every document is where _search_shards?routing= says, where the
	// table computes from routing.Place, and found there.
	tab, _ = ts.svc.Table("logs8")
	if len(tab.ActiveShards()) != 11 {
		t.Fatalf("active shards after two splits: %v", tab.ActiveShards())
	}
	for _, d := range docs {
		r := d.routing
		if r == "" {
			r = d.id
		}
		ss, err := c.SearchShards(ctx, &opensearchapi.SearchShardsReq{Indices: []string{"current"}, Params: opensearchapi.SearchShardsParams{Routing: r}})
		if err != nil || len(ss.Shards) != 1 {
			t.Fatalf("search_shards routing=%s: %+v %v", r, ss, err)
		}
		shard := ss.Shards[0][0].Shard
		if want := tab.Lookup(tab.Settings().Place(d.id, d.routing)); shard != int(want) {
			t.Fatalf("%s: _search_shards says shard %d, routing.Place + table say %d", d.id, shard, want)
		}
		body := fmt.Sprintf(`{"query":{"ids":{"values":[%q]}}}`, d.id)
		cnt, err := c.Indices.Count(ctx, &opensearchapi.IndicesCountReq{Indices: []string{"current"}, Body: strings.NewReader(body),
			Params: opensearchapi.IndicesCountParams{Preference: fmt.Sprintf("_shards:%d", shard)}})
		if err != nil || cnt.Count != 1 {
			t.Fatalf("%s on shard %d: count %+v %v", d.id, shard, cnt, err)
		}
		g, err := c.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "current", DocumentID: d.id, Params: opensearchapi.DocumentGetParams{Routing: d.routing}})
		if err != nil || !g.Found {
			t.Fatalf("get %s after the splits: %+v %v", d.id, g, err)
		}
	}
	cnt, err := c.Indices.Count(ctx, &opensearchapi.IndicesCountReq{Indices: []string{"current"}})
	if err != nil || cnt.Count != len(docs) {
		t.Fatalf("count after the splits: %+v %v (want %d)", cnt, err, len(docs))
	}
}
