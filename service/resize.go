package service

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/baseline"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// ResizeRequest is a _split, _shrink or _clone request.
type ResizeRequest struct {
	Op           routing.ResizeOp
	Source       string
	Target       string
	Settings     FlatSettings
	Aliases      map[string]AliasMeta
	MaxShardSize *int64
}

// settings a resize computes itself; the target does not inherit them.
var notInherited = map[string]bool{SettingShards: true, SettingRoutingShards: true, SettingPartitionSize: true}

// Resize makes a new index from a write-blocked source with OpenSearch's
// rules and messages (baseline.Prepare, routing.PrepareResize), links its
// shards from the source's (baseline.Build), and opens it through recovery.
// The target inherits the source's settings (a request's null removes
// one), as OpenSearch's resize does.
func (s *Service) Resize(req ResizeRequest) (*IndexMeta, baseline.ResizeReport, error) {
	if s.cl != nil {
		return nil, baseline.ResizeReport{}, errClusterUnsupported("a new-index resize")
	}
	var rep baseline.ResizeReport
	// The REST layer parsed them so (ParseSettings); a Go caller may not
	// have, and the numbers are read below.
	if err := req.Settings.check(); err != nil {
		return nil, rep, err
	}
	if err := ValidateIndexName(req.Target); err != nil {
		return nil, rep, err
	}
	// OpenSearch's ResizeRequest.validate, in its order.
	var invalid []string
	if req.Op == routing.Split && req.Settings[SettingShards] == nil {
		invalid = append(invalid, "index.number_of_shards is required for split operations")
	}
	if req.MaxShardSize != nil && *req.MaxShardSize <= 0 {
		invalid = append(invalid, "max_shard_size must be greater than 0")
	}
	for _, b := range []string{SettingBlockReadOnly, SettingBlockMetadata} {
		if v := req.Settings[b]; v != nil && *v == "true" {
			invalid = append(invalid, fmt.Sprintf("target index [%s] will be blocked by [%s=true], this will disable metadata writes and cause the shards to be unassigned", req.Target, b))
		}
	}
	if len(invalid) > 0 {
		var b strings.Builder
		b.WriteString("Validation Failed: ")
		for i, m := range invalid {
			fmt.Fprintf(&b, "%d: %s;", i+1, m)
		}
		return nil, rep, newErr(TypeValidation, http.StatusBadRequest, "", "%s", b.String())
	}
	for k := range req.Settings {
		if spec, _ := specOf(k); spec.kind == kindPrivate {
			return nil, rep, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Target, "private index setting [%s] can not be set explicitly", k)
		}
	}
	s.resizeMu.Lock() // one resize at a time: the target name stays free until it is installed
	defer s.resizeMu.Unlock()

	srcIx, srcOK := s.index(req.Source)
	if srcOK {
		// No in-place split may start on the source while it is copied.
		srcIx.splitMu.Lock()
		defer srcIx.splitMu.Unlock()
		if err := srcIx.closingErr(); err != nil {
			return nil, rep, err
		}
		if t := srcIx.split; t != nil {
			return nil, rep, newErr(TypeIllegalState, http.StatusConflict, req.Source,
				"index [%s] is %s in place (task [%s]); resize it when the %s has ended", req.Source, t.busy(), t.ID, t.kind())
		}
	}
	srcMeta, _ := s.Meta(req.Source)
	s.mu.RLock()
	targetExists := s.st.Indices[req.Target] != nil
	aliasClash := len(s.aliasTargetsLocked(req.Target)) > 0
	s.mu.RUnlock()
	breq := baseline.ResizeRequest{Op: req.Op, Source: req.Source, Target: req.Target, Cleanup: baseline.CleanupRange,
		MaxShardSize: req.MaxShardSize}
	if v := req.Settings[SettingShards]; v != nil {
		breq.TargetShards, _ = strconv.Atoi(*v)
	}
	if v := req.Settings[SettingRoutingShards]; v != nil {
		breq.TargetRoutingShards, _ = strconv.Atoi(*v)
	}
	if v := req.Settings[SettingPartitionSize]; v != nil {
		breq.TargetPartitionSize, _ = strconv.Atoi(*v)
	}
	var src *baseline.Source
	if srcOK && srcMeta != nil {
		b := blocksOf(srcMeta.Settings)
		src = &baseline.Source{Node: srcIx.node, WriteBlocked: b.Write || b.ReadOnly}
	}
	target, err := baseline.Prepare(breq, src, targetExists)
	if err != nil {
		e := AsError(err)
		if e.Index == "" {
			e.Index = req.Target
			if e.Type == TypeIndexNotFound {
				e.Index = req.Source
			}
		}
		return nil, rep, e
	}
	if aliasClash {
		return nil, rep, newErr(TypeInvalidIndexName, http.StatusBadRequest, req.Target, "Invalid index name [%s], already exists as alias", req.Target)
	}
	// Linked keys are partition-mode keys (baseline.Prepare refuses any
	// other source): the target cannot be made in another mode.
	if v := req.Settings[SettingMode]; v != nil && *v != routing.ModePartition.String() {
		return nil, rep, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Target,
			"cannot provide %s [%s] on resize: a new-index resize makes a partition-mode index", SettingMode, *v)
	}
	// The target's settings: the source's, then the request's.
	m := &IndexMeta{Name: req.Target, UUID: newUUID()[:22], Created: time.Now().UnixMilli(), Mappings: srcMeta.Mappings,
		Settings: map[string]string{}, Aliases: req.Aliases}
	for k, v := range srcMeta.Settings {
		if !notInherited[k] {
			m.Settings[k] = v
		}
	}
	for k, v := range req.Settings {
		if notInherited[k] {
			continue
		}
		if v == nil {
			delete(m.Settings, k)
		} else {
			m.Settings[k] = *v
		}
	}
	if blocksOf(m.Settings).ReadOnly {
		return nil, rep, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Target,
			"target index [%s] will be blocked by [index.blocks.read_only=true] which is copied from the source index [%s], this will disable metadata writes and cause the shards to be unassigned",
			req.Target, req.Source)
	}
	m.Settings[SettingShards] = strconv.Itoa(target.Shards)
	m.Settings[SettingRoutingShards] = strconv.Itoa(target.RoutingShards)
	if target.PartitionSize != 1 {
		m.Settings[SettingPartitionSize] = strconv.Itoa(target.PartitionSize)
	}
	m.Settings[SettingMode] = routing.ModePartition.String()
	m.Settings["index.resize.source.name"] = req.Source
	m.Settings["index.resize.source.uuid"] = srcMeta.UUID
	for a := range req.Aliases {
		if err := validateAliasName(a); err != nil {
			return nil, rep, err
		}
	}

	dir := s.indexDir(m.UUID)
	eng, err := storage.Open(s.storageOptions(dir))
	if err != nil {
		return nil, rep, AsError(err)
	}
	tab, err := baseline.Build(breq, srcIx.node, eng, target, &rep)
	if err != nil {
		_ = eng.Close()
		_ = s.removeIndexDir(dir)
		return nil, rep, AsError(err)
	}
	// The target is a fresh directory with no split journal, so recovery
	// would have nothing to decide; it is opened on the engine that built
	// it (as baseline.Cluster does) because closing and reopening it would
	// rewrite its hard-linked tables (observed with node.Open on a reopened
	// engine), and the lab shows the sharing. Restarts go through recovery.
	start := time.Now()
	ix, err := s.openBuilt(m, eng, tab)
	if err != nil {
		_ = s.removeIndexDir(dir)
		return nil, rep, AsError(err)
	}
	rep.Open = time.Since(start)
	s.mu.Lock()
	if s.closed {
		// Close has taken the index map: a target installed now would
		// never be closed. It is not in the metadata, so its directory
		// goes (and would go at the next open as an orphan).
		s.mu.Unlock()
		_ = ix.node.Close()
		_ = s.removeIndexDir(dir)
		return nil, rep, errClosed
	}
	err = s.update(func(st *state) error {
		if _, ok := st.Indices[req.Target]; ok {
			return newErr(TypeAlreadyExists, http.StatusBadRequest, req.Target, "index [%s/%s] already exists", req.Target, st.Indices[req.Target].UUID)
		}
		// Checked again here: an alias may have been added while the
		// target was built; and the request's aliases must not name an
		// index (the target included).
		for _, im := range st.Indices {
			if _, ok := im.Aliases[req.Target]; ok {
				return newErr(TypeInvalidIndexName, http.StatusBadRequest, req.Target, "Invalid index name [%s], already exists as alias", req.Target)
			}
		}
		for a := range req.Aliases {
			if _, ok := st.Indices[a]; ok || a == req.Target {
				return aliasNamesIndex(a)
			}
		}
		if err := checkShardLimit(st, shardCopies(m.Settings)); err != nil {
			return err
		}
		st.Indices[req.Target] = m
		return checkWriteIndices(st, req.Aliases)
	})
	if err == nil {
		s.indices[req.Target] = ix
	}
	s.mu.Unlock()
	if err != nil {
		_ = ix.node.Close()
		_ = s.removeIndexDir(dir)
		return nil, rep, err
	}
	s.log.Info("resized index", zap.Stringer("op", req.Op), zap.String("source", req.Source), zap.String("target", req.Target),
		zap.Int("shards", target.Shards), zap.Int64("linked", rep.Linked), zap.Int64("copied", rep.Copied))
	return m, rep, nil
}

// IndexDirOf returns the data directory of an index (for tools and tests
// that look at its files).
func (s *Service) IndexDirOf(name string) (string, bool) {
	ix, ok := s.index(name)
	if !ok {
		return "", false
	}
	return ix.dir, true
}
