package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/service"
)

// BulkItem is one parsed bulk action.
type BulkItem struct {
	Op      string // index, create, delete
	Index   string
	ID      string
	Routing string
	// RequireAlias is the action line's require_alias, nil when absent
	// (the request's parameter applies).
	RequireAlias *bool
	Source       []byte // index/create
	Err          *service.Error
	update       updateRequest // update: the parsed source line
}

// ParseBulk parses a bulk NDJSON body: an action line ({"index"|"create"|
// "delete"|"update": {_index, _id, routing}}) followed, except for delete,
// by a source line. A malformed action line fails the whole request (as in
// OpenSearch, before anything is applied); a bad source fails its item only.
func ParseBulk(body []byte, defaultIndex string) ([]BulkItem, error) {
	// Every line ends with a newline, the last one too: BulkRequestParser
	// refuses anything after the last newline, so a body cut short after a
	// whole line is not taken for the whole request.
	if i := bytes.LastIndexByte(body, '\n'); len(body[i+1:]) > 0 {
		return nil, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: "The bulk request must be terminated by a newline [\\n]"}
	}
	var items []BulkItem
	lines := bytes.Split(body, []byte("\n"))
	for i := 0; i < len(lines); i++ {
		line := bytes.TrimSpace(lines[i])
		if len(line) == 0 {
			continue
		}
		var action map[string]map[string]json.RawMessage
		if err := json.Unmarshal(line, &action); err != nil || len(action) != 1 {
			return nil, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
				Reason: fmt.Sprintf("Malformed action/metadata line [%d], expected a simple object with one action", i+1)}
		}
		var it BulkItem
		var meta map[string]json.RawMessage
		for op, m := range action {
			it.Op, meta = op, m
		}
		switch it.Op {
		case "index", "create", "delete", "update":
		default:
			return nil, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
				Reason: fmt.Sprintf("Malformed action/metadata line [%d], expected field [create], [delete], [index] or [update] but found [%s]", i+1, it.Op)}
		}
		for k, v := range meta {
			s, err := bulkMetaText(v)
			if err != nil {
				return nil, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
					Reason: fmt.Sprintf("Malformed action/metadata line [%d], expected a simple value for field [%s] but found [%s]", i+1, k, err)}
			}
			switch k {
			case "_index":
				it.Index = s
			case "_id":
				it.ID = s
				if s == "" && bytes.HasPrefix(bytes.TrimSpace(v), []byte(`"`)) && it.Op != "delete" {
					// Only an absent _id asks for a generated one
					// (IndexRequest.process).
					it.Err = &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
						Reason: "if _id is specified it must not be empty"}
				}
			case "routing", "_routing":
				it.Routing = s
			case "require_alias":
				b, err := parseBoolean(s)
				if err != nil {
					return nil, err
				}
				it.RequireAlias = &b
			case "retry_on_conflict":
				// An update here reads and writes under the document's
				// lock, so it never conflicts: nothing to retry.
				if it.Op != "update" {
					return nil, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
						Reason: fmt.Sprintf("Action/metadata line [%d] contains an unknown parameter [%s]", i+1, k)}
				}
			case "op_type", "version", "version_type", "if_seq_no", "if_primary_term", "pipeline", "_source":
				// Fields OpenSearch's BulkRequestParser knows: refused as
				// what they are, not as unknown.
				return nil, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
					Reason: fmt.Sprintf("Action/metadata line [%d]: parameter [%s] is not supported by shardsplit", i+1, k)}
			default:
				return nil, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
					Reason: fmt.Sprintf("Action/metadata line [%d] contains an unknown parameter [%s]", i+1, k)}
			}
		}
		if it.Index == "" {
			it.Index = defaultIndex
		}
		if it.Index == "" {
			return nil, &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest, Reason: "Validation Failed: 1: index is missing;"}
		}
		if it.Op != "delete" {
			i++
			if i >= len(lines) || len(bytes.TrimSpace(lines[i])) == 0 {
				return nil, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
					Reason: "The bulk request must be terminated by a newline [\\n]"}
			}
			it.Source = bytes.TrimSpace(lines[i])
			switch {
			case it.Err != nil: // the action line's own error stands
			case it.Op == "update":
				if it.ID == "" {
					it.Err = &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest, Reason: "Validation Failed: 1: id is missing;"}
					break
				}
				u, err := parseUpdate(it.Index, it.Source)
				if err != nil {
					it.Err = service.AsError(err)
				}
				it.update = u
			default:
				if err := checkSource(it.Index, it.Source); err != nil {
					it.Err = service.AsError(err)
				}
			}
		} else if it.ID == "" {
			it.Err = &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest, Reason: "Validation Failed: 1: id is missing;"}
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		return nil, &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest, Reason: "Validation Failed: 1: no requests added;"}
	}
	return items, nil
}

// bulkMetaText is the text of a simple action-line value as OpenSearch's
// BulkRequestParser reads it (parser.text()): a string's value, a number's
// or a boolean's literal, "" for null. An array or an object is an error
// naming its token (START_ARRAY, START_OBJECT).
func bulkMetaText(v json.RawMessage) (string, error) {
	t := bytes.TrimSpace(v)
	switch {
	case len(t) == 0:
		return "", nil
	case t[0] == '[':
		return "", errors.New("START_ARRAY")
	case t[0] == '{':
		return "", errors.New("START_OBJECT")
	case t[0] == '"':
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return "", errors.New("VALUE_STRING")
		}
		return s, nil
	case string(t) == "null":
		return "", nil
	}
	return string(t), nil // a number or a boolean, as written
}

func (s *Server) bulk(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "routing", "refresh", "timeout", "wait_for_active_shards", "pipeline", "require_alias", "_source",
		"_source_includes", "_source_excludes", "batch_size")
	if err != nil {
		return err
	}
	if err := refreshParam(q); err != nil {
		return err
	}
	if err := unsupportedParams(q, "pipeline"); err != nil {
		return err // as the single-document index refuses it
	}
	requireAlias, err := boolParam(q, "require_alias", false)
	if err != nil {
		return err
	}
	start := time.Now()
	body, err := readBody(r)
	if err != nil {
		return err
	}
	items, err := ParseBulk(body, r.PathValue("index"))
	if err != nil {
		return err
	}
	out := make([]map[string]any, len(items))
	errs := make([]bool, len(items))
	do := func(i int) {
		out[i], errs[i] = s.bulkItem(items[i], q.Get("routing"), requireAlias)
	}
	if s.svc.Clustered() {
		// On a cluster an item waits for its primary's copies, a round
		// trip between nodes: items run at once, but those of one
		// document in their order (a bulk applies them in order).
		runBulk(items, do)
	} else {
		for i := range items {
			do(i)
		}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"took": time.Since(start).Milliseconds(), "errors": slices.Contains(errs, true), "items": out})
	return nil
}

// bulkConcurrency bounds the items of one bulk in flight on a cluster.
const bulkConcurrency = 256

// runBulk calls do for every item, concurrently but for items of one
// document, which go in order, and returns when every call returned.
func runBulk(items []BulkItem, do func(int)) {
	sem := make(chan struct{}, bulkConcurrency)
	last := map[string]chan struct{}{} // a document's previous item's done
	var wg sync.WaitGroup
	for i, it := range items {
		key := it.Index + "\x00" + it.ID
		prev := last[key]
		done := make(chan struct{})
		if it.ID != "" {
			last[key] = done
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer close(done)
			if prev != nil {
				<-prev
			}
			do(i)
		}()
	}
	wg.Wait()
}

// bulkItem carries out one item of a bulk and returns its entry of the
// answer, and whether it failed.
func (s *Server) bulkItem(it BulkItem, routingParam string, requireAlias bool) (map[string]any, bool) {
	if it.Routing == "" {
		it.Routing = routingParam
	}
	var res service.WriteResult
	err := error(it.Err)
	if it.Err == nil {
		switch it.Op {
		case "index", "create":
			create := it.Op == "create"
			if it.ID == "" {
				it.ID, create = service.NewDocID(), true
			}
			o := service.WriteOptions{Create: create, RequireAlias: requireAlias}
			if it.RequireAlias != nil {
				o.RequireAlias = *it.RequireAlias
			}
			res, err = s.svc.IndexDoc(it.Index, it.ID, it.Routing, it.Source, o)
		case "delete":
			res, err = s.svc.DeleteDoc(it.Index, it.ID, it.Routing)
		case "update":
			var next []byte
			res, next, err = s.svc.UpdateDoc(it.Index, it.ID, it.Routing, it.update.apply(it.Index, it.ID))
			if err == nil {
				item := s.updateBody(res, next, it.update.Source != nil && *it.update.Source)
				item["status"] = res.Status
				return map[string]any{it.Op: item}, false
			}
		}
	}
	if err != nil {
		e := service.AsError(err)
		if e.Index == "" {
			e.Index = it.Index
		}
		eb := errorBody(e)["error"].(map[string]any)
		delete(eb, "root_cause")
		return map[string]any{it.Op: map[string]any{"_index": it.Index, "_id": it.ID, "status": e.Status, "error": eb}}, true
	}
	item := writeBody(res, s.replicas(res.Index))
	item["status"] = res.Status
	return map[string]any{it.Op: item}, false
}
