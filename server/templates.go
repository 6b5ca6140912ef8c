package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"

	"github.com/shardsplit/shardsplit/service"
)

// Composable index templates (/_index_template): stored in memory (a
// restart forgets them), matched by index_patterns when an index is
// created with PUT /{index}, the highest priority first, and merged under
// the request as MetadataCreateIndexService does: the request's settings,
// mappings and aliases win. component templates (composed_of) and data
// streams are not supported: a template that names either is refused.

type indexTemplate struct {
	Name          string
	IndexPatterns []string
	Priority      int64
	Version       *int64
	ComposedOf    []string
	Settings      json.RawMessage
	Mappings      json.RawMessage
	Aliases       json.RawMessage
	Meta          json.RawMessage
}

type templateStore struct {
	mu sync.Mutex
	m  map[string]*indexTemplate
}

func (ts *templateStore) list() []*indexTemplate {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]*indexTemplate, 0, len(ts.m))
	for _, name := range sortedTemplateNames(ts.m) {
		out = append(out, ts.m[name])
	}
	return out
}

// match is the template of the highest priority whose patterns match an
// index name (MetadataIndexTemplateService.findV2Template), nil if none.
func (ts *templateStore) match(index string) *indexTemplate {
	var best *indexTemplate
	for _, t := range ts.list() {
		for _, p := range t.IndexPatterns {
			if service.GlobMatch(p, index) && (best == nil || t.Priority > best.Priority) {
				best = t
				break
			}
		}
	}
	return best
}

func (t *indexTemplate) body() map[string]any {
	tmpl := map[string]any{}
	if len(t.Settings) > 0 {
		tmpl["settings"] = t.Settings
	}
	if len(t.Mappings) > 0 {
		tmpl["mappings"] = t.Mappings
	}
	if len(t.Aliases) > 0 {
		tmpl["aliases"] = t.Aliases
	}
	it := map[string]any{"index_patterns": t.IndexPatterns, "composed_of": orEmpty(t.ComposedOf), "priority": t.Priority}
	if len(tmpl) > 0 {
		it["template"] = tmpl
	}
	if t.Version != nil {
		it["version"] = *t.Version
	}
	if len(t.Meta) > 0 {
		it["_meta"] = t.Meta
	}
	return it
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func templateMissing(name string) *service.Error {
	return &service.Error{Type: service.TypeResourceNotFound, Status: http.StatusNotFound,
		Reason: fmt.Sprintf("index template matching [%s] not found", name)}
}

// putIndexTemplate is PUT|POST /_index_template/{name}.
func (s *Server) putIndexTemplate(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "create", "cause", "master_timeout", "cluster_manager_timeout")
	if err != nil {
		return err
	}
	create, err := boolParam(q, "create", false)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return parseErr("request body is required")
	}
	m, err := decodeObject(b)
	if err != nil {
		return err
	}
	if err := checkKeys(m, "index_template", "index_patterns", "template", "priority", "version", "composed_of", "_meta", "data_stream"); err != nil {
		return err
	}
	t := &indexTemplate{Name: name, Meta: m["_meta"]}
	if raw, ok := m["index_patterns"]; ok {
		var one string
		if json.Unmarshal(raw, &one) == nil {
			t.IndexPatterns = []string{one}
		} else if err := json.Unmarshal(raw, &t.IndexPatterns); err != nil {
			return parseErr("[index_template] failed to parse field [index_patterns]")
		}
	}
	if len(t.IndexPatterns) == 0 {
		return &service.Error{Type: service.TypeValidationException, Status: http.StatusBadRequest,
			Reason: "Validation Failed: 1: index patterns are missing;"}
	}
	if raw, ok := m["priority"]; ok && json.Unmarshal(raw, &t.Priority) != nil {
		return parseErr("[index_template] failed to parse field [priority]")
	}
	if raw, ok := m["version"]; ok {
		var v int64
		if json.Unmarshal(raw, &v) != nil {
			return parseErr("[index_template] failed to parse field [version]")
		}
		t.Version = &v
	}
	if raw, ok := m["composed_of"]; ok {
		if err := json.Unmarshal(raw, &t.ComposedOf); err != nil {
			return parseErr("[index_template] failed to parse field [composed_of]")
		}
		if len(t.ComposedOf) > 0 {
			return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
				Reason: "component templates (composed_of) are not supported by shardsplit"}
		}
	}
	if _, ok := m["data_stream"]; ok {
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: "data streams are not supported by shardsplit"}
	}
	if raw, ok := m["template"]; ok {
		tm, err := decodeObject(raw)
		if err != nil {
			return err
		}
		if err := checkKeys(tm, "template", "settings", "mappings", "aliases"); err != nil {
			return err
		}
		if _, err := service.ParseSettings(tm["settings"]); err != nil {
			return err
		}
		if raw, ok := tm["aliases"]; ok {
			if _, err := parseAliasesObject(raw); err != nil {
				return err
			}
		}
		t.Settings, t.Mappings, t.Aliases = tm["settings"], tm["mappings"], tm["aliases"]
	}
	s.templates.mu.Lock()
	defer s.templates.mu.Unlock()
	if s.templates.m == nil {
		s.templates.m = map[string]*indexTemplate{}
	}
	if _, exists := s.templates.m[name]; exists && create {
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("index template [%s] already exists", name)}
	}
	s.templates.m[name] = t
	s.writeJSON(w, r, http.StatusOK, map[string]any{"acknowledged": true})
	return nil
}

// getIndexTemplate is GET|HEAD /_index_template[/{name}] (names and
// wildcards, comma-separated).
func (s *Server) getIndexTemplate(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, "flat_settings", "local", "master_timeout", "cluster_manager_timeout"); err != nil {
		return err
	}
	name := r.PathValue("name")
	out := []any{}
	for _, t := range s.templates.list() {
		if name == "" || name == "*" || name == "_all" || matchAnyName(name, t.Name) {
			out = append(out, map[string]any{"name": t.Name, "index_template": t.body()})
		}
	}
	if name != "" && len(out) == 0 {
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusNotFound)
			return nil
		}
		return templateMissing(name)
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"index_templates": out})
	return nil
}

func matchAnyName(expr, name string) bool {
	for _, p := range splitComma(expr) {
		if service.GlobMatch(p, name) {
			return true
		}
	}
	return false
}

func splitComma(s string) []string {
	var out []string
	for _, p := range bytes.Split([]byte(s), []byte(",")) {
		if len(p) > 0 {
			out = append(out, string(p))
		}
	}
	return out
}

// deleteIndexTemplate is DELETE /_index_template/{name}.
func (s *Server) deleteIndexTemplate(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, "master_timeout", "cluster_manager_timeout", "timeout"); err != nil {
		return err
	}
	name := r.PathValue("name")
	s.templates.mu.Lock()
	var gone []string
	for k := range s.templates.m {
		if matchAnyName(name, k) {
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		delete(s.templates.m, k)
	}
	s.templates.mu.Unlock()
	if len(gone) == 0 {
		return templateMissing(name)
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"acknowledged": true})
	return nil
}

// simulateIndex is POST /_index_template/_simulate_index/{index}: the
// settings, mappings and aliases a new index of that name would take
// from the templates, and the other templates that also match.
func (s *Server) simulateIndex(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, "master_timeout", "cluster_manager_timeout", "cause", "create"); err != nil {
		return err
	}
	return s.writeSimulation(w, r, r.PathValue("index"), s.templates.match(r.PathValue("index")))
}

// simulateTemplate is POST /_index_template/_simulate[/{name}]: what a
// stored template would give an index.
func (s *Server) simulateTemplate(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, "master_timeout", "cluster_manager_timeout", "cause", "create"); err != nil {
		return err
	}
	name := r.PathValue("name")
	s.templates.mu.Lock()
	t := s.templates.m[name]
	s.templates.mu.Unlock()
	if t == nil {
		return templateMissing(name)
	}
	return s.writeSimulation(w, r, "", t)
}

func (s *Server) writeSimulation(w http.ResponseWriter, r *http.Request, index string, t *indexTemplate) error {
	tmpl := map[string]any{"settings": map[string]any{}, "mappings": map[string]any{}, "aliases": map[string]any{}}
	overlapping := []any{}
	if t != nil {
		flat, err := service.ParseSettings(t.Settings)
		if err != nil {
			return err
		}
		str := map[string]string{}
		for k, v := range flat {
			if v != nil {
				str[k] = *v
			}
		}
		tmpl["settings"] = service.NestedSettings(str)
		if len(t.Mappings) > 0 {
			tmpl["mappings"] = t.Mappings
		}
		if len(t.Aliases) > 0 {
			tmpl["aliases"] = t.Aliases
		}
		if index != "" {
			for _, o := range s.templates.list() {
				if o.Name != t.Name && matchAnyPattern(o.IndexPatterns, index) {
					overlapping = append(overlapping, map[string]any{"name": o.Name, "index_patterns": o.IndexPatterns})
				}
			}
		}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"template": tmpl, "overlapping": overlapping})
	return nil
}

func matchAnyPattern(patterns []string, name string) bool {
	for _, p := range patterns {
		if service.GlobMatch(p, name) {
			return true
		}
	}
	return false
}

// applyTemplate merges the matching template under a create request.
func (s *Server) applyTemplate(req *service.CreateRequest) error {
	t := s.templates.match(req.Name)
	if t == nil {
		return nil
	}
	flat, err := service.ParseSettings(t.Settings)
	if err != nil {
		return err
	}
	if req.Settings == nil {
		req.Settings = service.FlatSettings{}
	}
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, set := req.Settings[k]; !set {
			req.Settings[k] = flat[k]
		}
	}
	if len(req.Mappings) == 0 && len(t.Mappings) > 0 {
		req.Mappings = t.Mappings
	}
	if len(t.Aliases) > 0 {
		aliases, err := parseAliasesObject(t.Aliases)
		if err != nil {
			return err
		}
		if req.Aliases == nil {
			req.Aliases = map[string]service.AliasMeta{}
		}
		for a, am := range aliases {
			if _, set := req.Aliases[a]; !set {
				req.Aliases[a] = am
			}
		}
	}
	return nil
}
