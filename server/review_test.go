package server_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/service"
)

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
