// Package server is shardsplit's OpenSearch-compatible REST API: net/http
// handlers over package service, answering with OpenSearch 3.x request and
// response shapes, status codes and error bodies, so curl, Dashboards'
// console and the official clients work against it unchanged. It adds one
// endpoint of its own, the in-place split of a shard
// (POST /{index}/_shards/{shard_id}/_split), run as a task.
//
// Routing uses only net/http's method and wildcard patterns. Paths whose
// first segment starts with '_' (cluster-level APIs) and paths that start
// with an index expression go to two muxes, because a pattern such as
// "GET /_nodes/{node_id}" and one such as "GET /{index}/_settings" overlap
// without either being more specific, which one mux refuses.
//
// Every failure answers OpenSearch's error body
// {"error":{"root_cause":[…],"type":…,"reason":…},"status":N}.
package server

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/service"
)

// MaxContentLength is http.max_content_length (100mb).
const MaxContentLength = 100 << 20

// Config configures a Server.
type Config struct {
	Service *service.Service
	Logger  *zap.Logger
	// Addr is the address the node publishes (host:port), shown in _nodes,
	// _cat/nodes and _search_shards.
	Addr string
	// ClusterName defaults to "shardsplit".
	ClusterName string
	// MaxContentLength bounds request bodies (default MaxContentLength).
	MaxContentLength int64
}

// Server is the REST API.
type Server struct {
	cfg       Config
	svc       *service.Service
	log       *zap.Logger
	sys       *http.ServeMux // first path segment starts with '_'
	idx       *http.ServeMux // first path segment is an index expression
	host      string         // of Addr
	ipAddr    string         // host as an IP for _nodes and _cat (loopback for a wildcard bind)
	usage     sync.Map       // route pattern -> *atomic.Int64: requests answered, for _nodes/usage
	cset      clusterSettings
	templates templateStore
}

// New returns the API over a service.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.ClusterName == "" {
		cfg.ClusterName = "shardsplit"
	}
	if cfg.MaxContentLength == 0 {
		cfg.MaxContentLength = MaxContentLength
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:9200"
	}
	s := &Server{cfg: cfg, svc: cfg.Service, log: cfg.Logger, sys: http.NewServeMux(), idx: http.NewServeMux()}
	s.host = cfg.Addr
	if i := strings.LastIndex(cfg.Addr, ":"); i >= 0 {
		s.host = cfg.Addr[:i]
	}
	s.ipAddr = strings.Trim(s.host, "[]")
	if s.ipAddr == "" || s.ipAddr == "0.0.0.0" || s.ipAddr == "::" {
		s.ipAddr = "127.0.0.1"
	}
	s.routes()
	return s
}

// handler is an endpoint: it writes a success itself or returns an error.
type handler func(w http.ResponseWriter, r *http.Request) error

func (s *Server) handle(mux *http.ServeMux, pattern string, h handler) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		s.countUse(pattern)
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// ServeHTTP dispatches to the cluster-level or the index-level mux.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &statusWriter{ResponseWriter: rw}
	defer s.recoverPanic(w, r)
	if r.ContentLength > s.cfg.MaxContentLength {
		s.writeError(w, r, tooLarge(s.cfg.MaxContentLength))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxContentLength)
	// OpenSearch's HTTP layer (Netty's HttpContentDecompressor)
	// decompresses gzip and deflate bodies, as the official clients'
	// CompressRequestBody sends them, and passes other encodings through;
	// the decompressed body is what http.max_content_length bounds.
	if dec, ok := newBodyDecoder(strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))), r.Body); ok {
		r.Body = http.MaxBytesReader(w, dec, s.cfg.MaxContentLength)
		r.Header.Del("Content-Encoding")
		r.ContentLength = -1
	}
	if _, err := decodeQueryString(r.URL.RawQuery); err != nil {
		s.writeError(w, r, badParameter(err))
		return
	}
	mux := s.idx
	first, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if strings.HasPrefix(first, "_") && first != "_all" {
		mux = s.sys
	}
	if r.URL.Path == "/" {
		mux = s.sys
	}
	if _, pattern := mux.Handler(r); pattern == "" {
		s.noRoute(w, r, mux)
		return
	}
	// The whole body is read before dispatch, as Netty's aggregator does
	// (a body over the limit is a 413 before anything else), so that a
	// body's Content-Type is checked only when there is a body
	// (RestController.dispatchRequest).
	if r.ContentLength != 0 {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		if len(b) > 0 {
			if msg := contentTypeRefusal(r.Header.Values("Content-Type")); msg != "" {
				// BytesRestResponse.createSimpleErrorResponse's body.
				s.encodeJSON(w, r, http.StatusNotAcceptable, map[string]any{"error": msg, "status": http.StatusNotAcceptable}, false)
				return
			}
		}
	}
	mux.ServeHTTP(w, r)
}

// contentTypeRefusal is RestController.sendContentTypeErrorMessage's
// message for a request body whose Content-Type is missing or names no
// media type this server parses, "" when it is one: JSON, NDJSON (bulk),
// or their application/vnd.opensearch+ forms. (OpenSearch also parses
// SMILE, CBOR and YAML bodies; shardsplit does not, and refuses them the
// same way.)
func contentTypeRefusal(values []string) string {
	if len(values) == 0 {
		return "Content-Type header is missing"
	}
	media, _, _ := strings.Cut(values[0], ";")
	switch strings.ToLower(strings.TrimSpace(media)) {
	case "application/json", "application/x-ndjson", "application/vnd.opensearch+json", "application/vnd.opensearch+x-ndjson":
		return ""
	}
	return "Content-Type header [" + strings.Join(values, ",") + "] is not supported"
}

// bodyDecoder decompresses a request body on its first read, so that a
// body that is not in its encoding fails that read with a 400
// parse_exception naming the encoding, as a malformed body does.
type bodyDecoder struct {
	enc  string
	src  io.ReadCloser
	dec  io.ReadCloser
	fail error
}

func newBodyDecoder(enc string, src io.ReadCloser) (io.ReadCloser, bool) {
	switch enc {
	case "gzip", "x-gzip", "deflate", "x-deflate":
		return &bodyDecoder{enc: enc, src: src}, true
	}
	return nil, false
}

func (b *bodyDecoder) Read(p []byte) (int, error) {
	if b.fail != nil {
		return 0, b.fail
	}
	if b.dec == nil {
		var err error
		if b.enc == "deflate" || b.enc == "x-deflate" {
			b.dec, err = newDeflateReader(b.src)
		} else {
			b.dec, err = gzip.NewReader(b.src)
		}
		if err != nil {
			b.fail = b.wrap(err)
			return 0, b.fail
		}
	}
	n, err := b.dec.Read(p)
	if err != nil && err != io.EOF {
		err = b.wrap(err)
	}
	return n, err
}

// newDeflateReader reads a deflate body zlib-wrapped or raw, as Netty's
// lenient decoder (ZlibWrapper.ZLIB_OR_NONE) does: zlib when its first two
// bytes look like a zlib header (JdkZlibDecoder.looksLikeZlib), else raw
// deflate.
func newDeflateReader(src io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReader(src)
	hdr, err := br.Peek(2)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if cmfFlg := uint16(hdr[0])<<8 | uint16(hdr[1]); cmfFlg&0x7800 == 0x7800 && cmfFlg%31 == 0 {
		return zlib.NewReader(br)
	}
	return flate.NewReader(br), nil
}

// wrap names a decoding failure; a body over the limit stays an
// *http.MaxBytesError (a 413).
func (b *bodyDecoder) wrap(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	return parseErr("request body is not valid %s content: %v", b.enc, err)
}

func (b *bodyDecoder) Close() error {
	if b.dec != nil {
		_ = b.dec.Close()
	}
	return b.src.Close()
}

// statusWriter notes whether a response has begun.
type statusWriter struct {
	http.ResponseWriter
	begun bool
}

func (w *statusWriter) WriteHeader(status int) {
	w.begun = true
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.begun = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// recoverPanic turns a handler's panic into OpenSearch's 500 (an
// "exception" naming the panic), logged with its stack, as OpenSearch
// answers an unexpected exception, instead of net/http's dropped
// connection. A response already begun cannot be replaced: the connection
// is aborted then (http.ErrAbortHandler), so a client cannot take a
// truncated body for a whole one. An http.ErrAbortHandler passes through.
func (s *Server) recoverPanic(w *statusWriter, r *http.Request) {
	p := recover()
	if p == nil {
		return
	}
	if p == http.ErrAbortHandler {
		panic(p)
	}
	s.log.Error("request panicked", zap.String("method", r.Method), zap.String("uri", r.URL.RequestURI()),
		zap.Any("panic", p), zap.Bool("response_begun", w.begun), zap.StackSkip("stack", 1))
	if w.begun {
		panic(http.ErrAbortHandler)
	}
	s.encodeJSON(w, r, http.StatusInternalServerError, errorBody(&service.Error{Type: service.TypeException,
		Status: http.StatusInternalServerError, Reason: fmt.Sprintf("panic: %v", p)}), false)
}

var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions}

// noRoute answers an unknown URI (400) or a known URI with a wrong method
// (405, with the allowed methods), as OpenSearch's RestController does.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) {
	var allowed []string
	for _, m := range methods {
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, p := mux.Handler(r2); p != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) == 0 {
		s.writeError(w, r, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("no handler found for uri [%s] and method [%s]", r.URL.RequestURI(), r.Method)})
		return
	}
	w.Header().Set("Allow", strings.Join(allowed, ","))
	s.writeError(w, r, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusMethodNotAllowed,
		Reason: fmt.Sprintf("Incorrect HTTP method for uri [%s] and method [%s], allowed: [%s]", r.URL.RequestURI(), r.Method, strings.Join(allowed, ", "))})
}

func tooLarge(limit int64) *service.Error {
	return &service.Error{Type: "content_too_long_exception", Status: http.StatusRequestEntityTooLarge,
		Reason: fmt.Sprintf("request body is larger than http.max_content_length [%dmb]", limit>>20)}
}

// errorBody is OpenSearch's error response.
func errorBody(e *service.Error) map[string]any {
	cause := map[string]any{"type": e.Type, "reason": e.Reason}
	if e.Index != "" {
		cause["index"] = e.Index
		uuid := e.UUID
		if uuid == "" {
			uuid = "_na_"
		}
		cause["index_uuid"] = uuid
	}
	for k, v := range e.Extra {
		cause[k] = v
	}
	top := map[string]any{"root_cause": []any{cause}}
	for k, v := range cause {
		top[k] = v
	}
	return map[string]any{"error": top, "status": e.Status}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = tooLarge(mbe.Limit)
	}
	e := service.AsError(err)
	if e.Type == service.TypeException {
		s.log.Warn("request failed", zap.String("method", r.Method), zap.String("uri", r.URL.RequestURI()), zap.Error(err))
	}
	s.encodeJSON(w, r, e.Status, errorBody(e), false)
}

func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	s.encodeJSON(w, r, status, v, true)
}

// encodeJSON writes a JSON response, filtered by filter_path if filter
// is set: error bodies are not (RestChannel.newErrorBuilder builds them
// without filtering).
func (s *Server) encodeJSON(w http.ResponseWriter, r *http.Request, status int, v any, filter bool) {
	var b []byte
	var err error
	if pretty(r) {
		b, err = json.MarshalIndent(v, "", "  ")
	} else {
		b, err = json.Marshal(v)
	}
	if fp := query(r).Get("filter_path"); filter && err == nil && fp != "" {
		if b, err = filterJSON(b, fp); err == nil && pretty(r) {
			var out bytes.Buffer
			if err = json.Indent(&out, b, "", "  "); err == nil {
				b = out.Bytes()
			}
		}
	}
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"root_cause":[{"type":"exception","reason":"response encoding failed"}],"type":"exception","reason":"response encoding failed"},"status":500}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
		if pretty(r) {
			_, _ = w.Write([]byte("\n"))
		}
	}
}

func pretty(r *http.Request) bool {
	v, ok := query(r)["pretty"]
	return ok && (len(v) == 0 || v[0] == "" || v[0] == "true")
}

// readBody reads the whole body (bounded by MaxBytesReader).
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	if src := query(r).Get("source"); len(b) == 0 && src != "" {
		b = []byte(src)
	}
	return b, nil
}

func parseErr(format string, args ...any) *service.Error {
	return &service.Error{Type: service.TypeParse, Status: http.StatusBadRequest, Reason: fmt.Sprintf(format, args...)}
}

// decodeObject parses a JSON object body strictly enough to catch
// malformed JSON; an empty body is an empty object.
func decodeObject(b []byte) (map[string]json.RawMessage, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return map[string]json.RawMessage{}, nil
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return nil, parseErr("request body is not a valid JSON object: %v", err)
	}
	if dec.More() {
		return nil, parseErr("request body has trailing data after the JSON object")
	}
	if m == nil {
		return nil, parseErr("request body is required to be a JSON object")
	}
	return m, nil
}

// decodeRequestObject is decodeObject for a body an ObjectParser named
// name reads: a body that is JSON but not an object is its
// XContentParseException, "[line:column] [name] Expected START_OBJECT but
// was: TOKEN", at the token's location.
func decodeRequestObject(b []byte, name string) (map[string]json.RawMessage, error) {
	line, col := 1, 1
	for _, c := range b {
		if c == '{' {
			break
		}
		switch c {
		case ' ', '\t', '\r':
			col++
			continue
		case '\n':
			line, col = line+1, 1
			continue
		}
		token := ""
		switch {
		case c == '[':
			token = "START_ARRAY"
		case c == '"':
			token = "VALUE_STRING"
		case c == '-' || (c >= '0' && c <= '9'):
			token = "VALUE_NUMBER"
		case c == 't' || c == 'f':
			token = "VALUE_BOOLEAN"
		case c == 'n':
			token = "VALUE_NULL"
		}
		if token != "" && json.Valid(b) {
			return nil, &service.Error{Type: "x_content_parse_exception", Status: http.StatusBadRequest,
				Reason: fmt.Sprintf("[%d:%d] [%s] Expected START_OBJECT but was: %s", line, col, name, token)}
		}
		break
	}
	return decodeObject(b)
}

// checkKeys refuses unknown top-level keys of a request body, as
// OpenSearch's parsers do.
func checkKeys(m map[string]json.RawMessage, what string, allowed ...string) error {
	for k := range m {
		if !slices.Contains(allowed, k) {
			return parseErr("[%s] unknown field [%s]", what, k)
		}
	}
	return nil
}
