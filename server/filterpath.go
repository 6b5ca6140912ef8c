package server

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/shardsplit/shardsplit/service"
)

// filter_path: every JSON response is filtered here, in one place, as
// OpenSearch's XContent filtering (FilterPath, FilterPathBasedFilter)
// filters it: comma-separated dotted paths whose segments may hold '*'
// wildcards, "**" for any number of levels, and a leading '-' for an
// exclusion. Inclusions keep the fields they reach and the objects on the
// way (arrays are passed through: a path applies to each element), and
// drop objects and arrays left empty; exclusions then remove what they
// reach. Nothing included answers {}.

type filterPaths struct {
	include, exclude [][]string
}

func parseFilterPath(v string) filterPaths {
	var fp filterPaths
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(p, "-"); ok {
			fp.exclude = append(fp.exclude, strings.Split(rest, "."))
			continue
		}
		fp.include = append(fp.include, strings.Split(p, "."))
	}
	return fp
}

// filterJSON applies filter_path to an encoded JSON value.
func filterJSON(b []byte, v string) ([]byte, error) {
	fp := parseFilterPath(v)
	if len(fp.include) == 0 && len(fp.exclude) == 0 {
		return b, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if len(fp.include) > 0 {
		var ok bool
		if doc, ok = includePaths(doc, fp.include); !ok {
			doc = map[string]any{}
		}
	}
	if len(fp.exclude) > 0 {
		doc = excludePaths(doc, fp.exclude)
	}
	return json.Marshal(doc)
}

// step is what filters become one field deeper: whether the field matches
// whole, and the filters its value is read with.
func step(filters [][]string, key string) (bool, [][]string) {
	whole := false
	var next [][]string
	var visit func(f []string)
	visit = func(f []string) {
		if len(f) == 0 {
			whole = true
			return
		}
		if f[0] == "**" {
			if len(f) == 1 {
				whole = true
				return
			}
			next = append(next, f) // ** takes this level too
			visit(f[1:])           // or none
			return
		}
		if f[0] == key || (strings.Contains(f[0], "*") && service.GlobMatch(f[0], key)) {
			if len(f) == 1 {
				whole = true
				return
			}
			next = append(next, f[1:])
		}
	}
	for _, f := range filters {
		visit(f)
	}
	return whole, next
}

// includePaths keeps what the filters reach; ok is false when nothing is
// left.
func includePaths(v any, filters [][]string) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			whole, next := step(filters, k)
			if whole {
				out[k] = val
				continue
			}
			if len(next) > 0 {
				if kept, ok := includePaths(val, next); ok {
					out[k] = kept
				}
			}
		}
		return out, len(out) > 0
	case []any:
		var out []any
		for _, e := range x {
			if kept, ok := includePaths(e, filters); ok {
				out = append(out, kept)
			}
		}
		return out, len(out) > 0
	}
	return nil, false // a scalar the filters go past
}

// excludePaths removes what the filters reach.
func excludePaths(v any, filters [][]string) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			whole, next := step(filters, k)
			if whole {
				continue
			}
			if len(next) > 0 {
				val = excludePaths(val, next)
			}
			out[k] = val
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			out = append(out, excludePaths(e, filters))
		}
		return out
	}
	return v
}
