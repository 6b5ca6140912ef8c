package server

// The search API: _search, _count and _search_shards, their bodies and
// their hits.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
)

// SearchBody is the part of a search body shardsplit understands.
type SearchBody struct {
	Query service.Query
	Size  *int
	From  *int
	// Source is "_source": false leaves each hit's source out (nil: absent).
	Source *bool
	// Version is "version": each hit carries its _version.
	Version *bool
	// SeqNoPrimaryTerm is "seq_no_primary_term": each hit carries its
	// _seq_no and _primary_term.
	SeqNoPrimaryTerm *bool
	// StoredFields says the body names stored_fields: without _source,
	// hits carry no source (there are no stored fields to return).
	StoredFields bool
	// TrackTotalHits is "track_total_hits" as OpenSearch holds it: the
	// count up to which the total is exact, trackTotalAccurate for true,
	// trackTotalDisabled for false (nil: absent).
	TrackTotalHits *int
}

// OpenSearch's SearchContext values of track_total_hits: true, false, and
// the default (hits.total is exact up to 10,000, then "gte" 10,000).
const (
	trackTotalAccurate = math.MaxInt32
	trackTotalDisabled = -1
	trackTotalDefault  = 10_000
)

var searchBodyKeys = []string{"query", "size", "from", "track_total_hits", "_source", "timeout", "version", "seq_no_primary_term", "stored_fields"}

// ParseSearchBody parses a search or count body: query (match_all, ids,
// term or terms on _id or _routing), size, from, and the hits' _source
// (true or false), version, seq_no_primary_term and stored_fields.
func ParseSearchBody(body []byte, count bool) (SearchBody, error) {
	var sb SearchBody
	m, err := decodeObject(body)
	if err != nil {
		return sb, err
	}
	for k := range m {
		allowed := k == "query"
		if !count {
			allowed = allowed || containsStr(searchBodyKeys, k)
		}
		if !allowed {
			return sb, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
				Reason: fmt.Sprintf("search body field [%s] is not supported by shardsplit (supported: query, size, from, track_total_hits, _source, version, seq_no_primary_term)", k)}
		}
	}
	for _, k := range []string{"size", "from"} {
		if v, ok := m[k]; ok {
			var n int
			if err := json.Unmarshal(v, &n); err != nil || n < 0 {
				return sb, parseErr("[%s] must be a non-negative integer", k)
			}
			if k == "size" {
				sb.Size = &n
			} else {
				sb.From = &n
			}
		}
	}
	for _, f := range []struct {
		key string
		dst **bool
	}{{"_source", &sb.Source}, {"version", &sb.Version}, {"seq_no_primary_term", &sb.SeqNoPrimaryTerm}} {
		v, ok := m[f.key]
		if !ok {
			continue
		}
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			if f.key == "_source" {
				return sb, sourceFilteringUnsupported(string(bytes.TrimSpace(v)))
			}
			return sb, parseErr("[%s] must be a boolean", f.key)
		}
		*f.dst = &b
	}
	if v, ok := m["timeout"]; ok {
		var tv string
		if err := json.Unmarshal(v, &tv); err != nil {
			return sb, parseErr("[timeout] must be a time value string, got %s", v)
		}
		if _, err := service.ParseTimeValue(tv, "timeout"); err != nil {
			return sb, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest, Reason: err.Error()}
		}
	}
	if v, ok := m["track_total_hits"]; ok {
		var b bool
		var n int32
		if json.Unmarshal(v, &b) != nil && json.Unmarshal(v, &n) != nil {
			return sb, parseErr("[track_total_hits] must be a boolean or an integer, got %s", v)
		}
		t, err := parseTrackTotalHits(string(bytes.TrimSpace(v)))
		if err != nil {
			return sb, err
		}
		sb.TrackTotalHits = &t
	}
	if v, ok := m["stored_fields"]; ok {
		var one string
		var list []string
		if json.Unmarshal(v, &one) != nil && json.Unmarshal(v, &list) != nil {
			return sb, parseErr("[stored_fields] must be a string or an array of strings")
		}
		sb.StoredFields = true
	}
	if v, ok := m["query"]; ok {
		if sb.Query, err = parseQuery(v); err != nil {
			return sb, err
		}
	}
	return sb, nil
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func parseQuery(raw json.RawMessage) (service.Query, error) {
	var q service.Query
	m, err := decodeObject(raw)
	if err != nil {
		return q, err
	}
	if len(m) != 1 {
		return q, &service.Error{Type: "parsing_exception", Status: http.StatusBadRequest, Reason: "[query] must hold exactly one query"}
	}
	for kind, body := range m {
		switch kind {
		case "match_all":
			q.Kind = service.MatchAll
			return q, nil
		case "ids":
			var ids struct {
				Values []string `json:"values"`
			}
			if err := json.Unmarshal(body, &ids); err != nil {
				return q, &service.Error{Type: "parsing_exception", Status: http.StatusBadRequest, Reason: "[ids] values must be an array of strings"}
			}
			q.Kind, q.Values = service.IDs, ids.Values
			return q, nil
		case "term", "terms":
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(body, &fields); err != nil || len(fields) != 1 {
				return q, &service.Error{Type: "parsing_exception", Status: http.StatusBadRequest, Reason: fmt.Sprintf("[%s] query malformed, no field or more than one field", kind)}
			}
			for field, v := range fields {
				if field != "_id" && field != "_routing" {
					return q, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
						Reason: fmt.Sprintf("[%s] query on field [%s] is not supported by shardsplit: only _id and _routing (there are no mappings)", kind, field)}
				}
				var values []string
				if kind == "terms" {
					if err := json.Unmarshal(v, &values); err != nil {
						return q, &service.Error{Type: "parsing_exception", Status: http.StatusBadRequest, Reason: "[terms] values must be an array of strings"}
					}
				} else {
					var one string
					if err := json.Unmarshal(v, &one); err != nil {
						var obj struct {
							Value string `json:"value"`
						}
						if err := json.Unmarshal(v, &obj); err != nil || obj.Value == "" {
							return q, &service.Error{Type: "parsing_exception", Status: http.StatusBadRequest, Reason: "[term] value must be a string or {\"value\": …}"}
						}
						one = obj.Value
					}
					values = []string{one}
				}
				if field == "_id" {
					q.Kind, q.Values = service.IDs, values
				} else {
					q.Kind, q.Field, q.Values = service.Term, field, values
				}
			}
			return q, nil
		default:
			return q, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
				Reason: fmt.Sprintf("query [%s] is not supported by shardsplit (supported: match_all, ids, term and terms on _id or _routing)", kind)}
		}
	}
	return q, nil
}

var searchParams = []string{"routing", "preference", "size", "from", "track_total_hits", "rest_total_hits_as_int", "_source",
	"timeout", "search_type", "ignore_unavailable", "allow_no_indices", "expand_wildcards", "request_cache", "typed_keys",
	"seq_no_primary_term", "version", "allow_partial_search_results", "batched_reduce_size", "ccs_minimize_roundtrips", "q"}

// hitOptions are what each search hit carries besides _index, _id and
// _score: the body's _source, version and seq_no_primary_term, each
// overridden by its query parameter (as RestSearchAction does).
type hitOptions struct {
	source, version, seqNoPrimaryTerm bool
	// trackTotal is track_total_hits (the parameter's, else the body's,
	// else trackTotalDefault); totalAsInt is rest_total_hits_as_int.
	trackTotal int
	totalAsInt bool
}

func hitOptionsOf(sb SearchBody, q url.Values) (hitOptions, error) {
	// Naming stored fields fetches the source only when it is asked for.
	o := hitOptions{source: !sb.StoredFields}
	for _, f := range []struct {
		body *bool
		dst  *bool
	}{{sb.Source, &o.source}, {sb.Version, &o.version}, {sb.SeqNoPrimaryTerm, &o.seqNoPrimaryTerm}} {
		if f.body != nil {
			*f.dst = *f.body
		}
	}
	src, err := sourceParam(q)
	if err != nil {
		return o, err
	}
	if src != nil {
		o.source = *src
	}
	if o.version, err = boolParam(q, "version", o.version); err != nil {
		return o, err
	}
	if o.seqNoPrimaryTerm, err = boolParam(q, "seq_no_primary_term", o.seqNoPrimaryTerm); err != nil {
		return o, err
	}
	return o, o.trackTotalHits(sb, q)
}

// trackTotalHits sets how hits.total is counted, as RestSearchAction
// does: the parameter over the body; rest_total_hits_as_int makes the
// default exact and refuses any other limit.
func (o *hitOptions) trackTotalHits(sb SearchBody, q url.Values) error {
	given := sb.TrackTotalHits
	if v := q.Get("track_total_hits"); v != "" {
		t, err := parseTrackTotalHits(v)
		if err != nil {
			return err
		}
		given = &t
	}
	asInt, err := boolParam(q, "rest_total_hits_as_int", false)
	if err != nil {
		return err
	}
	o.totalAsInt, o.trackTotal = asInt, trackTotalDefault
	switch {
	case given != nil && asInt && *given != trackTotalAccurate:
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("[rest_total_hits_as_int] cannot be used if the tracking of total hits is not accurate, got %d", *given)}
	case given != nil:
		o.trackTotal = *given
	case asInt:
		o.trackTotal = trackTotalAccurate
	}
	return nil
}

func (s *Server) searchRequest(r *http.Request, count bool) (service.SearchRequest, hitOptions, url.Values, error) {
	allowed := searchParams
	if count {
		allowed = []string{"routing", "preference", "ignore_unavailable", "allow_no_indices", "expand_wildcards", "min_score", "terminate_after", "q"}
	}
	q, err := params(r, allowed...)
	if err != nil {
		return service.SearchRequest{}, hitOptions{}, nil, err
	}
	// min_score and terminate_after (the count's) would change the answer.
	if err := unsupportedParams(q, "q", "min_score", "terminate_after"); err != nil {
		return service.SearchRequest{}, hitOptions{}, nil, err
	}
	body, err := readBody(r)
	if err != nil {
		return service.SearchRequest{}, hitOptions{}, nil, err
	}
	sb, err := ParseSearchBody(body, count)
	if err != nil {
		return service.SearchRequest{}, hitOptions{}, nil, err
	}
	o, err := indicesOptions(q)
	if err != nil {
		return service.SearchRequest{}, hitOptions{}, nil, err
	}
	req := service.SearchRequest{Indices: r.PathValue("index"), Query: sb.Query, Size: 10, Routing: q.Get("routing"), Preference: q.Get("preference"), Options: o}
	if sb.Size != nil {
		req.Size = *sb.Size
	}
	if sb.From != nil {
		req.From = *sb.From
	}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"size", &req.Size}, {"from", &req.From}} {
		if v := q.Get(p.name); v != "" {
			n, err := countParam(p.name, v)
			if err != nil {
				return req, hitOptions{}, nil, err
			}
			*p.dst = n
		}
	}
	if count {
		req.Size = -1
	}
	ho, err := hitOptionsOf(sb, q)
	if err != nil {
		return req, hitOptions{}, nil, err
	}
	return req, ho, q, nil
}

func (s *Server) search(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	req, ho, _, err := s.searchRequest(r, false)
	if err != nil {
		return err
	}
	res, err := s.svc.Search(req)
	if err != nil {
		return err
	}
	hits := make([]map[string]any, 0, len(res.Hits))
	for _, d := range res.Hits {
		h := map[string]any{"_index": d.Index, "_id": d.ID, "_score": 1.0}
		if d.Routing != "" {
			h["_routing"] = d.Routing
		}
		if ho.source {
			h["_source"] = sourceJSON(d.Source)
		}
		if ho.version {
			h["_version"] = d.Version
		}
		if ho.seqNoPrimaryTerm {
			h["_seq_no"], h["_primary_term"] = d.SeqNo, 1
		}
		hits = append(hits, h)
	}
	var maxScore any
	if len(hits) > 0 {
		maxScore = 1.0
	}
	out := map[string]any{"max_score": maxScore, "hits": hits}
	switch {
	case ho.totalAsInt:
		out["total"] = res.Total
	case ho.trackTotal == trackTotalDisabled: // no total at all
	case res.Total > ho.trackTotal:
		out["total"] = map[string]any{"value": ho.trackTotal, "relation": "gte"}
	default:
		out["total"] = map[string]any{"value": res.Total, "relation": "eq"}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{
		"took":      time.Since(start).Milliseconds(),
		"timed_out": false,
		"_shards":   map[string]int{"total": res.Shards, "successful": res.Shards, "skipped": 0, "failed": 0},
		"hits":      out,
	})
	return nil
}

func (s *Server) count(w http.ResponseWriter, r *http.Request) error {
	req, _, _, err := s.searchRequest(r, true)
	if err != nil {
		return err
	}
	res, err := s.svc.Search(req)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{
		"count":   res.Total,
		"_shards": map[string]int{"total": res.Shards, "successful": res.Shards, "skipped": 0, "failed": 0},
	})
	return nil
}

// allocationID names the one copy of a shard.
func allocationID(uuid string, shard routing.ShardID) string {
	return fmt.Sprintf("%s-%04d", uuid, shard)
}

func (s *Server) searchShards(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "routing", "preference", "local", "ignore_unavailable", "allow_no_indices", "expand_wildcards")
	if err != nil {
		return err
	}
	o, err := lenientExpandOpen(q)
	if err != nil {
		return err
	}
	targets, err := s.svc.SearchShards(r.PathValue("index"), q.Get("routing"), q.Get("preference"), o)
	if err != nil {
		return err
	}
	// Each primary's state as _cat/shards shows it: SPLITTING or MERGING
	// while an in-place split or merge of it runs (a splitting parent is an
	// active primary, ShardRoutingState.SPLITTING), else STARTED.
	states := map[string]string{}
	for _, t := range targets {
		if _, seen := states[t.Index]; seen {
			continue
		}
		states[t.Index] = ""
		rows, err := s.svc.ShardRows(t.Index)
		if err != nil {
			continue
		}
		for _, row := range rows {
			if row.Primary {
				states[row.Index+"\x00"+strconv.Itoa(int(row.Shard))] = row.State
			}
		}
	}
	indices := map[string]any{}
	groups := make([][]map[string]any, 0, len(targets))
	for _, t := range targets {
		indices[t.Index] = map[string]any{}
		state := states[t.Index+"\x00"+strconv.Itoa(int(t.Shard))]
		if state == "" || state == service.StateUnassigned {
			state = service.StateStarted
		}
		groups = append(groups, []map[string]any{{
			"state": state, "primary": true, "node": s.svc.NodeID(), "relocating_node": nil,
			"shard": t.Shard, "index": t.Index, "allocation_id": map[string]string{"id": allocationID(t.UUID, t.Shard)},
		}})
	}
	if names, err := s.svc.Resolve(r.PathValue("index"), o); err == nil {
		for _, n := range names {
			indices[n] = map[string]any{}
		}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{
		"nodes": map[string]any{s.svc.NodeID(): map[string]any{
			"name": s.svc.NodeName(), "ephemeral_id": s.svc.NodeID(), "transport_address": s.ipAddr + ":9300",
			"attributes": map[string]any{"shard_indexing_pressure_enabled": "true"},
		}},
		"indices": indices,
		"shards":  groups,
	})
	return nil
}
