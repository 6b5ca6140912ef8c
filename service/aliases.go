package service

import (
	"net/http"
	"sort"
	"strings"
)

// AliasAction is one action of POST /_aliases.
type AliasAction struct {
	Add         bool // add (true) or remove (false)
	RemoveIndex bool // remove_index: delete the index
	Indices     []string
	Aliases     []string
	Meta        AliasMeta
	// MustExist: a remove fails when the alias is missing (nil: true).
	MustExist *bool
}

// UpdateAliases applies alias actions atomically: either all of them
// (one metadata write) or none.
func (s *Service) UpdateAliases(actions []AliasAction) error {
	if s.cl != nil {
		return errClusterUnsupported("an alias")
	}
	type resolved struct {
		a       AliasAction
		indices []string
	}
	var rs []resolved
	var removeIndices []string
	for _, a := range actions {
		var indices []string
		for _, expr := range a.Indices {
			names, err := s.resolve(expr, forAliasActions)
			if err != nil {
				return err
			}
			indices = append(indices, names...)
		}
		if len(indices) == 0 {
			return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "[index] or [indices] is required")
		}
		if a.RemoveIndex {
			removeIndices = append(removeIndices, indices...)
			continue
		}
		if len(a.Aliases) == 0 {
			return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "[alias] or [aliases] is required")
		}
		for _, al := range a.Aliases {
			if a.Add {
				if err := validateAliasName(al); err != nil {
					return err
				}
			}
		}
		rs = append(rs, resolved{a, indices})
	}
	s.mu.Lock()
	err := s.update(func(st *state) error {
		// Every index an action names must take metadata writes, as
		// OpenSearch's TransportIndicesAliasesAction checks (METADATA_WRITE:
		// the read_only and metadata blocks), remove_index included.
		for _, n := range removeIndices {
			if m, ok := st.Indices[n]; ok {
				if err := blocksOf(m.Settings).metadataError(n); err != nil {
					return err
				}
			}
		}
		for _, r := range rs {
			for _, n := range r.indices {
				if m, ok := st.Indices[n]; ok {
					if err := blocksOf(m.Settings).metadataError(n); err != nil {
						return err
					}
				}
			}
		}
		// The indices to remove go first, as in OpenSearch's
		// applyAliasActions: an alias may then take a removed index's name
		// (replacing an index by an alias in one request), and an alias
		// action on a removed index names a missing index.
		for _, n := range removeIndices {
			delete(st.Indices, n)
		}
		for _, r := range rs {
			for _, n := range r.indices {
				m, ok := st.Indices[n]
				if !ok {
					return indexNotFound(n)
				}
				for _, al := range r.a.Aliases {
					if r.a.Add {
						if _, clash := st.Indices[al]; clash {
							return aliasNamesIndex(al)
						}
						if m.Aliases == nil {
							m.Aliases = map[string]AliasMeta{}
						}
						m.Aliases[al] = r.a.Meta
						continue
					}
					matched := false
					for have := range m.Aliases {
						if have == al || (al == "*" || al == "_all") || GlobMatch(al, have) {
							delete(m.Aliases, have)
							matched = true
						}
					}
					if !matched && (r.a.MustExist == nil || *r.a.MustExist) {
						return newErr("aliases_not_found_exception", http.StatusNotFound, n, "aliases [%s] missing", al)
					}
				}
			}
		}
		added := map[string]AliasMeta{}
		for _, r := range rs {
			if r.a.Add {
				for _, al := range r.a.Aliases {
					added[al] = r.a.Meta
				}
			}
		}
		return checkWriteIndices(st, added)
	})
	if err != nil {
		s.mu.Unlock()
		return err
	}
	var closing []*Index
	for _, n := range removeIndices {
		if ix, ok := s.indices[n]; ok {
			closing = append(closing, ix)
			delete(s.indices, n)
		}
	}
	s.mu.Unlock()
	for _, ix := range closing {
		ix.stopSplit()
		_ = ix.node.Close()
		_ = s.removeIndexDir(ix.dir)
	}
	return nil
}

// checkWriteIndices is OpenSearch's metadata rule that an alias has at
// most one write index (an IllegalStateException naming them), for the
// aliases a request adds (a state written before the rule keeps working).
func checkWriteIndices(st *state, added map[string]AliasMeta) error {
	writers := map[string][]string{}
	for name, m := range st.Indices {
		for a, am := range m.Aliases {
			if _, ok := added[a]; ok && am.IsWriteIndex != nil && *am.IsWriteIndex {
				writers[a] = append(writers[a], name)
			}
		}
	}
	aliases := make([]string, 0, len(writers))
	for a := range writers {
		aliases = append(aliases, a)
	}
	sort.Strings(aliases)
	for _, a := range aliases {
		if w := writers[a]; len(w) > 1 {
			sort.Strings(w)
			return newErr(TypeIllegalState, http.StatusInternalServerError, "", "alias [%s] has more than one write index [%s]", a, strings.Join(w, ","))
		}
	}
	return nil
}

// Aliases returns index -> alias -> metadata for the indices an expression
// names, restricted to aliases matching names (nil = all).
func (s *Service) Aliases(expr string, names []string, o IndicesOptions) (map[string]map[string]AliasMeta, error) {
	indices, err := s.Resolve(expr, o)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]map[string]AliasMeta{}
	for _, n := range indices {
		m, ok := s.st.Indices[n]
		if !ok {
			continue // deleted since Resolve
		}
		sel := map[string]AliasMeta{}
		for a, am := range m.Aliases {
			if names == nil || matchAny(names, a) {
				sel[a] = am
			}
		}
		out[n] = sel
	}
	return out, nil
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if p == s || p == "_all" || GlobMatch(p, s) {
			return true
		}
	}
	return false
}

// AliasNames returns every alias name, sorted.
func (s *Service) AliasNames() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	set := map[string]bool{}
	for _, m := range s.st.Indices {
		for a := range m.Aliases {
			set[a] = true
		}
	}
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}
