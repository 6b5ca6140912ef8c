package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/clusternode"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// In cluster mode (Config.Cluster set) the service answers for a whole
// cluster through its node: index metadata is the committed cluster state
// (mirrored into s.st, so that name resolution, settings and the rest of
// the read paths are the single node's), metadata changes are cluster
// tasks, and documents and searches go to the shards' primaries, on
// whichever node they are. An in-place split is a cluster task that any
// node accepts (clustersplit.go). What a cluster cannot do yet — aliases,
// blocks and other settings but number_of_replicas, new-index resizes,
// splits at split points and in-place merges — is refused with a 400 that
// says so.
type clusterMode struct {
	p *clusternode.Process

	mu      sync.Mutex
	version uint64 // the cluster state version s.st mirrors
	name    string // this node's name
	id      string // this node's id
}

// errClusterUnsupported refuses what cluster mode does not do yet.
func errClusterUnsupported(what string) *Error {
	return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "%s is not supported on a cluster of several nodes yet", what)
}

// clusterWait bounds how long a request waits on the cluster (OpenSearch's
// timeout and cluster_manager_timeout defaults).
const clusterWait = 30 * time.Second

// syncCluster mirrors the node's applied cluster state into s.st when it
// changed; a no-op outside cluster mode.
func (s *Service) syncCluster() {
	if s.cl == nil {
		return
	}
	st, err := s.cl.p.State()
	if err != nil {
		return
	}
	s.mirror(st)
}

// mirror makes s.st the metadata of st.
func (s *Service) mirror(st *cluster.State) {
	s.cl.mu.Lock()
	defer s.cl.mu.Unlock()
	if st.Version == s.cl.version && s.st != nil {
		return
	}
	next := &state{ClusterUUID: st.ClusterUUID, NodeID: s.cl.id, Indices: map[string]*IndexMeta{}}
	if n, ok := st.Nodes[s.cl.name]; ok {
		next.NodeID = n.ID
	}
	for name, im := range st.Indices {
		settings := map[string]string{}
		for k, v := range im.Settings {
			settings[k] = v
		}
		settings[SettingShards] = strconv.Itoa(im.Shards)
		settings[SettingReplicas] = strconv.Itoa(im.Replicas)
		if _, ok := settings[SettingMode]; !ok {
			settings[SettingMode] = "partition"
		}
		if im.RoutingShards > 0 {
			settings[SettingRoutingShards] = strconv.Itoa(im.RoutingShards)
		}
		next.Indices[name] = &IndexMeta{Name: name, UUID: im.UUID, Created: im.CreationDate, Settings: settings, Mappings: im.Mappings}
	}
	s.mu.Lock()
	s.st = next
	s.mu.Unlock()
	s.cl.version = st.Version
}

// clusterState returns the node's applied cluster state, mirrored.
func (s *Service) clusterState() (*cluster.State, error) {
	st, err := s.cl.p.State()
	if err != nil {
		return nil, errClosed
	}
	s.mirror(st)
	return st, nil
}

// TransportSent returns the bytes this node sent to the others of its
// cluster, by kind of traffic; ok is false outside cluster mode.
func (s *Service) TransportSent() (sent clusternode.TransportBytes, ok bool) {
	if s.cl == nil {
		return sent, false
	}
	sent, err := s.cl.p.SentBytes()
	return sent, err == nil
}

// ClusterState returns the committed cluster state this node applied, or
// nil outside cluster mode.
func (s *Service) ClusterState() *cluster.State {
	if s.cl == nil {
		return nil
	}
	st, err := s.clusterState()
	if err != nil {
		return nil
	}
	return st
}

// Clustered reports whether the service answers for a cluster of nodes.
func (s *Service) Clustered() bool { return s.cl != nil }

// clusterErr maps the cluster's errors to OpenSearch's.
func clusterErr(index string, err error) error {
	var nf *clusternode.IndexNotFoundError
	var conflict *clusternode.ConflictError
	var refused *cluster.RefusedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nf):
		return indexNotFound(nf.Index)
	case errors.As(err, &conflict):
		return newErr(TypeVersionConflict, http.StatusConflict, index, "%s", conflict.Reason)
	case errors.Is(err, clusternode.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return newErr("unavailable_shards_exception", http.StatusServiceUnavailable, index,
			"[%s] primary shard is not active Timeout: [%s]", index, clusterWait)
	case errors.Is(err, cluster.ErrIndexExists):
		reason := err.Error()
		if errors.As(err, &refused) {
			reason = refused.Message
		}
		return newErr(TypeAlreadyExists, http.StatusBadRequest, index, "%s", reason)
	case errors.Is(err, cluster.ErrIndexNotFound):
		return indexNotFound(index)
	case errors.As(err, &refused):
		return refusedErr(index, refused)
	case errors.Is(err, clusternode.ErrStopped):
		return errClosed
	}
	return newErr(TypeException, http.StatusInternalServerError, index, "%v", err)
}

// refusedErr is a refused cluster task in OpenSearch's shape: the type and
// status of the Java exception the refusal names, its words verbatim; a
// refusal that names none is an illegal argument.
func refusedErr(index string, r *cluster.RefusedError) *Error {
	for ex, m := range routingTypes {
		if ex.String() == r.Exception {
			return newErr(m.typ, m.status, index, "%s", r.Message)
		}
	}
	return newErr(TypeIllegalArgument, http.StatusBadRequest, index, "%s", r.Message)
}

func clusterContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), clusterWait)
}

// awaitManager waits until the cluster is formed and this node knows its
// cluster manager, as a request to the cluster manager waits for one
// (cluster_manager_timeout); it answers 503 when none turns up in time.
func (s *Service) awaitManager(ctx context.Context) error {
	for {
		st, err := s.cl.p.State()
		if err != nil {
			return errClosed
		}
		if leader, _ := s.cl.p.Leader(); leader != "" && st.Bootstrapped() {
			return nil
		}
		select {
		case <-ctx.Done():
			return newErr("cluster_manager_not_discovered_exception", http.StatusServiceUnavailable, "", "no cluster manager discovered")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// clusterCreateIndex proposes m (its settings checked and completed by
// CreateIndex) and waits, as OpenSearch's wait_for_active_shards=1 does,
// for its primaries to start.
func (s *Service) clusterCreateIndex(m *IndexMeta, aliases map[string]AliasMeta) (*IndexMeta, error) {
	if len(aliases) > 0 {
		return nil, errClusterUnsupported("an alias")
	}
	ctx, cancel := clusterContext()
	defer cancel()
	if err := s.awaitManager(ctx); err != nil {
		return nil, err
	}
	if err := s.cl.p.CreateIndex(ctx, m.Name, m.Settings, m.Mappings, m.Created); err != nil {
		return nil, clusterErr(m.Name, err)
	}
	for {
		st, err := s.clusterState()
		if err != nil {
			return nil, err
		}
		im := st.Indices[m.Name]
		if im == nil {
			return nil, indexNotFound(m.Name) // deleted meanwhile
		}
		if st.Health().Indices[m.Name].ActivePrimaryShards == len(im.ServingShards()) {
			meta, _ := s.Meta(m.Name)
			return meta, nil
		}
		select {
		case <-ctx.Done():
			meta, _ := s.Meta(m.Name)
			return meta, nil // acknowledged, shards_acknowledged false in OpenSearch's terms
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *Service) clusterDeleteIndex(names []string) error {
	ctx, cancel := clusterContext()
	defer cancel()
	if err := s.awaitManager(ctx); err != nil {
		return err
	}
	for _, name := range names {
		if err := s.cl.p.DeleteIndex(ctx, name); err != nil {
			return clusterErr(name, err)
		}
	}
	s.syncCluster()
	return nil
}

// clusterPutSettings applies number_of_replicas; other settings are
// refused on a cluster.
func (s *Service) clusterPutSettings(names []string, set FlatSettings) error {
	replicas := -1
	for k, v := range set {
		if k != SettingReplicas || v == nil {
			return errClusterUnsupported(fmt.Sprintf("setting [%s]", k))
		}
		n, err := strconv.Atoi(*v)
		if err != nil || n < 0 {
			return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "Failed to parse value [%s] for setting [%s] must be >= 0", *v, k)
		}
		replicas = n
	}
	if replicas < 0 {
		return nil
	}
	ctx, cancel := clusterContext()
	defer cancel()
	if err := s.awaitManager(ctx); err != nil {
		return err
	}
	for _, name := range names {
		if err := s.cl.p.UpdateReplicas(ctx, name, replicas); err != nil {
			return clusterErr(name, err)
		}
	}
	s.syncCluster()
	return nil
}

// clusterIndexDoc indexes a document at its primary; a missing index is
// created with default settings, as OpenSearch's auto-create does.
func (s *Service) clusterIndexDoc(target, id, routingValue string, source []byte, o WriteOptions) (WriteResult, error) {
	if o.RequireAlias {
		return WriteResult{}, errClusterUnsupported("an alias")
	}
	if _, ok := s.Meta(target); !ok {
		s.syncCluster()
		if _, ok := s.Meta(target); !ok {
			if _, err := s.CreateIndex(CreateRequest{Name: target}); err != nil && !isAlreadyExists(err) {
				return WriteResult{}, err
			}
		}
	}
	if m, ok := s.Meta(target); ok && partitionedUnrequired(m) {
		return WriteResult{}, partitionedRoutingError(target)
	}
	if err := s.clusterRequireRouting(target, id, routingValue); err != nil {
		return WriteResult{}, err
	}
	ctx, cancel := clusterContext()
	defer cancel()
	r, err := s.cl.p.IndexDoc(ctx, target, id, routingValue, source, o.Create)
	if err != nil {
		return WriteResult{}, clusterErr(target, err)
	}
	res := docResult(r)
	res.Routing = routingValue
	return res, nil
}

func isAlreadyExists(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Type == TypeAlreadyExists
}

func (s *Service) clusterDeleteDoc(target, id, routingValue string) (WriteResult, error) {
	if _, ok := s.Meta(target); !ok {
		s.syncCluster()
		if _, ok := s.Meta(target); !ok {
			return WriteResult{}, indexNotFound(target)
		}
	}
	if err := s.clusterRequireRouting(target, id, routingValue); err != nil {
		return WriteResult{}, err
	}
	ctx, cancel := clusterContext()
	defer cancel()
	r, err := s.cl.p.DeleteDoc(ctx, target, id, routingValue)
	if err != nil {
		return WriteResult{}, clusterErr(target, err)
	}
	res := docResult(r)
	res.Routing = routingValue
	return res, nil
}

func docResult(r clusternode.DocResult) WriteResult {
	res := WriteResult{Index: r.Index, ID: r.ID, Result: r.Result, Version: r.Version, SeqNo: uint64(r.Seq),
		PrimaryTerm: r.Term, Shard: r.Shard, ShardsTotal: r.Total, ShardsSuccessful: r.Copies, Status: http.StatusOK}
	switch r.Result {
	case "created":
		res.Status = http.StatusCreated
	case "not_found":
		res.Status = http.StatusNotFound
	}
	return res
}

func (s *Service) clusterRequireRouting(index, id, routingValue string) error {
	m, ok := s.Meta(index)
	if ok && routingValue == "" && routingRequiredBy(m.Mappings) {
		return newErr("routing_missing_exception", http.StatusBadRequest, index, "routing is required for [%s]/[%s]", index, id)
	}
	return nil
}

func (s *Service) clusterGetDoc(target, id, routingValue string) (Doc, bool, error) {
	if _, ok := s.Meta(target); !ok {
		s.syncCluster()
		if _, ok := s.Meta(target); !ok {
			return Doc{}, false, indexNotFound(target)
		}
	}
	if err := s.clusterRequireRouting(target, id, routingValue); err != nil {
		return Doc{}, false, err
	}
	ctx, cancel := clusterContext()
	defer cancel()
	d, found, err := s.cl.p.GetDoc(ctx, target, id, routingValue)
	if err != nil {
		return Doc{}, false, clusterErr(target, err)
	}
	if !found {
		return Doc{Index: target, ID: id}, false, nil
	}
	t, _ := s.Table(target)
	var shard routing.ShardID
	if t != nil {
		_, shard = t.Route(d.ID, d.Routing)
	}
	return Doc{Index: target, ID: d.ID, Routing: d.Routing, Version: d.Version, SeqNo: uint64(d.Seq),
		PrimaryTerm: d.Term, Shard: shard, Source: d.Source}, true, nil
}

// clusterSearch runs a search on every shard's primary (routing and
// preference narrow nothing on a cluster yet) and pages the hits in shard
// order, each shard's in key order.
func (s *Service) clusterSearch(req SearchRequest) (SearchResult, error) {
	s.syncCluster()
	names, err := s.Resolve(req.Indices, req.Options)
	if err != nil {
		return SearchResult{}, err
	}
	q, err := json.Marshal(req.Query)
	if err != nil {
		return SearchResult{}, err
	}
	keep := 0
	if req.Size >= 0 {
		keep = req.From + req.Size
	}
	ctx, cancel := clusterContext()
	defer cancel()
	var res SearchResult
	for _, name := range names {
		r, err := s.cl.p.Search(ctx, name, q, keep)
		if err != nil {
			return SearchResult{}, clusterErr(name, err)
		}
		res.Total += r.Total
		res.Shards += r.Shards
		for i, d := range r.Docs {
			res.Hits = append(res.Hits, Doc{Index: name, ID: d.ID, Routing: d.Routing, Version: d.Version,
				SeqNo: uint64(d.Seq), Shard: r.Shard[i], Source: d.Source})
		}
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

// MatchQuery is the cluster nodes' Matcher: a search's query as the
// service encodes it (a Query in JSON) to the filter a shard applies.
func MatchQuery(raw json.RawMessage) (func(storage.Doc) bool, error) {
	var q Query
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, fmt.Errorf("service: decode a shard's query: %w", err)
	}
	return q.match, nil
}

// clusterShardRows lists every copy of the indices as the cluster state
// has them, with what each copy's node says of it (documents, checkpoints).
func (s *Service) clusterShardRows(names []string) ([]ShardRow, error) {
	st, err := s.clusterState()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, _ := s.cl.p.CopyStats(ctx)
	byAID := map[string]clusternode.CopyStat{}
	for _, c := range stats {
		byAID[c.AllocationID] = c
	}
	var rows []ShardRow
	for _, name := range names {
		im := st.Indices[name]
		if im == nil {
			continue
		}
		// Every shard with copies: a split's children are listed
		// (initializing, then started) beside their parent.
		for _, shard := range im.ShardIDs() {
			copies := append([]cluster.ShardCopy(nil), im.Copies[shard]...)
			sort.SliceStable(copies, func(i, j int) bool { return copies[i].Primary && !copies[j].Primary })
			for _, c := range copies {
				row := ShardRow{Index: name, UUID: im.UUID, Shard: shard, Primary: c.Primary, State: string(c.State),
					Node: c.Node, AllocationID: c.AllocationID, Docs: -1, Bytes: -1, SeqMax: -1, LocalCheckpoint: -1, GlobalCheckpoint: -1,
					UnassignedReason: c.UnassignedReason}
				if cs, ok := byAID[c.AllocationID]; ok && c.State == cluster.Started {
					row.Docs, row.Bytes = cs.Docs, cs.Bytes
					row.SeqMax, row.LocalCheckpoint, row.GlobalCheckpoint = cs.LCP, cs.LCP, cs.GCP
				}
				rows = append(rows, row)
			}
		}
	}
	return rows, nil
}

// ClusterHealth is _cluster/health on a cluster.
func (s *Service) ClusterHealth() (cluster.Health, error) {
	st, err := s.clusterState()
	if err != nil {
		return cluster.Health{}, err
	}
	return st.Health(), nil
}

// ClusterLeader returns the name of the cluster manager (the raft leader)
// as this node knows it, "" if none or outside cluster mode.
func (s *Service) ClusterLeader() string {
	if s.cl == nil {
		return ""
	}
	leader, _ := s.cl.p.Leader()
	return leader
}
