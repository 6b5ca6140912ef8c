package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTGzipRequestBody: the official client's
// CompressRequestBody sends every body gzipped with Content-Encoding: gzip,
// which OpenSearch's HTTP layer decompresses (Netty's
// HttpContentDecompressor). The compressed bytes were parsed as JSON: a
// create failed with a parse_exception and an index with mapper_parsing,
// so a client configured so could do nothing.
func TestReviewS22RESTGzipRequestBody(t *testing.T) {
	ts := startServer(t, service.Config{})
	c, err := opensearchapi.NewClient(opensearchapi.Config{Client: opensearch.Config{
		Addresses: []string{ts.url}, DisableRetry: true, RequestTimeout: 30 * time.Second, CompressRequestBody: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Indices.Create(ctx, opensearchapi.IndicesCreateReq{Index: "logs",
		Body: strings.NewReader(`{"settings":{"index":{"number_of_shards":2}}}`)}); err != nil {
		t.Fatalf("create with a gzipped body: %v", err)
	}
	if _, err := c.Index(ctx, opensearchapi.IndexReq{Index: "logs", DocumentID: "1", Body: strings.NewReader(`{"a":1}`)}); err != nil {
		t.Fatalf("index with a gzipped body: %v", err)
	}
	g, err := c.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "logs", DocumentID: "1"})
	if err != nil || !g.Found || string(g.Source) != `{"a":1}` {
		t.Fatalf("get: %+v %v", g, err)
	}
	// A body that says gzip and is not: a 400, not a 500.
	req, err := http.NewRequestWithContext(ctx, "PUT", ts.url+"/logs/_doc/2", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("PUT with Content-Encoding: gzip and a plain body: HTTP %d, want 400", resp.StatusCode)
	}
}
