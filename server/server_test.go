package server_test

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/shardsplit/shardsplit/service"
)

// TestGzipRequestBody: the official client's CompressRequestBody sends
// every body gzipped with Content-Encoding: gzip, which OpenSearch's HTTP
// layer decompresses (Netty's HttpContentDecompressor): a client configured
// so creates and indexes as any other.
func TestGzipRequestBody(t *testing.T) {
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

// TestDeflateBodies: OpenSearch's HTTP layer (Netty's
// HttpContentDecompressor, not strict) decompresses a body whose
// Content-Encoding is deflate or x-deflate (case-insensitive),
// zlib-wrapped or raw (ZlibWrapper.ZLIB_OR_NONE).
func TestDeflateBodies(t *testing.T) {
	ts := startServer(t, service.Config{})
	doc := []byte(`{"a":1}`)
	var zl, raw bytes.Buffer
	zw := zlib.NewWriter(&zl)
	zw.Write(doc)
	zw.Close()
	fw, _ := flate.NewWriter(&raw, flate.DefaultCompression)
	fw.Write(doc)
	fw.Close()
	for i, tc := range []struct {
		enc  string
		body []byte
	}{
		{"deflate", zl.Bytes()},
		{"x-deflate", zl.Bytes()},
		{"X-Deflate", zl.Bytes()},
		{"deflate", raw.Bytes()},
		{"x-deflate", raw.Bytes()},
	} {
		req, err := http.NewRequest("PUT", ts.url+"/logs/_doc/"+string(rune('a'+i)), bytes.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", tc.enc)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Errorf("case %d: PUT with Content-Encoding %s (raw %v): HTTP %d %s, want 201", i, tc.enc, &tc.body[0] == &raw.Bytes()[0], resp.StatusCode, b)
		}
	}
}
