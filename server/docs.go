package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/shardsplit/shardsplit/service"
)

var writeParams = []string{"routing", "refresh", "timeout", "wait_for_active_shards", "op_type", "version", "version_type",
	"if_seq_no", "if_primary_term", "pipeline", "require_alias"}

// checkSource checks a document source is a JSON object. A request with
// no body at all is RestRequest.requiredContent's OpenSearchParseException
// ("request body is required"), which RestIndexAction reads before the
// request's validation could say "source is missing".
func checkSource(index string, b []byte) error {
	if len(b) == 0 {
		return parseErr("request body is required")
	}
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest, Reason: "Validation Failed: 1: source is missing;"}
	}
	if t[0] != '{' || !json.Valid(t) {
		return &service.Error{Type: "mapper_parsing_exception", Status: http.StatusBadRequest, Index: index, Reason: "failed to parse"}
	}
	return nil
}

func (s *Server) writeResponse(w http.ResponseWriter, r *http.Request, res service.WriteResult, replicas int, forced bool) {
	body := writeBody(res, replicas)
	if forced {
		body["forced_refresh"] = true
	}
	if res.Status == http.StatusCreated {
		w.Header().Set("Location", "/"+url.PathEscape(res.Index)+"/_doc/"+url.PathEscape(res.ID))
	}
	s.writeJSON(w, r, res.Status, body)
}

func writeBody(res service.WriteResult, replicas int) map[string]any {
	total, successful, term := 1+replicas, 1, uint64(1)
	if res.ShardsTotal > 0 {
		total, successful = res.ShardsTotal, res.ShardsSuccessful
	}
	if res.PrimaryTerm > 0 {
		term = res.PrimaryTerm
	}
	return map[string]any{
		"_index":        res.Index,
		"_id":           res.ID,
		"_version":      res.Version,
		"result":        res.Result,
		"_shards":       map[string]int{"total": total, "successful": successful, "failed": 0},
		"_seq_no":       res.SeqNo,
		"_primary_term": term,
	}
}

func (s *Server) replicas(index string) int {
	if m, ok := s.svc.Meta(index); ok {
		if n, err := strconv.Atoi(m.Settings[service.SettingReplicas]); err == nil {
			return n
		}
	}
	return 0
}

func (s *Server) indexDoc(w http.ResponseWriter, r *http.Request) error {
	return s.putDoc(w, r, false)
}

func (s *Server) createDoc(w http.ResponseWriter, r *http.Request) error {
	return s.putDoc(w, r, true)
}

func (s *Server) putDoc(w http.ResponseWriter, r *http.Request, create bool) error {
	q, err := params(r, writeParams...)
	if err != nil {
		return err
	}
	if err := refreshParam(q); err != nil {
		return err
	}
	if err := unsupportedParams(q, "version", "if_seq_no", "if_primary_term", "pipeline"); err != nil {
		return err
	}
	// RestIndexAction: _create takes only create (validateOpType), and
	// IndexRequest.opType reads the value case-insensitively.
	if opType := q.Get("op_type"); create && q.Has("op_type") && strings.ToLower(opType) != "create" {
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("opType must be 'create', found: [%s]", opType)}
	}
	switch strings.ToLower(q.Get("op_type")) {
	case "", "index":
	case "create":
		create = true
	default:
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("opType must be 'create' or 'index', found: [%s]", q.Get("op_type"))}
	}
	index, id := r.PathValue("index"), r.PathValue("id")
	if id == "" && r.Pattern == "POST /{index}/_doc" {
		id = service.NewDocID()
		create = true
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if err := checkSource(index, body); err != nil {
		return err
	}
	requireAlias, err := boolParam(q, "require_alias", false)
	if err != nil {
		return err
	}
	res, err := s.svc.IndexDoc(index, id, q.Get("routing"), bytes.TrimSpace(body), service.WriteOptions{Create: create, RequireAlias: requireAlias})
	if err != nil {
		return err
	}
	forced := q.Has("refresh") && (q.Get("refresh") == "" || q.Get("refresh") == "true")
	s.writeResponse(w, r, res, s.replicas(res.Index), forced)
	return nil
}

// deleteParams are RestDeleteAction's parameters.
var deleteParams = []string{"routing", "refresh", "timeout", "wait_for_active_shards", "version", "version_type",
	"if_seq_no", "if_primary_term"}

func (s *Server) deleteDoc(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, deleteParams...)
	if err != nil {
		return err
	}
	if err := refreshParam(q); err != nil {
		return err
	}
	if err := unsupportedParams(q, "version", "if_seq_no", "if_primary_term"); err != nil {
		return err
	}
	res, err := s.svc.DeleteDoc(r.PathValue("index"), r.PathValue("id"), q.Get("routing"))
	if err != nil {
		return err
	}
	s.writeResponse(w, r, res, s.replicas(res.Index), false)
	return nil
}

var getParams = []string{"routing", "stored_fields", "_source", "_source_includes", "_source_excludes", "realtime", "refresh", "preference", "version", "version_type"}

func (s *Server) fetch(r *http.Request) (service.Doc, bool, url.Values, error) {
	q, err := params(r, getParams...)
	if err != nil {
		return service.Doc{}, false, nil, err
	}
	if err := unsupportedParams(q, "_source_includes", "_source_excludes"); err != nil {
		return service.Doc{}, false, nil, err
	}
	version, err := getVersionParam(q)
	if err != nil {
		return service.Doc{}, false, nil, err
	}
	d, found, err := s.svc.GetDoc(r.PathValue("index"), r.PathValue("id"), q.Get("routing"))
	if err == nil && found && version != matchAnyVersion && d.Version != version {
		e := &service.Error{Type: service.TypeVersionConflict, Status: http.StatusConflict, Index: d.Index,
			Reason: fmt.Sprintf("[%s]: version conflict, current version [%d] is different than the one provided [%d]", d.ID, d.Version, version)}
		if m, ok := s.svc.Meta(d.Index); ok {
			e.UUID = m.UUID
		}
		return d, found, q, e
	}
	return d, found, q, err
}

func sourceJSON(b []byte) any {
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return string(b) // a document written by another tool (not JSON)
}

func (s *Server) getDoc(w http.ResponseWriter, r *http.Request) error {
	d, found, q, err := s.fetch(r)
	if err != nil {
		return err
	}
	if !found {
		s.writeJSON(w, r, http.StatusNotFound, map[string]any{"_index": d.Index, "_id": d.ID, "found": false})
		return nil
	}
	term := max(d.PrimaryTerm, 1)
	body := map[string]any{
		"_index": d.Index, "_id": d.ID, "_version": d.Version, "_seq_no": d.SeqNo, "_primary_term": term, "found": true,
	}
	if d.Routing != "" {
		body["_routing"] = d.Routing
	}
	src, err := sourceParam(q)
	if err != nil {
		return err
	}
	if (src == nil && !q.Has("stored_fields")) || (src != nil && *src) {
		body["_source"] = sourceJSON(d.Source)
	}
	s.writeJSON(w, r, http.StatusOK, body)
	return nil
}

func (s *Server) getSource(w http.ResponseWriter, r *http.Request) error {
	d, found, _, err := s.fetch(r)
	if err != nil {
		return err
	}
	if !found {
		return &service.Error{Type: service.TypeResourceNotFound, Status: http.StatusNotFound, Index: d.Index,
			Reason: fmt.Sprintf("Document not found [%s]/[%s]", d.Index, d.ID)}
	}
	s.writeJSON(w, r, http.StatusOK, sourceJSON(d.Source))
	return nil
}
