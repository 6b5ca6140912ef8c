package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/shardsplit/shardsplit/service"
)

// strictShape is the official client's response check
// (testutil.CompareRawJSONwithParsedJSON in opensearch-go's integration
// suite): the raw body, re-encoded from the client's typed response, may
// gain fields the server left out, but must lose none and change none: a
// field the client's struct does not have, or has with another type,
// fails.
func strictShape(t *testing.T, what string, parsed any, raw *opensearch.Response) {
	t.Helper()
	if raw == nil {
		t.Fatalf("%s: no raw response", what)
	}
	body, err := io.ReadAll(raw.Body)
	if err != nil {
		t.Fatal(err)
	}
	re, err := json.Marshal(parsed)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("%s: %v: %s", what, err, body)
	}
	if err := json.Unmarshal(re, &b); err != nil {
		t.Fatal(err)
	}
	for _, d := range shapeDiffs("", a, b) {
		t.Errorf("%s: %s\n%s", what, d, body)
	}
}

// shapeDiffs lists where raw has what parsed lost or changed.
func shapeDiffs(path string, raw, parsed any) []string {
	switch r := raw.(type) {
	case map[string]any:
		p, ok := parsed.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: an object, parsed as %T", path, parsed)}
		}
		var out []string
		for k, v := range r {
			pv, ok := p[k]
			if !ok {
				out = append(out, fmt.Sprintf("%s/%s: not in the client's struct", path, k))
				continue
			}
			out = append(out, shapeDiffs(path+"/"+k, v, pv)...)
		}
		return out
	case []any:
		p, ok := parsed.([]any)
		if !ok || len(p) != len(r) {
			return []string{fmt.Sprintf("%s: an array of %d, parsed as %v", path, len(r), parsed)}
		}
		var out []string
		for i := range r {
			out = append(out, shapeDiffs(fmt.Sprintf("%s/%d", path, i), r[i], p[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(raw, parsed) {
		return []string{fmt.Sprintf("%s: %v, parsed as %v", path, raw, parsed)}
	}
	return nil
}

// TestOfficialClientSuiteShapes makes, with opensearch-go, the calls of
// its own integration suite for the cluster, node, _cat, _mget, index
// template, index and update APIs, and checks each answer as that suite
// does (no error, strictShape), so they cannot regress without the
// module's integration tests (scripts/client-suite.sh runs those).
func TestOfficialClientSuiteShapes(t *testing.T) {
	ts := startServer(t, service.Config{})
	c := ts.client
	ctx := context.Background()
	if _, err := c.Indices.Create(ctx, opensearchapi.IndicesCreateReq{Index: "suite",
		Body: strings.NewReader(`{"settings":{"number_of_replicas":0},"aliases":{"TEST_CAT_ALIAS":{}}}`)}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := c.Document.Create(ctx, opensearchapi.DocumentCreateReq{Index: "suite", DocumentID: fmt.Sprint(i),
			Body: strings.NewReader(`{"foo":"bar","counter":1}`), Params: opensearchapi.DocumentCreateParams{Refresh: "true"}}); err != nil {
			t.Fatal(err)
		}
	}
	type call struct {
		name   string
		strict bool // the suite compares the shape
		run    func() (any, *opensearch.Response, error)
	}
	r := func(v any, err error) (any, *opensearch.Response, error) {
		if err != nil {
			return nil, nil, err
		}
		type inspector interface {
			Inspect() opensearchapi.Inspect
		}
		return v, v.(inspector).Inspect().Response, nil
	}
	calls := []call{
		{"Cluster.State", false, func() (any, *opensearch.Response, error) { return r(c.Cluster.State(ctx, nil)) }},
		{"Cluster.GetSettings", true, func() (any, *opensearch.Response, error) { return r(c.Cluster.GetSettings(ctx, nil)) }},
		{"Cluster.PutSettings", true, func() (any, *opensearch.Response, error) {
			return r(c.Cluster.PutSettings(ctx, opensearchapi.ClusterPutSettingsReq{
				Body: strings.NewReader(`{"transient":{"indices":{"recovery":{"max_bytes_per_sec":null}}}}`)}))
		}},
		{"Cluster.Stats", true, func() (any, *opensearch.Response, error) {
			return r(c.Cluster.Stats(ctx, &opensearchapi.ClusterStatsReq{NodeFilters: []string{"data:true"}}))
		}},
		{"Cluster.PendingTasks", true, func() (any, *opensearch.Response, error) { return r(c.Cluster.PendingTasks(ctx, nil)) }},
		{"Nodes.Info", true, func() (any, *opensearch.Response, error) {
			return r(c.Nodes.Info(ctx, &opensearchapi.NodesInfoReq{NodeID: []string{"*"}, Metrics: []string{"settings", "os"}}))
		}},
		{"Nodes.Stats", true, func() (any, *opensearch.Response, error) {
			return r(c.Nodes.Stats(ctx, &opensearchapi.NodesStatsReq{NodeID: []string{"*"}, Metric: []string{"indices"}, IndexMetric: []string{"store"}}))
		}},
		{"Nodes.Usage", true, func() (any, *opensearch.Response, error) {
			return r(c.Nodes.Usage(ctx, &opensearchapi.NodesUsageReq{NodeID: []string{"*"}, Metrics: []string{"*"}}))
		}},
		{"MGet", true, func() (any, *opensearch.Response, error) {
			return r(c.MGet(ctx, opensearchapi.MGetReq{Index: "suite", Body: strings.NewReader(`{"docs":[{"_id":"1"},{"_id":"2"}]}`)}))
		}},
		{"Update", true, func() (any, *opensearch.Response, error) {
			return r(c.Update(ctx, opensearchapi.UpdateReq{Index: "suite", DocumentID: "1", Params: opensearchapi.UpdateParams{Source: true},
				Body: strings.NewReader(`{"doc":{"counter":5}}`)}))
		}},
		{"IndexTemplate.Create", true, func() (any, *opensearch.Response, error) {
			return r(c.IndexTemplate.Create(ctx, opensearchapi.IndexTemplateCreateReq{IndexTemplate: "tmpl",
				Body: strings.NewReader(`{"index_patterns":["tmpl*"],"priority":60}`)}))
		}},
		{"IndexTemplate.Get", true, func() (any, *opensearch.Response, error) {
			return r(c.IndexTemplate.Get(ctx, &opensearchapi.IndexTemplateGetReq{IndexTemplates: "tmpl"}))
		}},
		{"IndexTemplate.Simulate", true, func() (any, *opensearch.Response, error) {
			return r(c.IndexTemplate.Simulate(ctx, opensearchapi.IndexTemplateSimulateReq{IndexTemplate: "tmpl"}))
		}},
		{"IndexTemplate.SimulateIndex", true, func() (any, *opensearch.Response, error) {
			return r(c.IndexTemplate.SimulateIndex(ctx, opensearchapi.IndexTemplateSimulateIndexReq{Index: "tmpl"}))
		}},
		{"IndexTemplate.Delete", true, func() (any, *opensearch.Response, error) {
			return r(c.IndexTemplate.Delete(ctx, opensearchapi.IndexTemplateDeleteReq{IndexTemplate: "tmpl"}))
		}},
		{"Cat.Aliases", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.Aliases(ctx, nil)
			return catResp(v, err, func() any { return v.Aliases })
		}},
		{"Cat.Health", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.Health(ctx, nil)
			return catResp(v, err, func() any { return v.Health })
		}},
		{"Cat.Count", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.Count(ctx, nil)
			return catResp(v, err, func() any { return v.Counts })
		}},
		{"Cat.Allocation", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.Allocation(ctx, nil)
			return catResp(v, err, func() any { return v.Allocations })
		}},
		{"Cat.ClusterManager", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.ClusterManager(ctx, nil)
			return catResp(v, err, func() any { return v.ClusterManagers })
		}},
		{"Cat.NodeAttrs", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.NodeAttrs(ctx, &opensearchapi.CatNodeAttrsReq{Params: opensearchapi.CatNodeAttrsParams{H: []string{"*"}}})
			return catResp(v, err, func() any { return v.NodeAttrs })
		}},
		{"Cat.Indices", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.Indices(ctx, &opensearchapi.CatIndicesReq{Params: opensearchapi.CatIndicesParams{H: []string{"*"}}})
			return catResp(v, err, func() any { return v.Indices })
		}},
		{"Cat.Shards", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.Shards(ctx, &opensearchapi.CatShardsReq{Params: opensearchapi.CatShardsParams{H: []string{"*"}}})
			return catResp(v, err, func() any { return v.Shards })
		}},
		{"Cat.Nodes", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.Nodes(ctx, &opensearchapi.CatNodesReq{Params: opensearchapi.CatNodesParams{H: []string{"*"}}})
			return catResp(v, err, func() any { return v.Nodes })
		}},
		{"Cat.Tasks", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.Tasks(ctx, &opensearchapi.CatTasksReq{Params: opensearchapi.CatTasksParams{H: []string{"*"}}})
			return catResp(v, err, func() any { return v.Tasks })
		}},
		{"Cat.ThreadPool", true, func() (any, *opensearch.Response, error) {
			v, err := c.Cat.ThreadPool(ctx, &opensearchapi.CatThreadPoolReq{Params: opensearchapi.CatThreadPoolParams{H: []string{"*"}}})
			return catResp(v, err, func() any { return v.ThreadPool })
		}},
	}
	for _, cl := range calls {
		v, raw, err := cl.run()
		if err != nil {
			t.Errorf("%s: %v", cl.name, err)
			continue
		}
		if cl.strict {
			strictShape(t, cl.name, v, raw)
		}
	}
	if _, err := c.Nodes.HotThreads(ctx, &opensearchapi.NodesHotThreadsReq{NodeID: []string{"*"}}); err != nil {
		t.Errorf("Nodes.HotThreads: %v", err)
	}
	_, err := c.Index(ctx, opensearchapi.IndexReq{Index: "suite"})
	var se *opensearch.StructError
	if err == nil || !errors.As(err, &se) || se.Err.Type != "parse_exception" || se.Err.Reason != "request body is required" {
		t.Errorf("Index without a body: %v", err)
	}
}

func catResp[T interface{ Inspect() opensearchapi.Inspect }](v T, err error, items func() any) (any, *opensearch.Response, error) {
	if err != nil {
		return nil, nil, err
	}
	return items(), v.Inspect().Response, nil
}
