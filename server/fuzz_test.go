package server_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/server"
	"github.com/shardsplit/shardsplit/service"
)

// isAPIError requires a parser failure to be an OpenSearch-shaped error
// with a 4xx status.
func isAPIError(t *testing.T, err error) {
	t.Helper()
	var e *service.Error
	if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 || e.Type == "" || e.Reason == "" {
		t.Fatalf("parser error %T %v is not a 4xx OpenSearch error", err, err)
	}
}

func FuzzParseBulk(f *testing.F) {
	f.Add([]byte("{\"index\":{\"_id\":\"1\"}}\n{\"a\":1}\n{\"delete\":{\"_index\":\"x\",\"_id\":\"2\"}}\n"), "logs")
	f.Add([]byte("{\"create\":{\"_id\":\"1\",\"routing\":\"u\"}}\n{}\n"), "")
	f.Add([]byte("{\"update\":{\"_id\":\"1\"}}\n{\"doc\":{}}\n"), "logs")
	f.Add([]byte("{\"index\":\n"), "logs")
	f.Fuzz(func(t *testing.T, body []byte, index string) {
		items, err := server.ParseBulk(body, index)
		if err != nil {
			isAPIError(t, err)
			return
		}
		if len(items) == 0 {
			t.Fatal("no items and no error")
		}
		for _, it := range items {
			switch it.Op {
			case "index", "create", "delete", "update":
			default:
				t.Fatalf("op %q", it.Op)
			}
			if it.Index == "" {
				t.Fatal("item without an index")
			}
			if it.Err == nil && it.Op != "delete" && !json.Valid(it.Source) {
				t.Fatalf("accepted an invalid source %q", it.Source)
			}
		}
	})
}

func FuzzParseSettings(f *testing.F) {
	f.Add([]byte(`{"index":{"number_of_shards":2,"blocks":{"write":true}}}`))
	f.Add([]byte(`{"index.routing.allocation.require._name":"a","number_of_replicas":"0"}`))
	f.Add([]byte(`{"index.blocks.write":null}`))
	f.Add([]byte(`{"shardsplit.mode":"opensearch","routing_partition_size":3}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		set, err := service.ParseSettings(body)
		if err != nil {
			isAPIError(t, err)
			return
		}
		for k := range set {
			if !strings.HasPrefix(k, "index.") {
				t.Fatalf("setting %q lost its index. prefix", k)
			}
		}
	})
}

func FuzzParseSplitBody(f *testing.F) {
	f.Add([]byte(`{"number_of_splits":2}`))
	f.Add([]byte(`{"split_points":[100,200]}`))
	f.Add([]byte(`{"number_of_splits":2,"split_points":[1]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		sb, err := server.ParseSplitBody(body)
		if err != nil {
			isAPIError(t, err)
			return
		}
		if (sb.Ways >= 2) == (len(sb.Points) > 0) {
			t.Fatalf("accepted %+v: want exactly one of ways >= 2 or points", sb)
		}
	})
}

func FuzzParseSearchBody(f *testing.F) {
	f.Add([]byte(`{"query":{"match_all":{}},"size":5,"from":1}`))
	f.Add([]byte(`{"query":{"ids":{"values":["a","b"]}}}`))
	f.Add([]byte(`{"query":{"term":{"_routing":{"value":"u"}}}}`))
	f.Add([]byte(`{"query":{"terms":{"_id":["a"]}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := server.ParseSearchBody(body, false); err != nil {
			isAPIError(t, err)
		}
	})
}
