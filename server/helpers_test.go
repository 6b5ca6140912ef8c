package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/shardsplit/shardsplit/server"
	"github.com/shardsplit/shardsplit/service"
)

// testServer is the REST API on a loopback port over a service.
type testServer struct {
	url    string
	svc    *service.Service
	client *opensearchapi.Client
	http   *httptest.Server
}

func startServer(t *testing.T, cfg service.Config) *testServer {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	svc, err := service.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &httptest.Server{Listener: ln, Config: &http.Server{
		Handler: server.New(server.Config{Service: svc, Addr: ln.Addr().String()})}}
	hs.Start()
	ts := &testServer{url: hs.URL, svc: svc, http: hs}
	t.Cleanup(func() { ts.stop(t) })
	ts.client, err = opensearchapi.NewClient(opensearchapi.Config{Client: opensearch.Config{
		Addresses: []string{hs.URL}, DisableRetry: true, RequestTimeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func (ts *testServer) stop(t *testing.T) {
	if ts.http != nil {
		ts.http.Close()
		ts.http = nil
		if err := ts.svc.Close(); err != nil {
			t.Errorf("closing the service: %v", err)
		}
	}
}

// do makes a raw request and decodes a JSON answer into out (if not nil).
func (ts *testServer) do(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, ts.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if s, ok := out.(*string); ok {
			*s = string(b)
		} else if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// rawReq is a request the client has no API for (our in-place split).
type rawReq struct {
	path string
	body string
}

func (r rawReq) GetRequest(method string) (*http.Request, error) {
	req, err := http.NewRequest(method, r.path, strings.NewReader(r.body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}
