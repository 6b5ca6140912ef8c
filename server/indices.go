package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
)

var createParams = []string{"wait_for_active_shards", "timeout", "master_timeout", "cluster_manager_timeout", "include_type_name"}

func (s *Server) createIndex(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, createParams...); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	req, err := parseCreateBody(r.PathValue("index"), body)
	if err != nil {
		return err
	}
	if err := s.applyTemplate(&req); err != nil {
		return err
	}
	if _, err := s.svc.CreateIndex(req); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"acknowledged": true, "shards_acknowledged": true, "index": req.Name})
	return nil
}

// parseCreateBody parses a create-index body: settings, mappings, aliases.
func parseCreateBody(name string, body []byte) (service.CreateRequest, error) {
	req := service.CreateRequest{Name: name}
	m, err := decodeObject(body)
	if err != nil {
		return req, err
	}
	// A body without the known keys is all settings (OpenSearch accepts
	// that form too).
	if _, ok := m["settings"]; !ok && len(m) > 0 {
		if _, ok := m["mappings"]; !ok {
			if _, ok := m["aliases"]; !ok {
				m = map[string]json.RawMessage{"settings": body}
			}
		}
	}
	if err := checkKeys(m, "create_index", "settings", "mappings", "aliases"); err != nil {
		return req, err
	}
	if req.Settings, err = service.ParseSettings(m["settings"]); err != nil {
		return req, err
	}
	if raw, ok := m["mappings"]; ok {
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			return req, &service.Error{Type: "mapper_parsing_exception", Status: http.StatusBadRequest, Reason: "Failed to parse mapping: mappings must be an object"}
		}
		req.Mappings = raw
	}
	if raw, ok := m["aliases"]; ok {
		if req.Aliases, err = parseAliasesObject(raw); err != nil {
			return req, err
		}
	}
	return req, nil
}

func parseAliasesObject(raw json.RawMessage) (map[string]service.AliasMeta, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, parseErr("[aliases] must be an object: %v", err)
	}
	out := map[string]service.AliasMeta{}
	for name, v := range obj {
		am, err := parseAliasMeta(v)
		if err != nil {
			return nil, err
		}
		out[name] = am
	}
	return out, nil
}

// parseAliasMeta parses an alias body: routing, index_routing,
// search_routing, is_write_index; filter and is_hidden only when null or
// off (neither is supported).
func parseAliasMeta(raw json.RawMessage) (service.AliasMeta, error) {
	var am service.AliasMeta
	m, err := decodeObject(raw)
	if err != nil {
		return am, err
	}
	if err := checkKeys(m, "alias", "routing", "index_routing", "search_routing", "is_write_index", "filter", "is_hidden"); err != nil {
		return am, err
	}
	str := func(k string) (string, error) {
		v, ok := m[k]
		if !ok {
			return "", nil
		}
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return "", parseErr("[%s] %v", k, err)
		}
		switch y := x.(type) {
		case string:
			return y, nil
		case float64:
			return strconv.FormatFloat(y, 'f', -1, 64), nil
		}
		return "", parseErr("[alias] [%s] must be a string", k)
	}
	r, err := str("routing")
	if err != nil {
		return am, err
	}
	am.IndexRouting, am.SearchRouting = r, r
	if v, err := str("index_routing"); err != nil {
		return am, err
	} else if v != "" {
		am.IndexRouting = v
	}
	if v, err := str("search_routing"); err != nil {
		return am, err
	} else if v != "" {
		am.SearchRouting = v
	}
	if v, ok := m["is_write_index"]; ok {
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return am, parseErr("[alias] [is_write_index] must be a boolean")
		}
		am.IsWriteIndex = &b
	}
	if v, ok := m["is_hidden"]; ok && string(v) != "null" {
		var hidden bool
		if err := json.Unmarshal(v, &hidden); err != nil {
			return am, parseErr("[alias] [is_hidden] must be a boolean")
		}
		if hidden {
			// Every name resolves as visible here (expand_wildcards is not
			// read): a hidden alias would be matched by wildcards.
			return am, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
				Reason: "hidden aliases (is_hidden: true) are not supported by shardsplit: no index or alias is hidden"}
		}
	}
	if v, ok := m["filter"]; ok {
		if string(v) != "null" {
			return am, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
				Reason: "alias filters are not supported by shardsplit (no query DSL beyond match_all, ids and term)"}
		}
	}
	return am, nil
}

func (s *Server) deleteIndex(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "timeout", "master_timeout", "cluster_manager_timeout", "ignore_unavailable", "allow_no_indices", "expand_wildcards")
	if err != nil {
		return err
	}
	o, err := indicesOptions(q)
	if err != nil {
		return err
	}
	if err := s.svc.DeleteIndex(r.PathValue("index"), o); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"acknowledged": true})
	return nil
}

func (s *Server) headIndex(w http.ResponseWriter, r *http.Request) error {
	names, err := s.svc.Resolve(r.PathValue("index"), service.IndicesOptions{})
	if err != nil || len(names) == 0 {
		w.WriteHeader(http.StatusNotFound)
		return nil
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) indexBody(name string, flat bool) (map[string]any, error) {
	m, ok := s.svc.Meta(name)
	if !ok {
		return nil, nil
	}
	settings, err := s.svc.GetSettings(name)
	if gone(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	aliases := map[string]any{}
	for a, am := range m.Aliases {
		aliases[a] = aliasJSON(am)
	}
	mappings := json.RawMessage(`{}`)
	if len(m.Mappings) > 0 {
		mappings = m.Mappings
	}
	return map[string]any{"aliases": aliases, "mappings": mappings, "settings": settingsJSON(settings, flat)}, nil
}

// gone reports an index deleted since the request's expression was
// resolved: a read of several indices answers without it, as OpenSearch
// answers from the one cluster state it resolved against.
func gone(err error) bool {
	return err != nil && service.AsError(err).Type == service.TypeIndexNotFound
}

func settingsJSON(flat map[string]string, asFlat bool) any {
	if asFlat {
		return flat
	}
	return service.NestedSettings(flat)
}

func aliasJSON(am service.AliasMeta) map[string]any {
	out := map[string]any{}
	if am.IndexRouting != "" {
		out["index_routing"] = am.IndexRouting
	}
	if am.SearchRouting != "" {
		out["search_routing"] = am.SearchRouting
	}
	if am.IsWriteIndex != nil {
		out["is_write_index"] = *am.IsWriteIndex
	}
	return out
}

// noIndexDefaults refuses include_defaults=true on an index's settings:
// OpenSearch adds every index setting's default there, and shardsplit
// does not know the defaults of the settings it does not take.
func noIndexDefaults(q url.Values) error {
	if on, err := boolParam(q, "include_defaults", false); err != nil || !on {
		return err
	}
	return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
		Reason: "parameter [include_defaults] is not supported by shardsplit on index settings"}
}

func (s *Server) getIndex(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "flat_settings", "include_defaults", "local", "ignore_unavailable", "allow_no_indices", "expand_wildcards", "master_timeout", "cluster_manager_timeout")
	if err != nil {
		return err
	}
	if err := noIndexDefaults(q); err != nil {
		return err
	}
	flat, err := boolParam(q, "flat_settings", false)
	if err != nil {
		return err
	}
	o, err := indicesOptions(q)
	if err != nil {
		return err
	}
	names, err := s.svc.Resolve(r.PathValue("index"), o)
	if err != nil {
		return err
	}
	out := map[string]any{}
	for _, n := range names {
		b, err := s.indexBody(n, flat)
		if err != nil {
			return err
		}
		if b != nil {
			out[n] = b
		}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

func (s *Server) getSettings(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "flat_settings", "include_defaults", "local", "ignore_unavailable", "allow_no_indices", "expand_wildcards", "master_timeout", "cluster_manager_timeout")
	if err != nil {
		return err
	}
	if err := noIndexDefaults(q); err != nil {
		return err
	}
	flat, err := boolParam(q, "flat_settings", false)
	if err != nil {
		return err
	}
	o, err := indicesOptions(q)
	if err != nil {
		return err
	}
	names, err := s.svc.Resolve(r.PathValue("index"), o)
	if err != nil {
		return err
	}
	filter := r.PathValue("name")
	out := map[string]any{}
	for _, n := range names {
		set, err := s.svc.GetSettings(n)
		if gone(err) {
			continue
		}
		if err != nil {
			return err
		}
		if filter != "" {
			sel := map[string]string{}
			for k, v := range set {
				for _, f := range strings.Split(filter, ",") {
					if k == f || service.GlobMatch(f, k) || (!strings.HasPrefix(f, "index.") && (k == "index."+f || service.GlobMatch("index."+f, k))) {
						sel[k] = v
					}
				}
			}
			set = sel
		}
		out[n] = map[string]any{"settings": settingsJSON(set, flat)}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

func (s *Server) putSettings(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "master_timeout", "cluster_manager_timeout", "timeout", "preserve_existing", "flat_settings", "ignore_unavailable", "allow_no_indices", "expand_wildcards")
	if err != nil {
		return err
	}
	o, err := indicesOptions(q)
	if err != nil {
		return err
	}
	// preserve_existing=true keeps the settings an index already has; the
	// service cannot, so it is refused rather than ignored.
	if preserve, err := boolParam(q, "preserve_existing", false); err != nil {
		return err
	} else if preserve {
		return unsupportedParams(q, "preserve_existing")
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	m, err := decodeObject(body)
	if err != nil {
		return err
	}
	raw := json.RawMessage(body)
	if inner, ok := m["settings"]; ok && len(m) == 1 {
		raw = inner
	}
	set, err := service.ParseSettings(raw)
	if err != nil {
		return err
	}
	if len(set) == 0 {
		return &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest, Reason: "Validation Failed: 1: no settings to update;"}
	}
	if err := s.svc.PutSettings(r.PathValue("index"), set, o); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"acknowledged": true})
	return nil
}

func (s *Server) getMapping(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "local", "ignore_unavailable", "allow_no_indices", "expand_wildcards", "master_timeout", "cluster_manager_timeout")
	if err != nil {
		return err
	}
	o, err := indicesOptions(q)
	if err != nil {
		return err
	}
	names, err := s.svc.Resolve(r.PathValue("index"), o)
	if err != nil {
		return err
	}
	out := map[string]any{}
	for _, n := range names {
		m, ok := s.svc.Meta(n)
		if !ok {
			continue
		}
		mappings := json.RawMessage(`{}`)
		if len(m.Mappings) > 0 {
			mappings = m.Mappings
		}
		out[n] = map[string]any{"mappings": mappings}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

func (s *Server) putMapping(w http.ResponseWriter, r *http.Request) error {
	return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
		Reason: "updating mappings is not supported by shardsplit: mappings are stored as given at index creation and not applied"}
}

func shardsHeader(total int) map[string]int {
	return map[string]int{"total": total, "successful": total, "failed": 0}
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "ignore_unavailable", "allow_no_indices", "expand_wildcards")
	if err != nil {
		return err
	}
	o, err := indicesOptions(q)
	if err != nil {
		return err
	}
	n, err := s.svc.Refresh(r.PathValue("index"), o)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"_shards": shardsHeader(n)})
	return nil
}

func (s *Server) flush(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "ignore_unavailable", "allow_no_indices", "expand_wildcards", "force", "wait_if_ongoing")
	if err != nil {
		return err
	}
	o, err := indicesOptions(q)
	if err != nil {
		return err
	}
	n, err := s.svc.Flush(r.PathValue("index"), o)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"_shards": shardsHeader(n)})
	return nil
}

// resize handles _split, _shrink and _clone.
func (s *Server) resize(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, createParams...); err != nil {
		return err
	}
	opName := strings.TrimPrefix(strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[1], "_")
	op, err := routing.ParseResizeOp(opName)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	m, err := decodeObject(body)
	if err != nil {
		return err
	}
	if err := checkKeys(m, "resize", "settings", "aliases", "max_shard_size", "mappings"); err != nil {
		return err
	}
	if _, ok := m["mappings"]; ok {
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: "mappings are not allowed when resizing indices, all mappings are copied from the source index"}
	}
	req := service.ResizeRequest{Op: op, Source: r.PathValue("index"), Target: r.PathValue("target")}
	if req.Settings, err = service.ParseSettings(m["settings"]); err != nil {
		return err
	}
	if raw, ok := m["aliases"]; ok {
		if req.Aliases, err = parseAliasesObject(raw); err != nil {
			return err
		}
	}
	if raw, ok := m["max_shard_size"]; ok {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return parseErr("[max_shard_size] must be a byte size string such as \"50gb\"")
		}
		n, err := parseByteSize(v)
		if err != nil {
			return &service.Error{Type: service.TypeParse, Status: http.StatusBadRequest,
				Reason: fmt.Sprintf("failed to parse setting [max_shard_size] with value [%s] as a size in bytes", v)}
		}
		req.MaxShardSize = &n
	}
	if _, _, err := s.svc.Resize(req); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"acknowledged": true, "shards_acknowledged": true, "index": req.Target})
	return nil
}

// Aliases.

func (s *Server) postAliases(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, "timeout", "master_timeout", "cluster_manager_timeout"); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	actions, err := ParseAliasActions(body)
	if err != nil {
		return err
	}
	if err := s.svc.UpdateAliases(actions); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"acknowledged": true})
	return nil
}

// ParseAliasActions parses a POST /_aliases body.
func ParseAliasActions(body []byte) ([]service.AliasAction, error) {
	m, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	if err := checkKeys(m, "aliases", "actions"); err != nil {
		return nil, err
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(m["actions"], &raw); err != nil || len(raw) == 0 {
		return nil, &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest, Reason: "Validation Failed: 1: At least one action is required;"}
	}
	var out []service.AliasAction
	for _, one := range raw {
		if len(one) != 1 {
			return nil, parseErr("[aliases] each action must have exactly one of add, remove, remove_index")
		}
		for kind, v := range one {
			obj, err := decodeObject(v)
			if err != nil {
				return nil, err
			}
			var a service.AliasAction
			switch kind {
			case "add":
				a.Add = true
			case "remove":
			case "remove_index":
				a.RemoveIndex = true
			default:
				return nil, parseErr("[aliases] unknown action [%s]", kind)
			}
			names := func(single, plural string) ([]string, error) {
				var out []string
				if v, ok := obj[single]; ok {
					var s string
					if err := json.Unmarshal(v, &s); err != nil {
						return nil, parseErr("[%s] must be a string", single)
					}
					out = append(out, s)
				}
				if v, ok := obj[plural]; ok {
					var ss []string
					if err := json.Unmarshal(v, &ss); err != nil {
						var s string
						if err2 := json.Unmarshal(v, &s); err2 != nil {
							return nil, parseErr("[%s] must be an array of strings", plural)
						}
						ss = []string{s}
					}
					out = append(out, ss...)
				}
				return out, nil
			}
			if a.Indices, err = names("index", "indices"); err != nil {
				return nil, err
			}
			if a.Aliases, err = names("alias", "aliases"); err != nil {
				return nil, err
			}
			meta := map[string]json.RawMessage{}
			for k, v := range obj {
				switch k {
				case "index", "indices", "alias", "aliases":
				case "must_exist":
					var b bool
					if err := json.Unmarshal(v, &b); err != nil {
						return nil, parseErr("[must_exist] must be a boolean")
					}
					a.MustExist = &b
				default:
					meta[k] = v
				}
			}
			if len(meta) > 0 {
				b, _ := json.Marshal(meta)
				if a.Meta, err = parseAliasMeta(b); err != nil {
					return nil, err
				}
			}
			out = append(out, a)
		}
	}
	return out, nil
}

func (s *Server) putAlias(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, "timeout", "master_timeout", "cluster_manager_timeout"); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var am service.AliasMeta
	if len(strings.TrimSpace(string(body))) > 0 {
		if am, err = parseAliasMeta(body); err != nil {
			return err
		}
	}
	if err := s.svc.UpdateAliases([]service.AliasAction{{Add: true, Indices: []string{r.PathValue("index")},
		Aliases: strings.Split(r.PathValue("name"), ","), Meta: am}}); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"acknowledged": true})
	return nil
}

func (s *Server) deleteAlias(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, "timeout", "master_timeout", "cluster_manager_timeout"); err != nil {
		return err
	}
	if err := s.svc.UpdateAliases([]service.AliasAction{{Indices: []string{r.PathValue("index")},
		Aliases: strings.Split(r.PathValue("name"), ",")}}); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"acknowledged": true})
	return nil
}

func (s *Server) getAlias(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "local", "ignore_unavailable", "allow_no_indices", "expand_wildcards")
	if err != nil {
		return err
	}
	o, err := indicesOptions(q)
	if err != nil {
		return err
	}
	var names []string
	if n := r.PathValue("name"); n != "" {
		names = strings.Split(n, ",")
	}
	byIndex, err := s.svc.Aliases(r.PathValue("index"), names, o)
	if err != nil {
		return err
	}
	out := map[string]any{}
	returned := map[string]bool{}
	for idx, as := range byIndex {
		if names != nil && len(as) == 0 {
			continue
		}
		am := map[string]any{}
		for a, m := range as {
			am[a] = aliasJSON(m)
			returned[a] = true
		}
		out[idx] = map[string]any{"aliases": am}
	}
	// As OpenSearch's RestGetAliasesAction: every explicitly named alias
	// (not a wildcard, not _all) that matched nothing makes the answer a
	// 404 whose "error" is a string, next to what was found.
	var missing []string
	for _, n := range names {
		if n != "_all" && !strings.Contains(n, "*") && !returned[n] {
			missing = append(missing, n)
		}
	}
	status := http.StatusOK
	if len(missing) > 0 {
		status = http.StatusNotFound
		msg := fmt.Sprintf("alias [%s] missing", missing[0])
		if len(missing) > 1 {
			msg = fmt.Sprintf("aliases [%s] missing", strings.Join(missing, ","))
		}
		out["error"], out["status"] = msg, status
	}
	s.writeJSON(w, r, status, out)
	return nil
}
