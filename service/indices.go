package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
)

// maxIndexNameBytes is MetadataCreateIndexService.MAX_INDEX_NAME_BYTES.
const maxIndexNameBytes = 255

// ValidateIndexName applies OpenSearch's index name rules with its
// messages (invalid_index_name_exception).
func ValidateIndexName(name string) error {
	bad := func(format string, args ...any) error {
		e := newErr(TypeInvalidIndexName, http.StatusBadRequest, name, format, args...)
		e.UUID = "_na_"
		return e
	}
	if strings.ContainsAny(name, "\\/*?\"<>| ,") {
		return bad("Invalid index name [%s], must not contain the following characters [ , \", *, \\, <, |, ,, >, /, ?]", name)
	}
	if strings.Contains(name, "#") {
		return bad("Invalid index name [%s], must not contain '#'", name)
	}
	if strings.Contains(name, ":") {
		return bad("Invalid index name [%s], must not contain ':'", name)
	}
	if name == "" || name[0] == '_' || name[0] == '-' || name[0] == '+' {
		return bad("Invalid index name [%s], must not start with '_', '-', or '+'", name)
	}
	if strings.ToLower(name) != name {
		return bad("Invalid index name [%s], must be lowercase", name)
	}
	if name == "." || name == ".." {
		return bad("Invalid index name [%s], must not be '.' or '..'", name)
	}
	if len(name) > maxIndexNameBytes {
		return bad("Invalid index name [%s], index name is too long, (%d > %d)", name, len(name), maxIndexNameBytes)
	}
	return nil
}

// CreateRequest is a create-index request.
type CreateRequest struct {
	Name     string
	Settings FlatSettings
	Mappings json.RawMessage
	Aliases  map[string]AliasMeta
}

// CreateIndex creates an index: settings validated as OpenSearch does
// (number_of_shards default 1, number_of_replicas default 1), plus
// index.shardsplit.mode (partition by default).
func (s *Service) CreateIndex(req CreateRequest) (*IndexMeta, error) {
	if err := ValidateIndexName(req.Name); err != nil {
		return nil, err
	}
	// The REST layer checked them (ParseSettings); a Go caller may not have.
	if err := req.Settings.check(); err != nil {
		return nil, err
	}
	m := &IndexMeta{Name: req.Name, UUID: newUUID()[:22], Created: time.Now().UnixMilli(), Mappings: req.Mappings,
		Settings: map[string]string{SettingShards: "1", SettingReplicas: "1", SettingMode: "partition"}}
	for k, v := range req.Settings {
		if spec, _ := specOf(k); spec.kind == kindPrivate {
			return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Name, "private index setting [%s] can not be set explicitly", k)
		}
		if v == nil {
			delete(m.Settings, k)
		} else {
			m.Settings[k] = *v
		}
	}
	if _, ok := m.Settings[SettingShards]; !ok {
		m.Settings[SettingShards] = "1"
	}
	t, err := tableFor(m)
	if err != nil {
		return nil, err
	}
	m.Settings[SettingRoutingShards] = strconv.Itoa(t.Settings().RoutingShards)
	if t.Settings().PartitionSize != 1 {
		m.Settings[SettingPartitionSize] = strconv.Itoa(t.Settings().PartitionSize)
	}
	if hasMappings(m.Mappings) && partitionedUnrequired(m) {
		return nil, partitionedRoutingError(m.Name)
	}
	for a := range req.Aliases {
		if err := validateAliasName(a); err != nil {
			return nil, err
		}
	}
	if s.cl != nil {
		return s.clusterCreateIndex(m, req.Aliases)
	}
	m.Aliases = req.Aliases
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if err := s.checkNewNameLocked(req.Name); err != nil {
		return nil, err
	}
	for a := range req.Aliases {
		if _, ok := s.st.Indices[a]; ok || a == req.Name {
			return nil, aliasNamesIndex(a)
		}
	}
	if err := checkShardLimit(s.st, shardCopies(m.Settings)); err != nil {
		return nil, err
	}
	if len(m.Aliases) > 0 {
		next := s.st.clone()
		next.Indices[m.Name] = m
		if err := checkWriteIndices(next, m.Aliases); err != nil {
			return nil, err
		}
	}
	ix, err := s.openIndex(m, t)
	if err != nil {
		_ = s.removeIndexDir(s.indexDir(m.UUID))
		return nil, err
	}
	if err := s.update(func(st *state) error { st.Indices[m.Name] = m; return nil }); err != nil {
		_ = ix.node.Close()
		_ = s.removeIndexDir(ix.dir)
		return nil, err
	}
	s.indices[m.Name] = ix
	s.log.Info("created index", zap.String("index", m.Name), zap.String("uuid", m.UUID),
		zap.Int("shards", t.Settings().Shards), zap.Stringer("mode", t.Mode()))
	return m, nil
}

var errClosed = newErr(TypeIllegalState, http.StatusServiceUnavailable, "", "the node is shutting down")

func (s *Service) checkNewNameLocked(name string) error {
	if m, ok := s.st.Indices[name]; ok {
		e := newErr(TypeAlreadyExists, http.StatusBadRequest, name, "index [%s/%s] already exists", name, m.UUID)
		e.UUID = m.UUID
		return e
	}
	if len(s.aliasTargetsLocked(name)) > 0 {
		e := newErr(TypeInvalidIndexName, http.StatusBadRequest, name, "Invalid index name [%s], already exists as alias", name)
		e.UUID = "_na_"
		return e
	}
	return nil
}

// validateAliasName is AliasValidator.validateAliasStandalone's name
// check: MetadataCreateIndexService.validateIndexOrAliasName with
// InvalidAliasNameException. Unlike an index name (validateIndexName adds
// "must be lowercase"), an alias name may hold capitals.
// hasMappings reports mappings that define something (not absent, not {}).
func hasMappings(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return len(raw) > 0 && json.Unmarshal(raw, &m) == nil && len(m) > 0
}

func validateAliasName(alias string) error {
	bad := func(desc string) error {
		return newErr(TypeInvalidAliasName, http.StatusBadRequest, alias, "Invalid alias name [%s], %s", alias, desc)
	}
	switch {
	case alias == "":
		return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "alias name is required")
	case strings.ContainsAny(alias, "\\/*?\"<>| ,"):
		return bad("must not contain the following characters [ , \", *, \\, <, |, ,, >, /, ?]")
	case strings.Contains(alias, "#"):
		return bad("must not contain '#'")
	case strings.Contains(alias, ":"):
		return bad("must not contain ':'")
	case alias[0] == '_' || alias[0] == '-' || alias[0] == '+':
		return bad("must not start with '_', '-', or '+'")
	case len(alias) > maxIndexNameBytes:
		return bad(fmt.Sprintf("index name is too long, (%d > %d)", len(alias), maxIndexNameBytes))
	case alias == "." || alias == "..":
		return bad("must not be '.' or '..'")
	}
	return nil
}

// DeleteIndex deletes indices (an expression: names, wildcards, _all): a
// running split is stopped first; the metadata forgets the index before its
// directory is removed.
func (s *Service) DeleteIndex(expr string, o IndicesOptions) error {
	s.syncCluster()
	names, err := s.resolve(expr, forDelete.with(o))
	if err != nil {
		return err
	}
	if s.cl != nil {
		return s.clusterDeleteIndex(names)
	}
	// Every index's blocks first: a refused delete deletes none of them.
	for _, name := range names {
		if m, ok := s.Meta(name); ok {
			if err := blocksOf(m.Settings).deleteError(name); err != nil {
				return err
			}
		}
	}
	for _, name := range names {
		if ix, ok := s.index(name); ok {
			m, ok := s.Meta(name)
			if !ok {
				return indexNotFound(name)
			}
			if err := blocksOf(m.Settings).deleteError(name); err != nil {
				return err
			}
			ix.stopSplit()
		}
		s.mu.Lock()
		ix, ok := s.indices[name]
		if !ok {
			s.mu.Unlock()
			continue
		}
		if err := s.update(func(st *state) error { delete(st.Indices, name); return nil }); err != nil {
			s.mu.Unlock()
			ix.reopenOperations()
			return err
		}
		delete(s.indices, name)
		s.mu.Unlock()
		if err := ix.node.Close(); err != nil {
			s.log.Warn("closing deleted index", zap.String("index", name), zap.Error(err))
		}
		if err := s.removeIndexDir(ix.dir); err != nil {
			return err
		}
		s.log.Info("deleted index", zap.String("index", name))
	}
	return nil
}

func (s *Service) index(name string) (*Index, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix, ok := s.indices[name]
	return ix, ok
}

// Meta returns an index's metadata (not to be modified).
func (s *Service) Meta(name string) (*IndexMeta, bool) {
	s.syncCluster()
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.st.Indices[name]
	return m, ok
}

// Table returns an index's published routing table.
func (s *Service) Table(name string) (*routing.Table, error) {
	if s.cl != nil {
		// The cluster's own table: after a split its shards are no
		// longer those the settings derive.
		st, err := s.clusterState()
		if err != nil {
			return nil, err
		}
		im := st.Indices[name]
		if im == nil {
			return nil, indexNotFound(name)
		}
		t, err := im.Table()
		if err != nil {
			return nil, AsError(err)
		}
		return t, nil
	}
	ix, ok := s.index(name)
	if !ok {
		return nil, indexNotFound(name)
	}
	return ix.node.Table(), nil
}

// Names returns every index name, sorted.
func (s *Service) Names() []string {
	s.syncCluster()
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := make([]string, 0, len(s.st.Indices))
	for n := range s.st.Indices {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (s *Service) aliasTargetsLocked(alias string) []string {
	var out []string
	for name, m := range s.st.Indices {
		if _, ok := m.Aliases[alias]; ok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Resolve expands an index expression (comma-separated names, aliases,
// wildcards with '*', _all) to index names, sorted, as a read resolves it
// (OpenSearch's strict-expand options: a missing concrete name is
// index_not_found_exception; wildcards may match nothing), unless the
// request's parameters o say otherwise.
func (s *Service) Resolve(expr string, o IndicesOptions) ([]string, error) {
	s.syncCluster()
	return s.resolve(expr, forRead.with(o))
}

// IndicesOptions are a request's allow_no_indices and ignore_unavailable
// parameters, the parts of OpenSearch's IndicesOptions a request can set
// here; nil keeps the request's default.
type IndicesOptions struct {
	AllowNoIndices    *bool
	IgnoreUnavailable *bool
}

// resolveOptions are how an index expression resolves: a request's
// defaults (forRead, forSettingsUpdate, ...) with its parameters applied.
type resolveOptions struct {
	// noIndicesFail is allow_no_indices=false: a wildcard that matches no
	// index, or an expression that resolves to none, is
	// index_not_found_exception.
	noIndicesFail bool
	// ignoreUnavailable skips a concrete name that names no index (or,
	// with ignoreAliases, an alias) instead of failing.
	ignoreUnavailable bool
	// ignoreAliases: a wildcard matches index names only and an alias
	// named outright is refused.
	ignoreAliases bool
}

var (
	// forRead is the reads' options (GetIndexRequest, GetSettingsRequest,
	// SearchRequest, ...): allow_no_indices true, ignore_unavailable false.
	forRead = resolveOptions{}
	// forSettingsUpdate is UpdateSettingsRequest's options.
	forSettingsUpdate = resolveOptions{noIndicesFail: true}
	// forDelete is DeleteIndexRequest's options.
	forDelete = resolveOptions{ignoreAliases: true}
	// forAliasActions is IndicesAliasesRequest's options.
	forAliasActions = resolveOptions{noIndicesFail: true, ignoreAliases: true}
)

// with applies a request's parameters to its defaults.
func (r resolveOptions) with(o IndicesOptions) resolveOptions {
	if o.AllowNoIndices != nil {
		r.noIndicesFail = !*o.AllowNoIndices
	}
	if o.IgnoreUnavailable != nil {
		r.ignoreUnavailable = *o.IgnoreUnavailable
	}
	return r
}

// resolve is Resolve with a request's options.
func (s *Service) resolve(expr string, o resolveOptions) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	set := map[string]bool{}
	if expr == "" || expr == "_all" {
		for n := range s.st.Indices {
			set[n] = true
		}
		if len(set) == 0 && o.noIndicesFail {
			return nil, noIndicesExist("_all")
		}
	} else {
		parts := strings.Split(expr, ",")
		// A concrete name OpenSearch's resolver lets through
		// (ignore_unavailable) fails later if it is the request's only
		// expression and no indices are not allowed, and is skipped
		// otherwise (IndexNameExpressionResolver.concreteIndices).
		skipped := func(err *Error) error {
			if len(parts) == 1 && o.noIndicesFail {
				return err
			}
			return nil
		}
		for _, part := range parts {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if strings.Contains(part, "*") {
				matched := false
				for n, m := range s.st.Indices {
					if GlobMatch(part, n) {
						set[n], matched = true, true
					}
					for a := range m.Aliases {
						if !o.ignoreAliases && GlobMatch(part, a) {
							set[n], matched = true, true
						}
					}
				}
				if !matched && o.noIndicesFail {
					return nil, indexNotFound(part)
				}
				continue
			}
			if _, ok := s.st.Indices[part]; ok {
				set[part] = true
				continue
			}
			targets := s.aliasTargetsLocked(part)
			if len(targets) == 0 {
				if !o.ignoreUnavailable {
					return nil, indexNotFound(part)
				}
				if err := skipped(noSuchIndexExpression(part, part)); err != nil {
					return nil, err
				}
				continue
			}
			if o.ignoreAliases {
				err := newErr(TypeIllegalArgument, http.StatusBadRequest, "",
					"The provided expression [%s] matches an alias, specify the corresponding concrete indices instead.", part)
				if !o.ignoreUnavailable {
					return nil, err
				}
				if err := skipped(err); err != nil {
					return nil, err
				}
				continue
			}
			for _, t := range targets {
				set[t] = true
			}
		}
	}
	if len(set) == 0 && o.noIndicesFail {
		return nil, noSuchIndexExpression("null", expr)
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// GlobMatch matches a pattern whose only metacharacter is '*'.
func GlobMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(s, p)
		}
		k := strings.Index(s, p)
		if k < 0 {
			return false
		}
		s = s[k+len(p):]
	}
	return true
}

// writeTo is what a write's target name may be.
type writeTo int

const (
	mayCreate   writeTo = iota // an index, an alias, or a name to create an index by
	mustExist                  // an index or an alias
	mustBeAlias                // an alias (require_alias)
)

// writeTarget resolves a write's target: an index, or an alias with one
// index or a write index; it returns the alias's index_routing too. What
// the name may be is to's: with mayCreate a missing name is created with
// default settings (action.auto_create_index); with mustBeAlias an index
// name is refused as OpenSearch refuses it under require_alias.
func (s *Service) writeTarget(name string, to writeTo) (*Index, string, error) {
	for range 2 {
		s.mu.RLock()
		if ix, ok := s.indices[name]; ok && to != mustBeAlias {
			s.mu.RUnlock()
			return ix, "", nil
		}
		targets := s.aliasTargetsLocked(name)
		var chosen string
		var am AliasMeta
		if len(targets) == 1 {
			chosen, am = targets[0], s.st.Indices[targets[0]].Aliases[name]
			if am.IsWriteIndex != nil && !*am.IsWriteIndex {
				chosen = ""
			}
		} else {
			for _, t := range targets {
				if a := s.st.Indices[t].Aliases[name]; a.IsWriteIndex != nil && *a.IsWriteIndex {
					chosen, am = t, a
				}
			}
		}
		ix := s.indices[chosen]
		s.mu.RUnlock()
		if len(targets) > 0 {
			if ix == nil {
				return nil, "", newErr(TypeIllegalArgument, http.StatusBadRequest, name,
					"no write index is defined for alias [%s]. The write index may be explicitly disabled using is_write_index=false or the alias points to multiple indices without one being designated as a write index", name)
			}
			return ix, am.IndexRouting, nil
		}
		switch to {
		case mustBeAlias:
			e := newErr(TypeIndexNotFound, http.StatusNotFound, name,
				"no such index [%s] and [require_alias] request flag is [true] and [%s] is not an alias", name, name)
			e.UUID = "_na_"
			return nil, "", e
		case mustExist:
			return nil, "", indexNotFound(name)
		}
		if _, err := s.CreateIndex(CreateRequest{Name: name}); err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Type != TypeAlreadyExists {
				return nil, "", err
			}
		}
	}
	return nil, "", indexNotFound(name)
}

// readTarget resolves a single-index read (get): an index or an alias of
// exactly one index; it returns the alias's index routing, as OpenSearch's
// single-shard get does (Metadata.resolveIndexRouting): a document written
// through an alias is read through it.
func (s *Service) readTarget(name string) (*Index, string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ix, ok := s.indices[name]; ok {
		return ix, "", nil
	}
	targets := s.aliasTargetsLocked(name)
	switch len(targets) {
	case 0:
		return nil, "", indexNotFound(name)
	case 1:
		return s.indices[targets[0]], s.st.Indices[targets[0]].Aliases[name].IndexRouting, nil
	}
	return nil, "", newErr(TypeIllegalArgument, http.StatusBadRequest, name,
		"alias [%s] has more than one index associated with it [%s], can't execute a single index op", name, strings.Join(targets, ", "))
}

func (s *Service) checkMetadataBlock(name string) error {
	m, ok := s.Meta(name)
	if !ok {
		return indexNotFound(name)
	}
	return blocksOf(m.Settings).metadataError(name)
}

// GetSettings returns an index's settings, flat, including the private
// ones OpenSearch shows (uuid, creation_date, provided_name, version).
func (s *Service) GetSettings(name string) (map[string]string, error) {
	m, ok := s.Meta(name)
	if !ok {
		return nil, indexNotFound(name)
	}
	if b := blocksOf(m.Settings); b.Metadata {
		return nil, b.metadataError(name)
	}
	out := map[string]string{}
	for k, v := range m.Settings {
		out[k] = v
	}
	// OpenSearch consumes index.number_of_routing_shards at creation
	// (MetadataCreateIndexService removes it from the settings, "it's
	// temporary and is only relevant once we create the index") and keeps
	// it as the metadata's routing_num_shards; shardsplit keeps it among
	// the stored settings for the routing table, and shows it where
	// OpenSearch does: _cluster/state's routing_num_shards.
	delete(out, SettingRoutingShards)
	out["index.uuid"] = m.UUID
	out["index.creation_date"] = strconv.FormatInt(m.Created, 10)
	out["index.provided_name"] = m.Name
	out["index.version.created"] = "137287827"
	return out, nil
}

// blockSetting reports whether a setting is one of the blocks (always
// updatable, even under a metadata block, as in OpenSearch).
func blockSetting(k string) bool { return strings.HasPrefix(k, "index.blocks.") }

// PutSettings updates dynamic settings of the indices an expression names.
// Static settings are refused with OpenSearch's message; null removes a
// setting; a block takes effect before the call returns (every write
// admitted before it has been applied).
func (s *Service) PutSettings(expr string, set FlatSettings, o IndicesOptions) error {
	if err := set.check(); err != nil { // as CreateIndex
		return err
	}
	s.syncCluster()
	names, err := s.resolve(expr, forSettingsUpdate.with(o))
	if err != nil {
		return err
	}
	if s.cl != nil {
		return s.clusterPutSettings(names, set)
	}
	var static []string
	for k := range set {
		spec, _ := specOf(k)
		switch spec.kind {
		case kindFinal:
			return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "final index setting [%s], not updateable", k)
		case kindStatic, kindPrivate:
			static = append(static, k)
		}
	}
	sort.Strings(static)
	s.mu.Lock()
	defer s.mu.Unlock()
	// The names were resolved under an earlier hold of the lock: an index
	// deleted since is not found (its metadata is gone).
	for _, n := range names {
		if _, ok := s.st.Indices[n]; !ok {
			return indexNotFound(n)
		}
	}
	if len(static) > 0 {
		var ids []string
		for _, n := range names {
			ids = append(ids, "["+n+"/"+s.st.Indices[n].UUID+"]")
		}
		return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "Can't update non dynamic settings [[%s]] for open indices [%s]",
			strings.Join(static, ", "), strings.Join(ids, ", "))
	}
	// A replica increase adds shard copies (MetadataUpdateSettingsService).
	if v := set[SettingReplicas]; v != nil {
		want, _ := strconv.Atoi(*v)
		var add int64
		for _, n := range names {
			st := s.st.Indices[n].Settings
			add += int64(atoi(st, SettingShards, 1)) * (int64(want) - int64(atoi(st, SettingReplicas, 0)))
		}
		if err := checkShardLimit(s.st, add); err != nil {
			return err
		}
	}
	onlyBlocks := true
	for k := range set {
		onlyBlocks = onlyBlocks && blockSetting(k)
	}
	for _, n := range names {
		if b := blocksOf(s.st.Indices[n].Settings); !onlyBlocks && (b.Metadata || b.ReadOnly || b.ReadOnlyAllowDelete) {
			return b.metadataError(n)
		}
	}
	next := s.st.clone()
	for _, n := range names {
		m := next.Indices[n]
		for k, v := range set {
			if v == nil {
				delete(m.Settings, k)
			} else {
				m.Settings[k] = *v
			}
		}
	}
	// A new write block takes effect before the metadata says so (when the
	// call returns, no write is applied any more); a lifted one after.
	var blocked []string
	for _, n := range names {
		was, now := blocksOf(s.st.Indices[n].Settings).writeError(n), blocksOf(next.Indices[n].Settings).writeError(n)
		if ix, ok := s.indices[n]; ok && now != nil && was == nil {
			if err := ix.applyBlocks(next.Indices[n]); err != nil {
				s.restoreBlocks(blocked)
				_ = ix.applyBlocks(s.st.Indices[n])
				return err
			}
			blocked = append(blocked, n)
		}
	}
	if err := s.persist(next); err != nil {
		s.restoreBlocks(blocked)
		return err
	}
	s.st = next
	for _, n := range names {
		if ix, ok := s.indices[n]; ok {
			if err := ix.applyBlocks(next.Indices[n]); err != nil {
				return err
			}
		}
	}
	return nil
}

// restoreBlocks puts the installed metadata's blocks back on indices whose
// block was set ahead of a metadata write that failed. s.mu must be held.
func (s *Service) restoreBlocks(names []string) {
	for _, n := range names {
		if ix, ok := s.indices[n]; ok {
			_ = ix.applyBlocks(s.st.Indices[n])
		}
	}
}

// applyBlocks makes the node refuse writes if the metadata says so.
func (ix *Index) applyBlocks(m *IndexMeta) error {
	if err := blocksOf(m.Settings).writeError(ix.name); err != nil {
		return ix.node.SetWriteBlock(err, time.Minute)
	}
	return ix.node.SetWriteBlock(nil, 0)
}
