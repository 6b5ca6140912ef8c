package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/shardsplit/shardsplit/service"
)

// mget is GET|POST [/{index}]/_mget: {"docs":[{"_index","_id","routing",
// "_source"}...]} or, with an index in the path, {"ids":[...]}. Each
// document is answered as a get is, in order; one that cannot be read is
// an entry with its own error (MultiGetResponse's failure), not a failed
// request.
func (s *Server) mget(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "routing", "preference", "realtime", "refresh", "_source", "stored_fields", "_source_includes", "_source_excludes")
	if err != nil {
		return err
	}
	if err := unsupportedParams(q, "_source_includes", "_source_excludes"); err != nil {
		return err
	}
	defaultSource, err := sourceParam(q)
	if err != nil {
		return err
	}
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return parseErr("request body is required")
	}
	m, err := decodeObject(b)
	if err != nil {
		return err
	}
	if err := checkKeys(m, "mget", "docs", "ids"); err != nil {
		return err
	}
	type docReq struct {
		Index   string          `json:"_index"`
		ID      *string         `json:"_id"`
		Routing string          `json:"routing"`
		Source  json.RawMessage `json:"_source"`
	}
	var reqs []docReq
	pathIndex := r.PathValue("index")
	if raw, ok := m["docs"]; ok {
		if err := json.Unmarshal(raw, &reqs); err != nil {
			return parseErr("[mget] failed to parse field [docs]: %v", err)
		}
	}
	if raw, ok := m["ids"]; ok {
		var ids []string
		if err := json.Unmarshal(raw, &ids); err != nil {
			return parseErr("[mget] failed to parse field [ids]: %v", err)
		}
		for _, id := range ids {
			reqs = append(reqs, docReq{ID: &id})
		}
	}
	// MultiGetRequest.validate: every item needs an index and an id.
	var problems []string
	for i := range reqs {
		if reqs[i].Index == "" {
			reqs[i].Index = pathIndex
		}
		if reqs[i].Index == "" {
			problems = append(problems, "index is missing for doc "+strconv.Itoa(i))
		}
		if reqs[i].ID == nil {
			problems = append(problems, "id is missing for doc "+strconv.Itoa(i))
		}
	}
	if len(reqs) == 0 {
		problems = append(problems, "no documents to get")
	}
	if len(problems) > 0 {
		reason := "Validation Failed: "
		for i, p := range problems {
			reason += strconv.Itoa(i+1) + ": " + p + ";"
		}
		return &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest, Reason: reason}
	}
	docs := make([]any, 0, len(reqs))
	for _, dr := range reqs {
		routingValue := dr.Routing
		if routingValue == "" {
			routingValue = q.Get("routing")
		}
		d, found, err := s.svc.GetDoc(dr.Index, *dr.ID, routingValue)
		if err != nil {
			e := service.AsError(err)
			docs = append(docs, map[string]any{"_index": dr.Index, "_id": *dr.ID, "error": errorBody(e)["error"]})
			continue
		}
		if !found {
			docs = append(docs, map[string]any{"_index": d.Index, "_id": *dr.ID, "found": false})
			continue
		}
		entry := map[string]any{"_index": d.Index, "_id": d.ID, "_version": d.Version, "_seq_no": d.SeqNo,
			"_primary_term": max(d.PrimaryTerm, 1), "found": true}
		if d.Routing != "" {
			entry["_routing"] = d.Routing
		}
		src := defaultSource
		if len(dr.Source) > 0 {
			var v bool
			if json.Unmarshal(dr.Source, &v) != nil {
				return sourceFilteringUnsupported(string(dr.Source))
			}
			src = &v
		}
		if (src == nil && !q.Has("stored_fields")) || (src != nil && *src) {
			entry["_source"] = sourceJSON(d.Source)
		}
		docs = append(docs, entry)
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"docs": docs})
	return nil
}
