package service

import (
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// QueryKind is a supported query.
type QueryKind uint8

// Supported queries.
const (
	MatchAll QueryKind = iota
	IDs                // ids: Values
	Term               // term or terms on Field (_id or _routing): any of Values
)

// Query is a parsed query: match_all, ids, or term on _id or _routing.
type Query struct {
	Kind   QueryKind
	Field  string
	Values []string
}

func (q Query) match(d storage.Doc) bool {
	switch q.Kind {
	case IDs:
		for _, v := range q.Values {
			if v == d.ID {
				return true
			}
		}
		return false
	case Term:
		v := d.ID
		if q.Field == "_routing" {
			v = d.Routing
		}
		for _, want := range q.Values {
			if v == want {
				return true
			}
		}
		return false
	}
	return true
}

// SearchRequest is a search or a count.
type SearchRequest struct {
	Indices    string // index expression
	Query      Query
	From, Size int // Size < 0: count only
	Routing    string
	Preference string
	Options    IndicesOptions // allow_no_indices, ignore_unavailable
}

// SearchResult is what a search found.
type SearchResult struct {
	Total  int
	Hits   []Doc
	Shards int // shards searched
}

// ShardTarget is one shard a search reaches.
type ShardTarget struct {
	Index string
	UUID  string
	Shard routing.ShardID
}

// SearchShards returns the shards a search with this routing and
// preference reaches, in OpenSearch's way: routing.SearchShards for the
// routing values, then a _shards preference filters them.
func (s *Service) SearchShards(expr, routingValue, preference string, o IndicesOptions) ([]ShardTarget, error) {
	names, err := s.Resolve(expr, o)
	if err != nil {
		return nil, err
	}
	pref, err := routing.ParsePreference(preference)
	if err != nil {
		return nil, AsError(err)
	}
	if pref.Type == routing.PreferOnlyNodes && !s.nodeMatches(pref.Value) {
		// One node holds every shard: a filter that excludes it leaves none.
		return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, "", "No data node with criteria [%s] found", pref.Value)
	}
	routings := s.searchRoutings(expr, routingValue)
	var out []ShardTarget
	for _, name := range names {
		if s.cl != nil {
			m, ok := s.Meta(name)
			t, err := s.Table(name)
			if !ok || err != nil {
				continue
			}
			for _, id := range shardChooser(routings[name], pref)(t) {
				out = append(out, ShardTarget{Index: name, UUID: m.UUID, Shard: id})
			}
			continue
		}
		ix, ok := s.index(name)
		if !ok {
			continue
		}
		for _, id := range shardChooser(routings[name], pref)(ix.node.Table()) {
			out = append(out, ShardTarget{Index: name, UUID: ix.uuid, Shard: id})
		}
	}
	return out, nil
}

// shardChooser returns the shards of an index's table that a search with
// these routing values (searchRoutings') and preference reaches:
// routing.SearchShards for the routing values, then a _shards preference
// filters them.
func shardChooser(routingValues string, pref routing.Preference) func(*routing.Table) []routing.ShardID {
	return func(t *routing.Table) []routing.ShardID {
		var out []routing.ShardID
		for _, id := range t.SearchShards(routingValues) {
			if pref.Type == routing.PreferShards && !pref.Includes(id) {
				continue
			}
			out = append(out, id)
		}
		return out
	}
}

// nodeMatches reports whether a node specification (ids, names or '*'
// wildcards, comma-separated) names this node.
func (s *Service) nodeMatches(spec string) bool {
	for _, p := range strings.Split(spec, ",") {
		p = strings.TrimSpace(p)
		if p == s.NodeID() || p == s.cfg.NodeName || GlobMatch(p, s.NodeID()) || GlobMatch(p, s.cfg.NodeName) {
			return true
		}
	}
	return false
}

// searchRoutings returns the routing values (comma-separated) a search of
// expr with the routing parameter param uses for each index, as OpenSearch's
// IndexNameExpressionResolver.resolveSearchRouting: an alias named in expr
// with search_routing gives its index those values, narrowed to param's
// (none left: the index is searched whole); an index named outright, by a
// wildcard or through an alias without search_routing, gets param's values
// and is no longer limited by any alias. An index absent from the map is
// searched on every shard.
func (s *Service) searchRoutings(expr, param string) map[string]string {
	paramValues := routing.SplitRouting(param)
	s.mu.RLock()
	defer s.mu.RUnlock()
	sets := map[string]map[string]bool{}
	norouting := map[string]bool{}
	plain := func(index string) {
		if norouting[index] {
			return
		}
		norouting[index] = true
		delete(sets, index)
		if len(paramValues) > 0 {
			sets[index] = map[string]bool{}
			for _, v := range paramValues {
				sets[index][v] = true
			}
		}
	}
	var parts []string
	if expr == "" || expr == "_all" {
		parts = []string{"*"}
	} else {
		parts = strings.Split(expr, ",")
	}
	for _, part := range parts {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
		case strings.Contains(part, "*"):
			// A wildcard resolves to concrete indices, an alias's too.
			for n, m := range s.st.Indices {
				matched := GlobMatch(part, n)
				for a := range m.Aliases {
					matched = matched || GlobMatch(part, a)
				}
				if matched {
					plain(n)
				}
			}
		case s.st.Indices[part] != nil:
			plain(part)
		default:
			for _, index := range s.aliasTargetsLocked(part) {
				am := s.st.Indices[index].Aliases[part]
				if norouting[index] {
					continue
				}
				if am.SearchRouting == "" {
					plain(index)
					continue
				}
				if sets[index] == nil {
					sets[index] = map[string]bool{}
				}
				for _, v := range routing.SplitRouting(am.SearchRouting) {
					sets[index][v] = true
				}
				if len(paramValues) > 0 {
					for v := range sets[index] {
						if !slices.Contains(paramValues, v) {
							delete(sets[index], v)
						}
					}
				}
				if len(sets[index]) == 0 {
					delete(sets, index)
				}
			}
		}
	}
	out := make(map[string]string, len(sets))
	for index, set := range sets {
		values := make([]string, 0, len(set))
		for v := range set {
			values = append(values, v)
		}
		sort.Strings(values)
		out[index] = strings.Join(values, ",")
	}
	return out
}

// defaultMaxResultWindow is index.max_result_window's default.
const defaultMaxResultWindow = 10000

// Search runs a query over the shards SearchShards selects. Every active
// shard is scanned over its span of one table version, so a document is
// found exactly once even while a split publishes.
func (s *Service) Search(req SearchRequest) (SearchResult, error) {
	if s.cl != nil {
		return s.clusterSearch(req)
	}
	targets, err := s.SearchShards(req.Indices, req.Routing, req.Preference, req.Options)
	if err != nil {
		return SearchResult{}, err
	}
	pref, err := routing.ParsePreference(req.Preference)
	if err != nil {
		return SearchResult{}, AsError(err) // SearchShards parsed it already
	}
	routings := s.searchRoutings(req.Indices, req.Routing)
	// The indices searched are those with a shard to search; each index's
	// shards are chosen again from the table its scan reads (a split or a
	// merge may publish in between).
	var order []string
	for _, t := range targets {
		if len(order) == 0 || order[len(order)-1] != t.Index {
			order = append(order, t.Index)
		}
	}
	if req.Size >= 0 {
		window := -1 // the smallest index.max_result_window of the indices searched
		for _, name := range order {
			if m, ok := s.Meta(name); ok {
				if w := atoi(m.Settings, "index.max_result_window", defaultMaxResultWindow); window < 0 || w < window {
					window = w
				}
			}
		}
		if window < 0 {
			window = defaultMaxResultWindow
		}
		if req.From < 0 || req.Size > window || req.From > window-req.Size {
			return SearchResult{}, newErr(TypeIllegalArgument, http.StatusBadRequest, "",
				"Result window is too large, from + size must be less than or equal to: [%d] but was [%d]. See the scroll api for a more efficient way to request large data sets. This limit can be set by changing the [index.max_result_window] index level setting.",
				window, int64(req.From)+int64(req.Size))
		}
	}
	var res SearchResult
	// Hits are in the order the scan reads them: root by root, each root's
	// leaves in key order, each leaf in key order. That is the storage's
	// key order, which a split or a merge does not change (children
	// partition their parent's span in order), so pages taken with from
	// and size stay consistent across one (ordering by shard id did not:
	// children take new, higher ids). The page is [From, From+Size) of
	// that order: a leaf's hits are contiguous in it, so no shard
	// contributes more than From+Size of them, and no more are kept (a
	// size=1 search of a large index held every match before).
	keep := req.From + req.Size
	for _, name := range order {
		ix, ok := s.index(name)
		if !ok {
			continue
		}
		if m, ok := s.Meta(name); ok {
			if err := blocksOf(m.Settings).readError(name); err != nil {
				return SearchResult{}, err
			}
		}
		choose := shardChooser(routings[name], pref)
		chosen := 0
		var hits []Doc
		total := 0
		kept := map[routing.ShardID]int{}
		var t *routing.Table // the table the scan reads, set before any hit
		_, err := ix.node.SearchChosen(func(st *routing.Table) []routing.ShardID {
			t = st
			ids := choose(st)
			chosen = len(ids)
			return ids
		}, 0, func(shard routing.ShardID, d storage.Doc) error {
			if !req.Query.match(d) {
				return nil
			}
			total++
			if req.Size >= 0 && kept[shard] < keep {
				kept[shard]++
				// d.Source is the scan's buffer, valid only during this
				// call (storage's scans reuse it): a kept hit copies it.
				h := toDoc(name, d, t)
				h.Source = slices.Clone(h.Source)
				h.Shard = shard
				hits = append(hits, h)
			}
			return nil
		})
		if err != nil {
			if !s.owns(name, ix) {
				continue // deleted during the search: as if resolved after
			}
			return SearchResult{}, AsError(err)
		}
		res.Total += total
		res.Shards += chosen
		res.Hits = append(res.Hits, hits...)
	}
	if req.Size >= 0 {
		from := min(req.From, len(res.Hits))
		to := min(from+req.Size, len(res.Hits))
		res.Hits = res.Hits[from:to]
	} else {
		res.Hits = nil
	}
	return res, nil
}

// owns reports whether ix is still the open index called name (not
// deleted, or deleted and created again, since the caller looked it up).
func (s *Service) owns(name string, ix *Index) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.indices[name] == ix
}

// Refresh checks that the indices exist; writes are visible at once, so
// there is nothing else to do.
func (s *Service) Refresh(expr string, o IndicesOptions) (int, error) {
	names, err := s.Resolve(expr, o)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		if s.cl != nil {
			if m, ok := s.Meta(name); ok {
				n += atoi(m.Settings, SettingShards, 1) // every write is visible once acknowledged
			}
			continue
		}
		if ix, ok := s.index(name); ok {
			n += len(ix.node.Table().ActiveShards())
		}
	}
	return n, nil
}

// Flush makes every acknowledged write of the indices durable. With
// request durability (the default) each write was fsynced before it was
// acknowledged, so there is nothing to do; with async durability each
// active shard's WAL is synced.
func (s *Service) Flush(expr string, o IndicesOptions) (int, error) {
	names, err := s.Resolve(expr, o)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		if s.cl != nil {
			if m, ok := s.Meta(name); ok {
				n += atoi(m.Settings, SettingShards, 1) // every acknowledged write is synced on its copies
			}
			continue
		}
		ix, ok := s.index(name)
		if !ok {
			continue
		}
		for _, id := range ix.node.Table().ActiveShards() {
			if s.cfg.Durability == storage.DurabilityAsync {
				if err := ix.syncShard(id); err != nil {
					return n, AsError(err)
				}
			}
			n++
		}
	}
	return n, nil
}

// syncShard syncs a shard's WAL. A split's cleanup may destroy the store
// meanwhile (the shard moved to its children, which were synced at the
// handoff); the store then refuses, or Pebble panics on its closed DB: that
// is not an error when the shard is indeed gone, and re-panics otherwise.
func (ix *Index) syncShard(id routing.ShardID) (err error) {
	st, ok := ix.node.ShardStore(id)
	if !ok {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			if _, still := ix.node.ShardStore(id); still {
				panic(r)
			}
			err = nil
		}
	}()
	if err := st.Sync(); err != nil && !errors.Is(err, storage.ErrShardClosed) {
		if _, still := ix.node.ShardStore(id); still {
			return err
		}
	}
	return nil
}
