package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
	"github.com/shardsplit/shardsplit/splitter"
)

// intentHold holds the next operation of an index that reaches an intent
// of the armed kind, until released.
type intentHold struct {
	index    string
	mu       sync.Mutex
	kind     splitter.IntentKind // 0: disarmed
	reached  chan struct{}
	released chan struct{}
}

// arm holds the next intent of kind k.
func (h *intentHold) arm(k splitter.IntentKind) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kind, h.reached, h.released = k, make(chan struct{}), make(chan struct{})
}

func (h *intentHold) hook(index string, _ splitter.Phase, next splitter.Intent) {
	h.mu.Lock()
	if index != h.index || h.kind == 0 || next.Kind != h.kind {
		h.mu.Unlock()
		return
	}
	h.kind = 0
	reached, released := h.reached, h.released
	h.mu.Unlock()
	close(reached)
	<-released
}

// rawDo makes a request the client has no API for through the client,
// decoding the answer into out, or returning the client's error for an
// OpenSearch error body (Client.Do leaves error bodies unread).
func rawDo[T any](ctx context.Context, c *opensearchapi.Client, method, path, body string, out *T) error {
	resp, err := opensearch.Do(ctx, c.Client, method, rawReq{path: path, body: body}, out)
	if err != nil {
		return err
	}
	if resp.IsError() {
		return opensearch.ParseError(resp)
	}
	return nil
}

// catStates returns _cat/shards' state of every primary of an index.
func catStates(ctx context.Context, t *testing.T, c *opensearchapi.Client, index string) map[int]string {
	t.Helper()
	cat, err := c.Cat.Shards(ctx, &opensearchapi.CatShardsReq{Indices: []string{index}})
	if err != nil {
		t.Fatal(err)
	}
	states := map[int]string{}
	for _, s := range cat.Shards {
		if s.Prirep == "p" {
			states[s.Shard] = s.State
		}
	}
	return states
}

// TestOfficialClientMerge drives POST /{index}/_shards/_merge with
// opensearch-go: a shard is split in place, bad merges are refused with
// the table's messages and change nothing, a merge held before its handoff
// shows in _tasks and _cat/shards and is cancelled, then the children are
// merged back (with writes during the merge), and every document is where
// _search_shards?routing= says, where routing.Place and the table compute,
// and found there.
func TestOfficialClientMerge(t *testing.T) {
	hold := &intentHold{index: "m"}
	ts := startServer(t, service.Config{SplitHook: hold.hook})
	c := ts.client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, err := c.Indices.Create(ctx, opensearchapi.IndicesCreateReq{Index: "m",
		Body: strings.NewReader(`{"settings":{"index":{"number_of_shards":2,"number_of_replicas":0}}}`)}); err != nil {
		t.Fatal(err)
	}
	docs := docsFor("doc", 90)
	var bulk strings.Builder
	for _, d := range docs {
		meta := map[string]any{"_id": d.id}
		if d.routing != "" {
			meta["routing"] = d.routing
		}
		b, _ := json.Marshal(map[string]any{"index": meta})
		fmt.Fprintf(&bulk, "%s\n{\"id\":%q}\n", b, d.id)
	}
	if br, err := c.Bulk(ctx, opensearchapi.BulkReq{Index: "m", Body: strings.NewReader(bulk.String())}); err != nil || br.Errors {
		t.Fatalf("bulk: %+v %v", br, err)
	}
	index := func(id string) {
		t.Helper()
		if _, err := c.Index(ctx, opensearchapi.IndexReq{Index: "m", DocumentID: id, Body: strings.NewReader(fmt.Sprintf(`{"id":%q}`, id))}); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, testDoc{id: id})
	}

	// Split shard 1 into three: children 2, 3, 4 of root 1.
	var split map[string]any
	if err := rawDo(ctx, c, "POST", "/m/_shards/1/_split?wait_for_completion=true", `{"number_of_splits":3}`, &split); err != nil {
		t.Fatal(err)
	}
	if split["phase"] != "done" || fmt.Sprint(split["children"]) != "[2 3 4]" {
		t.Fatalf("split: %v", split)
	}

	// Refusals: 400, the table's own message where it has one, nothing
	// changes.
	before, _ := ts.svc.Table("m")
	for _, tc := range []struct {
		name, body string
		typ        string
		sources    []routing.ShardID // the table's refusal is the expected reason
	}{
		{name: "not adjacent", body: `{"shards":[2,4]}`, typ: service.TypeIllegalArgument, sources: []routing.ShardID{2, 4}},
		{name: "one shard", body: `{"shards":[3]}`, typ: service.TypeIllegalArgument, sources: []routing.ShardID{3}},
		{name: "no shards", body: `{"shards":[]}`, typ: service.TypeIllegalArgument, sources: []routing.ShardID{}},
		{name: "unknown", body: `{"shards":[3,9]}`, typ: service.TypeIllegalArgument, sources: []routing.ShardID{3, 9}},
		{name: "split parent", body: `{"shards":[1,2]}`, typ: service.TypeIllegalArgument, sources: []routing.ShardID{1, 2}},
		{name: "different roots", body: `{"shards":[0,2]}`, typ: service.TypeIllegalArgument, sources: []routing.ShardID{0, 2}},
		{name: "twice", body: `{"shards":[2,2]}`, typ: service.TypeIllegalArgument, sources: []routing.ShardID{2, 2}},
		{name: "malformed json", body: `{"shards":[2,`, typ: service.TypeParse},
		{name: "no shards field", body: `{}`, typ: service.TypeValidation},
		{name: "not an array", body: `{"shards":"2,3"}`, typ: service.TypeParse},
		{name: "negative id", body: `{"shards":[-1,2]}`, typ: service.TypeParse},
		{name: "unknown field", body: `{"shards":[2,3],"into":7}`, typ: service.TypeParse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body struct {
				Error struct {
					Type   string `json:"type"`
					Reason string `json:"reason"`
					Index  string `json:"index"`
				} `json:"error"`
				Status int `json:"status"`
			}
			if st := ts.do(t, "POST", "/m/_shards/_merge", tc.body, &body); st != 400 || body.Status != 400 || body.Error.Type != tc.typ {
				t.Fatalf("%s: %d %+v, want 400 %s", tc.body, st, body, tc.typ)
			}
			if tc.sources != nil {
				_, err := routing.Apply(before, routing.Edit{Kind: routing.BeginMerge, Sources: tc.sources})
				if routing.ExceptionOf(err) != routing.IllegalArgument || body.Error.Reason != err.Error() || body.Error.Index != "m" {
					t.Fatalf("%s: reason %q (index %q), the table says %v", tc.body, body.Error.Reason, body.Error.Index, err)
				}
			}
			if after, _ := ts.svc.Table("m"); after.Version() != before.Version() {
				t.Fatalf("%s changed the table: v%d -> v%d", tc.body, before.Version(), after.Version())
			}
		})
	}
	// The same refusal through the client's error type.
	var refused map[string]any
	err := rawDo(ctx, c, "POST", "/m/_shards/_merge", `{"shards":[2,4]}`, &refused)
	if st, typ := statusOf(t, err); st != 400 || typ != service.TypeIllegalArgument {
		t.Fatalf("not adjacent through the client: %d %s", st, typ)
	}
	if st := ts.do(t, "POST", "/nope/_shards/_merge", `{"shards":[0,1]}`, nil); st != 404 {
		t.Fatalf("merge in a missing index: %d", st)
	}

	// A merge of 2 and 3 held after its reservation, before it builds the
	// target: a task, MERGING sources and an INITIALIZING target, other
	// operations refused, writes succeed; then cancelled.
	hold.arm(splitter.IntentBuildTargets)
	var started struct {
		Task string `json:"task"`
	}
	if err := rawDo(ctx, c, "POST", "/m/_shards/_merge", `{"shards":[3,2]}`, &started); err != nil {
		t.Fatal(err)
	}
	<-hold.reached
	task, err := c.Tasks.Get(ctx, opensearchapi.TasksGetReq{TaskID: started.Task})
	if err != nil || task.Completed || task.Task.Action != service.MergeAction || !task.Task.Cancellable {
		t.Fatalf("task during the merge: %+v %v", task, err)
	}
	var status struct {
		Phase  string
		Shards []int
		Target int
	}
	if err := json.Unmarshal(task.Task.Status, &status); err != nil || status.Phase != "clone" || fmt.Sprint(status.Shards) != "[2 3]" || status.Target != 5 {
		t.Fatalf("task status %s: %v", task.Task.Status, err)
	}
	want := map[int]string{0: "STARTED", 2: "MERGING", 3: "MERGING", 4: "STARTED", 5: "INITIALIZING"}
	if diff := cmp.Diff(want, catStates(ctx, t, c, "m")); diff != "" {
		t.Fatalf("_cat/shards during the merge (-want +got):\n%s", diff)
	}
	mid, _ := ts.svc.Table("m")
	for _, tc := range []struct {
		name, path, body string
		status           int
		edit             *routing.Edit // the table's refusal is the expected reason
	}{
		{name: "merge overlapping", path: "/m/_shards/_merge", body: `{"shards":[3,4]}`, status: 400,
			edit: &routing.Edit{Kind: routing.BeginMerge, Sources: []routing.ShardID{3, 4}}},
		{name: "split a source", path: "/m/_shards/2/_split", body: `{"number_of_splits":2}`, status: 400,
			edit: &routing.Edit{Kind: routing.BeginSplit, Shard: 2, Ways: 2}},
		{name: "split another shard", path: "/m/_shards/0/_split", body: `{"number_of_splits":2}`, status: 409},
	} {
		var body struct {
			Error struct{ Type, Reason string }
		}
		if st := ts.do(t, "POST", tc.path, tc.body, &body); st != tc.status {
			t.Fatalf("%s during the merge: %d %+v", tc.name, st, body)
		}
		if tc.edit != nil {
			if _, err := routing.Apply(mid, *tc.edit); err == nil || body.Error.Reason != err.Error() {
				t.Fatalf("%s during the merge: %q, the table says %v", tc.name, body.Error.Reason, err)
			}
		} else if body.Error.Type != service.TypeIllegalState || !strings.Contains(body.Error.Reason, started.Task) {
			t.Fatalf("%s during the merge: %+v", tc.name, body)
		}
	}
	for i := range 5 {
		index(fmt.Sprintf("during-cancelled-%d", i))
	}
	if _, err := c.Tasks.Cancel(ctx, opensearchapi.TasksCancelReq{TaskID: started.Task}); err != nil {
		t.Fatal(err)
	}
	close(hold.released)
	var done map[string]any
	if st := ts.do(t, "GET", "/_tasks/"+started.Task+"?wait_for_completion=true", "", &done); st != 200 {
		t.Fatalf("wait for the cancelled merge: %d %v", st, done)
	}
	if done["completed"] != true || done["task"].(map[string]any)["status"].(map[string]any)["phase"] != "aborted" || done["error"] == nil {
		t.Fatalf("cancelled merge: %v", done)
	}
	if tab, _ := ts.svc.Table("m"); fmt.Sprint(tab.ActiveShards()) != "[0 2 3 4]" || len(tab.MergesInProgress()) != 0 {
		t.Fatalf("after the cancel: active %v, merges in progress %v", tab.ActiveShards(), tab.MergesInProgress())
	}
	want = map[int]string{0: "STARTED", 2: "STARTED", 3: "STARTED", 4: "STARTED"}
	if diff := cmp.Diff(want, catStates(ctx, t, c, "m")); diff != "" {
		t.Fatalf("_cat/shards after the cancel (-want +got):\n%s", diff)
	}

	// The same merge, held while it catches up (writes land on the
	// sources and must reach the target), to completion.
	hold.arm(splitter.IntentCatchUp)
	merged := make(chan map[string]any, 1)
	go func() {
		var res map[string]any
		if err := rawDo(ctx, c, "POST", "/m/_shards/_merge?wait_for_completion=true", `{"shards":[2,3]}`, &res); err != nil {
			res = map[string]any{"err": err.Error()}
		}
		merged <- res
	}()
	<-hold.reached
	for i := range 10 {
		index(fmt.Sprintf("during-merge-%d", i))
	}
	close(hold.released)
	res := <-merged
	// The cancelled merge's target id 5 became a hole again, and is the
	// first.
	if res["phase"] != "done" || res["acknowledged"] != true || fmt.Sprint(res["shards"]) != "[2 3]" || res["target"] != float64(5) {
		t.Fatalf("merge result: %v", res)
	}
	// And the target with shard 4, as a task watched through _tasks; the
	// merged ids 2 and 3 are never reused, so its target is 6.
	if err := rawDo(ctx, c, "POST", "/m/_shards/_merge", `{"shards":[4,5]}`, &started); err != nil {
		t.Fatal(err)
	}
	if st := ts.do(t, "GET", "/_tasks/"+started.Task+"?wait_for_completion=true", "", &done); st != 200 || done["completed"] != true || done["response"] == nil {
		t.Fatalf("second merge task: %d %v", st, done)
	}
	resp := done["response"].(map[string]any)
	if resp["phase"] != "done" || resp["target"] != float64(6) || resp["phase_durations"].(map[string]any)["handoff_ms"] == nil {
		t.Fatalf("second merge response: %v", resp)
	}
	_, err = c.Tasks.Cancel(ctx, opensearchapi.TasksCancelReq{TaskID: started.Task})
	if st, typ := statusOf(t, err); st != 400 || typ != service.TypeIllegalState {
		t.Fatalf("cancel of a finished merge: %d %s", st, typ)
	}
	want = map[int]string{0: "STARTED", 6: "STARTED"}
	if diff := cmp.Diff(want, catStates(ctx, t, c, "m")); diff != "" {
		t.Fatalf("_cat/shards after the merges (-want +got):\n%s", diff)
	}

	// Every document is where _search_shards?routing= says, where the table
	// computes from routing.Place, and found there.
	tab, _ := ts.svc.Table("m")
	for _, d := range docs {
		r := d.routing
		if r == "" {
			r = d.id
		}
		ss, err := c.SearchShards(ctx, &opensearchapi.SearchShardsReq{Indices: []string{"m"}, Params: opensearchapi.SearchShardsParams{Routing: r}})
		if err != nil || len(ss.Shards) != 1 {
			t.Fatalf("search_shards routing=%s: %+v %v", r, ss, err)
		}
		shard := ss.Shards[0][0].Shard
		if want := tab.Lookup(tab.Settings().Place(d.id, d.routing)); shard != int(want) {
			t.Fatalf("%s: _search_shards says shard %d, routing.Place + table say %d", d.id, shard, want)
		}
		body := fmt.Sprintf(`{"query":{"ids":{"values":[%q]}}}`, d.id)
		cnt, err := c.Indices.Count(ctx, &opensearchapi.IndicesCountReq{Indices: []string{"m"}, Body: strings.NewReader(body),
			Params: opensearchapi.IndicesCountParams{Preference: fmt.Sprintf("_shards:%d", shard)}})
		if err != nil || cnt.Count != 1 {
			t.Fatalf("%s on shard %d: count %+v %v", d.id, shard, cnt, err)
		}
		g, err := c.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "m", DocumentID: d.id, Params: opensearchapi.DocumentGetParams{Routing: d.routing}})
		if err != nil || !g.Found {
			t.Fatalf("get %s after the merges: %+v %v", d.id, g, err)
		}
	}
	cnt, err := c.Indices.Count(ctx, &opensearchapi.IndicesCountReq{Indices: []string{"m"}})
	if err != nil || cnt.Count != len(docs) {
		t.Fatalf("count after the merges: %+v %v (want %d)", cnt, err, len(docs))
	}
}
