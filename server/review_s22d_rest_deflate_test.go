package server_test

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"io"
	"net/http"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22dRESTDeflateBodies: OpenSearch's HTTP layer (Netty's
// HttpContentDecompressor, not strict) decompresses a body whose
// Content-Encoding is deflate or x-deflate (case-insensitive), zlib-wrapped
// or raw (ZlibWrapper.ZLIB_OR_NONE). Only zlib-wrapped "deflate" was
// decompressed: x-deflate was parsed as JSON and raw deflate refused.
func TestReviewS22dRESTDeflateBodies(t *testing.T) {
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
