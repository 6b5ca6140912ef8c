package service

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// The service keeps each document's _version with its source: a stored
// value is envelopeMagic, the version as a uvarint, then the source.
// Documents written by other tools (no magic) read as version 1.
var envelopeMagic = [2]byte{0xff, 'v'}

func encodeSource(version int64, src []byte) []byte {
	b := make([]byte, 0, 2+binary.MaxVarintLen64+len(src))
	b = append(b, envelopeMagic[:]...)
	b = binary.AppendUvarint(b, uint64(version))
	return append(b, src...)
}

func decodeSource(b []byte) (int64, []byte) {
	if len(b) >= 2 && b[0] == envelopeMagic[0] && b[1] == envelopeMagic[1] {
		v, n := binary.Uvarint(b[2:])
		if n > 0 {
			return int64(v), b[2+n:]
		}
	}
	return 1, b
}

// opSeqNo is the _seq_no of the operation a single node's shard stored
// with sequence number seq. A shard's store numbers its operations from 1
// (0 is "none"); OpenSearch numbers a shard's operations from 0
// (SequenceNumbers.NO_OPS_PERFORMED is -1), as a cluster's replication
// here does, so the first operation of a shard is _seq_no 0.
func opSeqNo(seq uint64) uint64 {
	if seq == 0 {
		return 0 // no stored operation has it
	}
	return seq - 1
}

// WriteResult is the outcome of an index or delete.
type WriteResult struct {
	Index   string
	ID      string
	Version int64
	Result  string // created, updated, deleted, not_found
	SeqNo   uint64
	Shard   routing.ShardID
	Routing string
	Status  int // 201, 200 or 404
	// PrimaryTerm is the write's primary term (0: a single node's, 1).
	PrimaryTerm uint64
	// ShardsTotal and ShardsSuccessful are _shards' total and successful
	// (0: a single node's, which holds one copy).
	ShardsTotal, ShardsSuccessful int
}

// Doc is a fetched document.
type Doc struct {
	Index   string
	ID      string
	Routing string
	Version int64
	SeqNo   uint64
	Shard   routing.ShardID
	Source  []byte
	// PrimaryTerm is the term of the write that stored it (0: a single
	// node's, 1).
	PrimaryTerm uint64
}

func (ix *Index) lockFor(id string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return &ix.locks[h.Sum32()%uint32(len(ix.locks))]
}

func validateID(index, id string) error {
	if err := routing.ValidateID(id); err != nil {
		if len(id) == 0 {
			return newErr(TypeValidation, http.StatusBadRequest, index, "Validation Failed: 1: id is missing;")
		}
		if len(id) > routing.MaxIDBytes {
			return newErr(TypeValidation, http.StatusBadRequest, index,
				"Validation Failed: 1: id [%s] is too long, must be no longer than %d bytes but was: %d;", id, routing.MaxIDBytes, len(id))
		}
		// Not a length problem (an id that is not UTF-8): routing's reason.
		return newErr(TypeValidation, http.StatusBadRequest, index, "Validation Failed: 1: %s;", AsError(err).Reason)
	}
	return nil
}

// gcDeletes is index.gc_deletes' default: how long a delete's version is
// remembered.
const gcDeletes = 60 * time.Second

// tombstones remember each recent delete's version for gcDeletes, as
// OpenSearch's engine keeps a deleted document's version in its live
// version map (in memory: a restart forgets them there too), so a
// document indexed again soon after its delete continues its _version
// instead of restarting at 1. Keyed by _id and shard, as the version map
// is per shard (a shard keeps one document per _id, whatever routing value
// led there); writes to one _id are serialised by the index's id lock.
type tombstones struct {
	mu sync.Mutex
	m  map[string]tombstone
}

type tombstone struct {
	version int64
	at      time.Time
}

func tombstoneKey(id string, shard routing.ShardID) string { return fmt.Sprintf("%s\x00%d", id, shard) }

// version returns the remembered version of a deleted document, if its
// delete is recent.
func (ts *tombstones) version(id string, shard routing.ShardID) (int64, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.m[tombstoneKey(id, shard)]
	if !ok || time.Since(t.at) >= gcDeletes {
		return 0, false
	}
	return t.version, true
}

// put remembers a delete (v > 0) or forgets one (v == 0, the document was
// written again), dropping expired tombstones as the map grows.
func (ts *tombstones) put(id string, shard routing.ShardID, v int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	k := tombstoneKey(id, shard)
	if v == 0 {
		delete(ts.m, k)
		return
	}
	if ts.m == nil {
		ts.m = map[string]tombstone{}
	}
	now := time.Now()
	ts.m[k] = tombstone{version: v, at: now}
	if len(ts.m)%1024 == 0 {
		for k, t := range ts.m {
			if now.Sub(t.at) >= gcDeletes {
				delete(ts.m, k)
			}
		}
	}
}

// WriteOptions are an index request's flags.
type WriteOptions struct {
	// Create is _create / op_type=create: fail if the document exists.
	Create bool
	// RequireAlias is require_alias=true: the target must be an alias,
	// and no index is created.
	RequireAlias bool
}

// IndexDoc stores a document. A missing index is created with default
// settings, unless o.RequireAlias.
func (s *Service) IndexDoc(target, id, routingValue string, source []byte, o WriteOptions) (WriteResult, error) {
	if err := validateID(target, id); err != nil {
		return WriteResult{}, err
	}
	if s.cl != nil {
		return s.clusterIndexDoc(target, id, routingValue, source, o)
	}
	to := mayCreate
	if o.RequireAlias {
		to = mustBeAlias
	}
	ix, aliasRouting, err := s.writeTarget(target, to)
	if err != nil {
		return WriteResult{}, err
	}
	if routingValue, err = resolveIndexRouting(target, aliasRouting, routingValue); err != nil {
		return WriteResult{}, err
	}
	if ix.partitionedUnrequired {
		return WriteResult{}, partitionedRoutingError(ix.name)
	}
	if err := ix.requireRouting(id, routingValue); err != nil {
		return WriteResult{}, err
	}
	mu := ix.lockFor(id)
	mu.Lock()
	defer mu.Unlock()
	prev, found, err := ix.router.Get(id, routingValue)
	if err != nil {
		return WriteResult{}, err
	}
	version := int64(1)
	res := WriteResult{Index: ix.name, ID: id, Routing: routingValue, Result: "created", Status: http.StatusCreated}
	if found {
		pv, _ := decodeSource(prev.Source)
		if o.Create {
			return WriteResult{}, newErr(TypeVersionConflict, http.StatusConflict, ix.name,
				"[%s]: version conflict, document already exists (current version [%d])", id, pv)
		}
		version = pv + 1
		res.Result, res.Status = "updated", http.StatusOK
	} else if dv, ok := ix.deletes.version(id, ix.shardOf(id, routingValue)); ok {
		version = dv + 1 // created again: the version continues
	}
	r, err := ix.router.Index(id, routingValue, encodeSource(version, source))
	if err != nil {
		return WriteResult{}, err
	}
	ix.deletes.put(id, r.Shard, 0)
	res.Version, res.SeqNo, res.Shard = version, opSeqNo(r.Seq), r.Shard
	return res, nil
}

// DeleteDoc deletes a document; a missing one answers not_found (404).
func (s *Service) DeleteDoc(target, id, routingValue string) (WriteResult, error) {
	if err := validateID(target, id); err != nil {
		return WriteResult{}, err
	}
	if s.cl != nil {
		return s.clusterDeleteDoc(target, id, routingValue)
	}
	ix, aliasRouting, err := s.writeTarget(target, mustExist)
	if err != nil {
		return WriteResult{}, err
	}
	if routingValue, err = resolveIndexRouting(target, aliasRouting, routingValue); err != nil {
		return WriteResult{}, err
	}
	if err := ix.requireRouting(id, routingValue); err != nil {
		return WriteResult{}, err
	}
	mu := ix.lockFor(id)
	mu.Lock()
	defer mu.Unlock()
	prev, found, err := ix.router.Get(id, routingValue)
	if err != nil {
		return WriteResult{}, err
	}
	res := WriteResult{Index: ix.name, ID: id, Routing: routingValue, Result: "not_found", Status: http.StatusNotFound, Version: 1}
	if found {
		pv, _ := decodeSource(prev.Source)
		res.Result, res.Status, res.Version = "deleted", http.StatusOK, pv+1
	}
	r, err := ix.router.Delete(id, routingValue)
	if err != nil {
		return WriteResult{}, err
	}
	// A delete of a missing document answers version 1, as before
	// (TestDocumentsREST; OpenSearch would continue a recent delete's
	// version), and leaves a recent delete's tombstone as it is.
	if _, recent := ix.deletes.version(id, r.Shard); found || !recent {
		ix.deletes.put(id, r.Shard, res.Version)
	}
	res.SeqNo, res.Shard = opSeqNo(r.Seq), r.Shard
	return res, nil
}

// resolveIndexRouting is OpenSearch's Metadata.resolveIndexRouting for a
// single-document operation through target: an alias's index_routing
// overrides none, must equal a request's routing, and must be one value.
func resolveIndexRouting(target, aliasRouting, routingValue string) (string, error) {
	if aliasRouting == "" {
		return routingValue, nil
	}
	if strings.Contains(aliasRouting, ",") {
		return "", newErr(TypeIllegalArgument, http.StatusBadRequest, "",
			"index/alias [%s] provided with routing value [%s] that resolved to several routing values, rejecting operation", target, aliasRouting)
	}
	if routingValue != "" && routingValue != aliasRouting {
		return "", newErr(TypeIllegalArgument, http.StatusBadRequest, "",
			"Alias [%s] has index routing associated with it [%s], and was provided with routing value [%s], rejecting operation", target, aliasRouting, routingValue)
	}
	return aliasRouting, nil
}

// routingRequiredBy reads _routing.required from an index's mappings
// (typeless, as OpenSearch 2 takes them); mappings that do not say so, or
// do not parse, require none.
func routingRequiredBy(mappings json.RawMessage) bool {
	var m struct {
		Routing struct {
			Required bool `json:"required"`
		} `json:"_routing"`
	}
	return len(mappings) != 0 && json.Unmarshal(mappings, &m) == nil && m.Routing.Required
}

// partitionedUnrequired reports a partitioned index (routing_partition_size
// other than 1) whose mappings do not set _routing.required.
func partitionedUnrequired(m *IndexMeta) bool {
	return m.Settings[SettingPartitionSize] != "" && m.Settings[SettingPartitionSize] != "1" && !routingRequiredBy(m.Mappings)
}

// partitionedRoutingError is DocumentMapper's refusal of a partitioned
// index's mapping that does not require routing ("mapping type [_doc] must
// have routing required for partitioned index [...]", an
// IllegalArgumentException). OpenSearch checks it when the mapping is
// made: at creation when mappings are given, else when the first
// document's dynamic mapping is, so that every write to such an index
// fails with it.
func partitionedRoutingError(index string) *Error {
	return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "mapping type [_doc] must have routing required for partitioned index [%s]", index)
}

// requireRouting is OpenSearch's RoutingMissingException for a document
// operation without routing on an index whose mappings require it.
func (ix *Index) requireRouting(id, routingValue string) error {
	if !ix.routingRequired || routingValue != "" {
		return nil
	}
	e := newErr(TypeRoutingMissing, http.StatusBadRequest, ix.name, "routing is required for [%s]/[%s]", ix.name, id)
	e.UUID = "_na_" // the exception names its index by name only
	return e
}

// GetDoc reads a document by id.
func (s *Service) GetDoc(target, id, routingValue string) (Doc, bool, error) {
	if err := validateID(target, id); err != nil {
		return Doc{}, false, err
	}
	if s.cl != nil {
		return s.clusterGetDoc(target, id, routingValue)
	}
	ix, aliasRouting, err := s.readTarget(target)
	if err != nil {
		return Doc{}, false, err
	}
	if routingValue, err = resolveIndexRouting(target, aliasRouting, routingValue); err != nil {
		return Doc{}, false, err
	}
	if err := ix.requireRouting(id, routingValue); err != nil {
		return Doc{}, false, err
	}
	if m, ok := s.Meta(ix.name); ok {
		if err := blocksOf(m.Settings).readError(ix.name); err != nil {
			return Doc{}, false, err
		}
	}
	d, found, err := ix.router.Get(id, routingValue)
	if err != nil || !found {
		return Doc{Index: ix.name, ID: id}, false, err
	}
	return toDoc(ix.name, d, ix.node.Table()), true, nil
}

// shardOf is the shard the index's table routes id to now.
func (ix *Index) shardOf(id, routingValue string) routing.ShardID {
	_, shard := ix.node.Table().Route(id, routingValue)
	return shard
}

func toDoc(index string, d storage.Doc, t *routing.Table) Doc {
	v, src := decodeSource(d.Source)
	_, shard := t.Route(d.ID, d.Routing)
	return Doc{Index: index, ID: d.ID, Routing: d.Routing, Version: v, SeqNo: opSeqNo(d.Seq), Shard: shard, Source: src}
}

// UpdateFunc computes a document's new source from its current one
// (found false: there is none). noop true leaves the document as it is;
// an error refuses the update.
type UpdateFunc func(current []byte, found bool) (next []byte, noop bool, err error)

// UpdateDoc is a partial update (_update): it reads the document and
// writes what f makes of it under the document's lock, so no write to
// the same _id comes between the read and the write. A document f
// creates answers created (201), one it changes updated, one it leaves
// noop (200, its version and sequence number unchanged). A cluster's
// primary does not take the read and the write as one step, so a
// cluster refuses the update.
func (s *Service) UpdateDoc(target, id, routingValue string, f UpdateFunc) (WriteResult, []byte, error) {
	if err := validateID(target, id); err != nil {
		return WriteResult{}, nil, err
	}
	if s.cl != nil {
		return WriteResult{}, nil, newErr(TypeIllegalArgument, http.StatusBadRequest, target,
			"_update is not supported by shardsplit in cluster mode; use index")
	}
	ix, aliasRouting, err := s.writeTarget(target, mayCreate)
	if err != nil {
		return WriteResult{}, nil, err
	}
	if routingValue, err = resolveIndexRouting(target, aliasRouting, routingValue); err != nil {
		return WriteResult{}, nil, err
	}
	if ix.partitionedUnrequired {
		return WriteResult{}, nil, partitionedRoutingError(ix.name)
	}
	if err := ix.requireRouting(id, routingValue); err != nil {
		return WriteResult{}, nil, err
	}
	mu := ix.lockFor(id)
	mu.Lock()
	defer mu.Unlock()
	prev, found, err := ix.router.Get(id, routingValue)
	if err != nil {
		return WriteResult{}, nil, err
	}
	var pv int64
	var cur []byte
	if found {
		pv, cur = decodeSource(prev.Source)
	}
	next, noop, err := f(cur, found)
	if err != nil {
		return WriteResult{}, nil, err
	}
	res := WriteResult{Index: ix.name, ID: id, Routing: routingValue}
	if noop && found {
		_, shard := ix.node.Table().Route(id, routingValue)
		res.Result, res.Status, res.Version, res.SeqNo, res.Shard = "noop", http.StatusOK, pv, opSeqNo(prev.Seq), shard
		return res, cur, nil
	}
	version := int64(1)
	res.Result, res.Status = "created", http.StatusCreated
	if found {
		version = pv + 1
		res.Result, res.Status = "updated", http.StatusOK
	} else if dv, ok := ix.deletes.version(id, ix.shardOf(id, routingValue)); ok {
		version = dv + 1
	}
	r, err := ix.router.Index(id, routingValue, encodeSource(version, next))
	if err != nil {
		return WriteResult{}, nil, err
	}
	ix.deletes.put(id, r.Shard, 0)
	res.Version, res.SeqNo, res.Shard = version, opSeqNo(r.Seq), r.Shard
	return res, next, nil
}
