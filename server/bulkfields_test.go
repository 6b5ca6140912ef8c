package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// A bulk action line with a field OpenSearch knows but shardsplit does not
// support (if_seq_no, version, pipeline, ...) was refused as "an unknown
// parameter", which tells a client its request is malformed; it is refused
// as unsupported, naming the field, and a field OpenSearch does not know
// is still unknown.
func TestBulkActionLineFieldsRefusedAsUnsupported(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, tc := range []struct{ field, want string }{
		{`"if_seq_no":3`, "parameter [if_seq_no] is not supported by shardsplit"},
		{`"version":2`, "parameter [version] is not supported by shardsplit"},
		{`"pipeline":"p"`, "parameter [pipeline] is not supported by shardsplit"},
		{`"bogus":1`, "contains an unknown parameter [bogus]"},
	} {
		var res struct {
			Error struct {
				Reason string `json:"reason"`
			} `json:"error"`
		}
		body := fmt.Sprintf("{\"index\":{\"_index\":\"logs\",\"_id\":\"1\",%s}}\n{}\n", tc.field)
		if st := ts.do(t, "POST", "/_bulk", body, &res); st != 400 || !strings.Contains(res.Error.Reason, tc.want) {
			t.Errorf("bulk action line with %s: HTTP %d %q, want 400 naming %q", tc.field, st, res.Error.Reason, tc.want)
		}
	}
}
