package server

// Query-string and path parameters: how a request's parameters are read,
// checked and parsed, in one place (OpenSearch's RestRequest param
// parsing and its value parsers).

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
)

// decodeQueryString decodes a raw query string as OpenSearch's
// RestUtils.decodeQueryString does: pairs separated by '&' or ';', the
// first '=' splits name from value, a name without '=' has an empty value,
// a repeated name keeps its last value, and each part is decoded by
// decodeComponent. Go's url.ParseQuery differs (it refuses ';' and "%%"),
// and url.URL.Query drops what it cannot decode without a word, so a
// routing value with a bad escape silently became no routing.
func decodeQueryString(raw string) (url.Values, error) {
	out := url.Values{}
	if i := strings.IndexByte(raw, '#'); i >= 0 {
		raw = raw[:i]
	}
	for _, pair := range strings.FieldsFunc(raw, func(c rune) bool { return c == '&' || c == ';' }) {
		rawName, rawValue, _ := strings.Cut(pair, "=")
		if rawName == "" {
			rawName, rawValue = rawValue, "" // "=v" is the parameter v, as OpenSearch reads it
		}
		name, err := decodeComponent(rawName)
		if err != nil {
			return nil, err
		}
		value, err := decodeComponent(rawValue)
		if err != nil {
			return nil, err
		}
		out.Set(name, value)
	}
	return out, nil
}

// decodeComponent is RestUtils.decodeComponent with '+' as a space: "%%"
// is '%', "%hh" a byte, and a malformed escape is an error with
// OpenSearch's message.
func decodeComponent(s string) (string, error) {
	if !strings.ContainsAny(s, "%+") {
		return s, nil
	}
	buf := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '+':
			buf = append(buf, ' ')
		case '%':
			if i == len(s)-1 {
				return "", fmt.Errorf("unterminated escape sequence at end of string: %s", s)
			}
			i++
			if s[i] == '%' {
				buf = append(buf, '%')
				continue
			}
			if i == len(s)-1 {
				return "", fmt.Errorf("partial escape sequence at end of string: %s", s)
			}
			hi, lo := unhex(s[i]), unhex(s[i+1])
			i++
			if hi < 0 || lo < 0 {
				return "", fmt.Errorf("invalid escape sequence `%%%c%c' at index %d of: %s", s[i-1], s[i], i-2, s)
			}
			buf = append(buf, byte(hi<<4|lo))
		default:
			buf = append(buf, c)
		}
	}
	return string(buf), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// badParameter is OpenSearch's answer to a query string it cannot decode
// (RestRequest.BadParameterException wrapping the IllegalArgumentException).
func badParameter(err error) *service.Error {
	return &service.Error{Type: "bad_parameter_exception", Status: http.StatusBadRequest,
		Reason: "java.lang.IllegalArgumentException: " + err.Error()}
}

// query returns the request's decoded query parameters (ServeHTTP has
// refused a query string that does not decode).
func query(r *http.Request) url.Values {
	q, err := decodeQueryString(r.URL.RawQuery)
	if err != nil {
		return url.Values{}
	}
	return q
}

// commonParams are accepted by every endpoint.
var commonParams = []string{"pretty", "human", "error_trace", "filter_path", "source", "source_content_type"}

// params checks a request's query parameters against what the endpoint
// accepts: an unknown one is OpenSearch's illegal_argument_exception.
func params(r *http.Request, allowed ...string) (url.Values, error) {
	q := query(r)
	var bad []string
	for k := range q {
		if !slices.Contains(allowed, k) && !slices.Contains(commonParams, k) {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		what := "parameter"
		if len(bad) > 1 {
			what = "parameters"
		}
		return nil, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("request [%s] contains unrecognized %s: [%s]", r.URL.Path, what, strings.Join(bad, "], ["))}
	}
	if err := checkParamValues(q); err != nil {
		return nil, err
	}
	return q, nil
}

// checkParamValues parses the values of the parameters endpoints accept
// without acting on them, as OpenSearch's REST layer parses each one, so a
// bad value is a 400 naming it rather than ignored.
func checkParamValues(q url.Values) error {
	bad := func(format string, args ...any) error {
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest, Reason: fmt.Sprintf(format, args...)}
	}
	for name, vs := range q {
		v := vs[0]
		switch name {
		case "timeout", "master_timeout", "cluster_manager_timeout":
			if _, err := service.ParseTimeValue(v, name); v != "" && err != nil {
				return bad("%s", err.Error())
			}
		case "request_cache", "rest_total_hits_as_int":
			if _, err := boolParam(q, name, false); err != nil {
				return err
			}
		case "track_total_hits":
			if _, err := parseTrackTotalHits(v); err != nil {
				return err
			}
		case "search_type":
			if v != "query_then_fetch" && v != "dfs_query_then_fetch" {
				return bad("No search type for [%s]", v)
			}
		case "expand_wildcards":
			for _, w := range strings.Split(v, ",") {
				switch strings.TrimSpace(w) {
				case "open", "closed", "hidden", "none", "all":
				default:
					return bad("No valid expand wildcard value [%s]", w)
				}
			}
		case "wait_for_active_shards": // ActiveShardCount.parseString
			if v == "" || v == "all" || v == "index-setting" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return &service.Error{Type: "number_format_exception", Status: http.StatusBadRequest,
					Reason: fmt.Sprintf("For input string: \"%s\"", v)}
			}
			if n < 0 {
				return bad("shard count cannot be a negative value")
			}
		}
	}
	return nil
}

func boolParam(q url.Values, name string, def bool) (bool, error) {
	v, ok := q[name]
	if !ok {
		return def, nil
	}
	if v[0] == "" {
		return true, nil // a bare ?name
	}
	return parseBoolean(v[0])
}

// parseBoolean is OpenSearch's Booleans.parseBoolean: "true" or "false".
func parseBoolean(v string) (bool, error) {
	switch v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
		Reason: fmt.Sprintf("Failed to parse value [%s] as only [true] or [false] are allowed.", v)}
}

// indicesOptions reads a request's allow_no_indices and ignore_unavailable
// (booleans, as boolParam); one that is absent keeps the request's default.
// expand_wildcards is accepted and not read: every index here is open and
// none is hidden.
func indicesOptions(q url.Values) (service.IndicesOptions, error) {
	var o service.IndicesOptions
	for _, p := range []struct {
		name string
		dst  **bool
	}{{"allow_no_indices", &o.AllowNoIndices}, {"ignore_unavailable", &o.IgnoreUnavailable}} {
		if _, ok := q[p.name]; !ok {
			continue
		}
		v, err := boolParam(q, p.name, false)
		if err != nil {
			return o, err
		}
		*p.dst = &v
	}
	return o, nil
}

// lenientExpandOpen is indicesOptions with the defaults of OpenSearch's
// IndicesOptions.lenientExpandOpen, which the cluster state and
// _search_shards requests have: ignore_unavailable true.
func lenientExpandOpen(q url.Values) (service.IndicesOptions, error) {
	o, err := indicesOptions(q)
	if o.IgnoreUnavailable == nil {
		yes := true
		o.IgnoreUnavailable = &yes
	}
	return o, err
}

func durationParam(q map[string][]string, name string, def time.Duration) (time.Duration, error) {
	v, ok := q[name]
	if !ok || v[0] == "" {
		return def, nil
	}
	d, err := service.ParseTimeValue(v[0], name)
	if err != nil {
		return 0, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest, Reason: err.Error()}
	}
	return d, nil
}

func refreshParam(q url.Values) error {
	switch v := q.Get("refresh"); v {
	case "", "true", "false", "wait_for":
		return nil
	default:
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("Unknown value for refresh: [%s].", v)}
	}
}

func unsupportedParams(q url.Values, names ...string) error {
	for _, n := range names {
		if _, ok := q[n]; ok {
			return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
				Reason: fmt.Sprintf("parameter [%s] is not supported by shardsplit", n)}
		}
	}
	return nil
}

// matchAnyVersion is OpenSearch's Versions.MATCH_ANY: no version condition.
const matchAnyVersion = -3

// getVersionParam reads a get's version and version_type, as GetRequest
// does: version_type is VersionType.fromString's (internal, external,
// external_gt: external, external_gte), version a long, MATCH_ANY (-3, the
// default) or valid for reads (positive for internal, at least 0 for the
// external types), and every version type compares a read for equality
// (isVersionConflictForReads).
func getVersionParam(q url.Values) (int64, error) {
	name, min := "INTERNAL", int64(1) // VersionType.name(), validateVersionForReads
	switch vt := q.Get("version_type"); vt {
	case "", "internal":
	case "external", "external_gt":
		name, min = "EXTERNAL", 0
	case "external_gte":
		name, min = "EXTERNAL_GTE", 0
	default:
		return 0, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("No version type match [%s]", vt)}
	}
	if !q.Has("version") {
		return matchAnyVersion, nil
	}
	v, err := strconv.ParseInt(q.Get("version"), 10, 64)
	if err != nil {
		return 0, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("Failed to parse long parameter [version] with value [%s]", q.Get("version"))}
	}
	if v != matchAnyVersion && v < min {
		return 0, &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("Validation Failed: 1: illegal version value [%d] for version type [%s];", v, name)}
	}
	return v, nil
}

// sourceParam reads a _source query parameter: true or false (a bare
// ?_source fetches it, as an empty include list does in OpenSearch's
// FetchSourceContext); nil when absent. Any other value is a list of
// fields to keep, which shardsplit cannot filter: refused rather than
// answered with the whole source.
func sourceParam(q url.Values) (*bool, error) {
	if !q.Has("_source") {
		return nil, nil
	}
	switch v := q.Get("_source"); v {
	case "", "true":
		yes := true
		return &yes, nil
	case "false":
		no := false
		return &no, nil
	default:
		return nil, sourceFilteringUnsupported(v)
	}
}

func sourceFilteringUnsupported(v string) *service.Error {
	return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
		Reason: fmt.Sprintf("_source filtering [%s] is not supported by shardsplit: use true or false", v)}
}

// parseTrackTotalHits reads a track_total_hits value: a boolean or an
// integer that is positive or -1.
func parseTrackTotalHits(v string) (int, error) {
	switch v {
	case "true":
		return trackTotalAccurate, nil
	case "false":
		return trackTotalDisabled, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("[track_total_hits] must be a boolean or an integer, got [%s]", v)}
	}
	if n < 0 && n != trackTotalDisabled {
		return 0, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("[track_total_hits] parameter must be positive or equals to -1, got %d", n)}
	}
	return int(n), nil
}

// parseByteSize parses OpenSearch byte sizes: 10b, 5kb, 1mb, 2gb, 1tb, 1pb.
func parseByteSize(v string) (int64, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	for _, u := range []struct {
		s string
		m int64
	}{{"pb", 1 << 50}, {"tb", 1 << 40}, {"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"b", 1}} {
		if n, ok := strings.CutSuffix(v, u.s); ok {
			f, err := strconv.ParseFloat(n, 64)
			if err != nil || f < 0 {
				return 0, fmt.Errorf("bad size %q", v)
			}
			return int64(f * float64(u.m)), nil
		}
	}
	return 0, fmt.Errorf("bad size %q", v)
}

// intParamErr is RestRequest.paramAsInt's refusal of a value.
func intParamErr(name, v string) *service.Error {
	return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
		Reason: fmt.Sprintf("Failed to parse int parameter [%s] with value [%s]", name, v)}
}

// countParam reads an int parameter that counts something (a search's
// size and from): a negative one is refused as one that does not parse.
func countParam(name, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, intParamErr(name, v)
	}
	return n, nil
}

// shardIDParam reads the shard_id path parameter: a shard id, 0 to 2^32-1.
func shardIDParam(r *http.Request) (routing.ShardID, error) {
	v := r.PathValue("shard_id")
	id, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, intParamErr("shard_id", v)
	}
	return routing.ShardID(id), nil
}
