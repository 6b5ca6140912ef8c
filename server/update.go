package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/shardsplit/shardsplit/service"
)

// updateRequest is an _update body (UpdateRequest's fields): a partial
// document merged into the source, or an upsert. Scripts are not
// supported (shardsplit has no scripting): refused.
type updateRequest struct {
	Doc         json.RawMessage
	Upsert      json.RawMessage
	DocAsUpsert bool
	DetectNoop  bool
	Source      *bool
}

func parseUpdate(index string, b []byte) (updateRequest, error) {
	u := updateRequest{DetectNoop: true}
	if len(b) == 0 {
		return u, parseErr("request body is required")
	}
	m, err := decodeObject(b)
	if err != nil {
		return u, err
	}
	for _, k := range []string{"script", "scripted_upsert"} {
		if _, ok := m[k]; ok {
			return u, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest, Index: index,
				Reason: fmt.Sprintf("update [%s] is not supported by shardsplit (no scripting): use doc or upsert", k)}
		}
	}
	if err := checkKeys(m, "update", "doc", "upsert", "doc_as_upsert", "detect_noop", "_source"); err != nil {
		return u, err
	}
	for _, k := range []string{"doc", "upsert"} {
		raw, ok := m[k]
		if !ok {
			continue
		}
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
			return u, parseErr("[update] failed to parse field [%s]", k)
		}
	}
	u.Doc, u.Upsert = bytes.TrimSpace(m["doc"]), bytes.TrimSpace(m["upsert"])
	for k, dst := range map[string]*bool{"doc_as_upsert": &u.DocAsUpsert, "detect_noop": &u.DetectNoop} {
		if raw, ok := m[k]; ok && json.Unmarshal(raw, dst) != nil {
			return u, parseErr("[update] failed to parse field [%s]", k)
		}
	}
	if raw, ok := m["_source"]; ok {
		var v bool
		if json.Unmarshal(raw, &v) != nil {
			return u, sourceFilteringUnsupported(string(raw))
		}
		u.Source = &v
	}
	// UpdateRequest.validate.
	if len(u.Doc) == 0 {
		return u, &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest,
			Reason: "Validation Failed: 1: script or doc is missing;"}
	}
	if u.DocAsUpsert && len(u.Upsert) > 0 {
		return u, &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest,
			Reason: "Validation Failed: 1: upsert requests don't support `doc_as_upsert`;"}
	}
	return u, nil
}

// mergeInto is XContentHelper.update: each key of changes replaces the
// source's, but an object merges into an object, recursively; it reports
// whether anything changed.
func mergeInto(source, changes map[string]any) bool {
	modified := false
	for k, v := range changes {
		old, ok := source[k]
		if om, isMap := old.(map[string]any); ok && isMap {
			if nm, isMap := v.(map[string]any); isMap {
				modified = mergeInto(om, nm) || modified
				continue
			}
		}
		if !ok || !jsonEqual(old, v) {
			modified = true
		}
		source[k] = v
	}
	return modified
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// apply is the update's UpdateFunc (UpdateHelper.prepare): a missing
// document takes the upsert (or the doc, with doc_as_upsert) or is
// document_missing_exception; a present one takes the doc merged in.
func (u updateRequest) apply(index, id string) service.UpdateFunc {
	return func(cur []byte, found bool) ([]byte, bool, error) {
		if !found {
			switch {
			case len(u.Upsert) > 0:
				return u.Upsert, false, nil
			case u.DocAsUpsert:
				return u.Doc, false, nil
			}
			return nil, false, &service.Error{Type: "document_missing_exception", Status: http.StatusNotFound, Index: index,
				Reason: fmt.Sprintf("[%s]: document missing", id)}
		}
		var src, changes map[string]any
		if err := json.Unmarshal(cur, &src); err != nil || src == nil {
			return nil, false, &service.Error{Type: "mapper_parsing_exception", Status: http.StatusBadRequest, Index: index,
				Reason: "failed to parse the stored document as a JSON object"}
		}
		dec := json.NewDecoder(bytes.NewReader(u.Doc))
		dec.UseNumber()
		if err := dec.Decode(&changes); err != nil {
			return nil, false, parseErr("[update] failed to parse field [doc]")
		}
		if !mergeInto(src, changes) && u.DetectNoop {
			return nil, true, nil
		}
		next, err := json.Marshal(src)
		return next, false, err
	}
}

// updateBody is UpdateResponse's body, with "get" when the source is
// asked for.
func (s *Server) updateBody(res service.WriteResult, src []byte, withSource bool) map[string]any {
	body := writeBody(res, s.replicas(res.Index))
	if res.Result == "noop" {
		body["_shards"] = map[string]int{"total": 0, "successful": 0, "failed": 0}
	}
	if withSource {
		get := map[string]any{"_seq_no": res.SeqNo, "_primary_term": body["_primary_term"], "found": true, "_source": sourceJSON(src)}
		if res.Routing != "" {
			get["_routing"] = res.Routing
		}
		body["get"] = get
	}
	return body
}

// updateDoc is POST /{index}/_update/{id}.
func (s *Server) updateDoc(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "routing", "refresh", "timeout", "wait_for_active_shards", "_source", "_source_includes",
		"_source_excludes", "retry_on_conflict", "if_seq_no", "if_primary_term", "require_alias", "lang")
	if err != nil {
		return err
	}
	if err := refreshParam(q); err != nil {
		return err
	}
	if err := unsupportedParams(q, "if_seq_no", "if_primary_term", "_source_includes", "_source_excludes", "lang"); err != nil {
		return err
	}
	src, err := sourceParam(q)
	if err != nil {
		return err
	}
	index, id := r.PathValue("index"), r.PathValue("id")
	body, err := readBody(r)
	if err != nil {
		return err
	}
	u, err := parseUpdate(index, body)
	if err != nil {
		return err
	}
	if u.Source != nil {
		src = u.Source
	}
	res, next, err := s.svc.UpdateDoc(index, id, q.Get("routing"), u.apply(index, id))
	if err != nil {
		return err
	}
	out := s.updateBody(res, next, src != nil && *src)
	if q.Has("refresh") && (q.Get("refresh") == "" || q.Get("refresh") == "true") && res.Result != "noop" {
		out["forced_refresh"] = true
	}
	s.writeJSON(w, r, res.Status, out)
	return nil
}
