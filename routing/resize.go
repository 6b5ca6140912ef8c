package routing

import (
	"fmt"
	"strings"
)

// ResizeOp is a new-index resize operation.
type ResizeOp uint8

const (
	// Shrink merges each group of f source shards into one target shard.
	Shrink ResizeOp = iota + 1
	// Split divides each source shard into f target shards.
	Split
	// Clone copies each source shard into the same target shard.
	Clone
)

// String returns the operation name as OpenSearch's REST API spells it.
func (o ResizeOp) String() string {
	switch o {
	case Shrink:
		return "shrink"
	case Split:
		return "split"
	case Clone:
		return "clone"
	}
	return fmt.Sprintf("ResizeOp(%d)", uint8(o))
}

// ParseResizeOp parses "shrink", "split" or "clone".
func ParseResizeOp(s string) (ResizeOp, error) {
	for _, o := range []ResizeOp{Shrink, Split, Clone} {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("routing: unknown resize operation %q (want shrink, split or clone)", s)
}

// RoutingFactor reproduces IndexMetadata.getRoutingFactor(source, target):
// the ratio between the two shard counts, which must divide exactly with a
// factor > 1 unless they are equal.
func RoutingFactor(source, target int) (int, error) {
	if source <= 0 || target <= 0 {
		return 0, newError(IllegalArgument, "the number of source shards [%d] and target shards [%d] must be positive", source, target)
	}
	switch {
	case source < target:
		f := target / source
		if f*source != target || f <= 1 {
			return 0, newError(IllegalArgument, "the number of source shards [%d] must be a factor of [%d]", source, target)
		}
		return f, nil
	case source > target:
		f := source / target
		if f*target != source || f <= 1 {
			return 0, newError(IllegalArgument, "the number of source shards [%d] must be a multiple of [%d]", source, target)
		}
		return f, nil
	}
	return 1, nil
}

// SelectSplitShard reproduces IndexMetadata.selectSplitShard: the source
// shard whose documents target shard t of a split into targetShards shards
// starts from. Checks run in OpenSearch's order.
func SelectSplitShard(t int, src Settings, targetShards int) (ShardID, error) {
	if t >= targetShards {
		return 0, newError(IllegalArgument,
			"the number of target shards (%d) must be greater than the shard id: %d", targetShards, t)
	}
	f, err := RoutingFactor(src.Shards, targetShards)
	if err != nil {
		return 0, err
	}
	if src.Shards > targetShards {
		return 0, newError(IllegalArgument,
			"the number of source shards [%d] must be less that the number of target shards [%d]", src.Shards, targetShards)
	}
	r := src.RoutingShards
	if src.Shards == 1 {
		r = targetShards
	}
	if r%targetShards != 0 {
		return 0, newError(IllegalState,
			"the number of routing shards [%d] must be a multiple of the target shards [%d]", r, targetShards)
	}
	return ShardID(t / f), nil
}

// SelectShrinkShards reproduces IndexMetadata.selectShrinkShards: the
// contiguous source shards [t*f, t*f+f) merged into target shard t.
func SelectShrinkShards(t int, src Settings, targetShards int) ([]ShardID, error) {
	if t >= targetShards {
		return nil, newError(IllegalArgument,
			"the number of target shards (%d) must be greater than the shard id: %d", targetShards, t)
	}
	if src.Shards < targetShards {
		return nil, newError(IllegalArgument,
			"the number of target shards [%d] must be less that the number of source shards [%d]", targetShards, src.Shards)
	}
	f, err := RoutingFactor(src.Shards, targetShards)
	if err != nil {
		return nil, err
	}
	ids := make([]ShardID, f)
	for i := range ids {
		ids[i] = ShardID(t*f + i)
	}
	return ids, nil
}

// SelectCloneShard reproduces IndexMetadata.selectCloneShard: the same id.
func SelectCloneShard(t int, src Settings, targetShards int) (ShardID, error) {
	if src.Shards != targetShards {
		return 0, newError(IllegalArgument,
			"the number of target shards (%d) must be the same as the number of source shards (%d)", targetShards, src.Shards)
	}
	return ShardID(t), nil
}

// TargetShardsForShrink reproduces
// TransportResizeAction.calculateTargetIndexShardsNum: the default target
// shard count of a shrink given max_shard_size and the primaries' store
// size, both in bytes (nil = not given). It returns 1 when either is nil or
// 0; otherwise the smallest divisor of the source shard count that is >=
// ceil(store/max), or the source shard count itself.
func TargetShardsForShrink(maxShardSize, storeBytes *int64, sourceShards int) int {
	if maxShardSize == nil || storeBytes == nil || *maxShardSize == 0 || *storeBytes == 0 {
		return 1
	}
	m := (*storeBytes + *maxShardSize - 1) / *maxShardSize
	if m >= int64(sourceShards) {
		return sourceShards
	}
	for d := int(m); d < sourceShards; d++ {
		if d > 0 && sourceShards%d == 0 {
			return d
		}
	}
	return sourceShards
}

// TargetRoutingShards reproduces MetadataCreateIndexService
// .getIndexNumberOfRoutingShards for a resize target: the source's routing
// shards, unless the source has exactly one shard, in which case the
// explicit setting (explicit > 0) or the create-index default for the
// target's shard count.
func TargetRoutingShards(src Settings, targetShards, explicit int) int {
	if src.Shards != 1 {
		return src.RoutingShards
	}
	if explicit > 0 {
		return explicit
	}
	return DefaultRoutingShards(targetShards)
}

// ResizeRequest is the input to resize validation: what OpenSearch's
// cluster-manager knows when a _split, _shrink or _clone arrives.
type ResizeRequest struct {
	Op     ResizeOp
	Source string // source index name
	Target string // target index name

	SourceExists          bool
	TargetExists          bool
	SourceSettings        Settings
	SourceWriteBlocked    bool   // any WRITE-level block (index.blocks.write, read_only, ...)
	SourceDataStreamWrite string // data stream whose write index the source is, "" if none
	// AllShardsOnOneNode is true when some node holds a STARTED copy of every
	// source shard; only a shrink needs it.
	AllShardsOnOneNode bool

	// TargetShards is the target's index.number_of_shards; 0 = not given.
	TargetShards int
	// TargetRoutingShards is the target's index.number_of_routing_shards; 0 = not given.
	TargetRoutingShards int
	// TargetPartitionSize is the target's index.routing_partition_size; 0 = not given.
	TargetPartitionSize int
	// MaxShardSize is the request's max_shard_size in bytes; nil = not given.
	MaxShardSize *int64
	// SourceStoreBytes is the primaries' store size; nil = unknown.
	SourceStoreBytes *int64
	// SourceShardDocs holds the primary doc count of each source shard; nil = unknown.
	SourceShardDocs []int64
	// SourceSoftDeletes and TargetSoftDeletes are index.soft_deletes.enabled;
	// nil = not set.
	SourceSoftDeletes, TargetSoftDeletes *bool
}

// PrepareResize reproduces TransportResizeAction.prepareCreateIndexRequest
// and then MetadataCreateIndexService.validateResize, in OpenSearch's order,
// and returns the target index's routing settings.
//
// The transport layer looks the source up first (a missing source is
// IndexNotFoundException), then checks the request and the target's
// settings; only the create-index task that follows checks the target's
// existence and the source's write block. So a target that sets
// index.number_of_routing_shards is refused for that even when the source
// is not write-blocked.
func PrepareResize(req ResizeRequest) (Settings, error) {
	if !req.SourceExists {
		return Settings{}, newError(IndexNotFound, "no such index [%s]", req.Source)
	}
	shards, err := prepareTargetShards(req)
	if err != nil {
		return Settings{}, err
	}
	req.TargetShards = shards
	if err := ValidateResize(req); err != nil {
		return Settings{}, err
	}
	src := req.SourceSettings
	target := Settings{
		Shards:        shards,
		RoutingShards: TargetRoutingShards(src, shards, req.TargetRoutingShards),
		PartitionSize: src.PartitionSize,
	}
	// The target is then built as any index is (IndexMetadata.Builder
	// .build and the number_of_routing_shards validator), naming the
	// target: a split of a one-shard index may give routing shards that
	// are no multiple of its shards, or below the partition size it
	// copies from the source.
	if err := target.Validate(req.Target); err != nil {
		return Settings{}, err
	}
	return target, nil
}

// prepareTargetShards is the TransportResizeAction layer: parameter checks,
// the default target shard count, per-target-shard selection and the
// settings a resize may not set.
func prepareTargetShards(req ResizeRequest) (int, error) {
	if req.Op != Shrink && req.MaxShardSize != nil {
		return 0, newError(IllegalArgument, "Unsupported parameter [max_shard_size]")
	}
	src := req.SourceSettings
	shards := req.TargetShards
	switch {
	case shards != 0:
		if req.Op == Shrink && req.MaxShardSize != nil {
			return 0, newError(IllegalArgument, "Cannot set max_shard_size and index.number_of_shards at the same time!")
		}
		// Read as the setting is (INDEX_NUMBER_OF_SHARDS_SETTING.get),
		// before any shard is selected with it.
		if err := validateShardCount(shards); err != nil {
			return 0, err
		}
	case req.Op == Shrink:
		shards = TargetShardsForShrink(req.MaxShardSize, req.SourceStoreBytes, src.Shards)
	case req.Op == Clone:
		shards = src.Shards
	default:
		return 0, fmt.Errorf("routing: a split must give the target's number_of_shards")
	}
	for t := 0; t < shards; t++ {
		if err := selectTargetShard(req, t, shards); err != nil {
			return 0, err
		}
	}
	if req.TargetPartitionSize != 0 {
		return 0, newError(IllegalArgument, "cannot provide a routing partition size value when resizing an index")
	}
	if req.TargetRoutingShards != 0 && !(req.Op == Split && src.Shards == 1) {
		return 0, newError(IllegalArgument, "cannot provide index.number_of_routing_shards on resize")
	}
	if req.SourceSoftDeletes != nil && *req.SourceSoftDeletes && req.TargetSoftDeletes != nil && !*req.TargetSoftDeletes {
		return 0, newError(IllegalArgument, "Can't disable [index.soft_deletes.enabled] setting on resize")
	}
	return shards, nil
}

// selectTargetShard runs the per-target-shard selection that
// prepareCreateIndexRequest does only for its exceptions, plus the shrink's
// document limit.
func selectTargetShard(req ResizeRequest, t, shards int) error {
	src := req.SourceSettings
	switch req.Op {
	case Shrink:
		ids, err := SelectShrinkShards(t, src, shards)
		if err != nil {
			return err
		}
		var count int64
		for _, id := range ids {
			if int(id) < len(req.SourceShardDocs) {
				count += req.SourceShardDocs[id]
			}
			if count > MaxDocsPerShard {
				return newError(IllegalState, "Can't merge index with more than [%d] docs - too many documents in shards %s",
					MaxDocsPerShard, formatShardIDs(req.Source, ids))
			}
		}
	case Split:
		_, err := SelectSplitShard(t, src, shards)
		return err
	case Clone:
		_, err := SelectCloneShard(t, src, shards)
		return err
	}
	return nil
}

// formatShardIDs prints shard ids as Java prints a Set<ShardId>:
// "[[index][0], [index][1]]".
func formatShardIDs(index string, ids []ShardID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("[%s][%d]", index, id)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// ValidateResize reproduces MetadataCreateIndexService.validateResize and
// the per-operation validateShrinkIndex, validateSplitIndex and
// validateCloneIndex, in OpenSearch's order. A TargetShards of 0 means the
// setting was not given; index.number_of_shards then defaults to 1.
func ValidateResize(req ResizeRequest) error {
	if err := checkResizeIndices(req); err != nil {
		return err
	}
	return validateResizeShards(req)
}

// checkResizeIndices is the first part of validateResize: the indices
// themselves.
func checkResizeIndices(req ResizeRequest) error {
	if req.TargetExists {
		return newError(ResourceAlreadyExists, "index [%s] already exists", req.Target)
	}
	if !req.SourceExists {
		return newError(IndexNotFound, "no such index [%s]", req.Source)
	}
	if req.SourceDataStreamWrite != "" {
		return newError(IllegalArgument, "cannot resize the write index [%s] for data stream [%s]",
			req.Source, req.SourceDataStreamWrite)
	}
	if !req.SourceWriteBlocked {
		return newError(IllegalState,
			"index %s must block write operations to resize index. use \"index.blocks.write=true\"", req.Source)
	}
	return nil
}

// validateResizeShards is the rest of validateResize: the shard counts.
func validateResizeShards(req ResizeRequest) error {
	src := req.SourceSettings
	target := req.TargetShards
	if target != 0 {
		if _, err := RoutingFactor(src.Shards, target); err != nil {
			return err
		}
	} else {
		target = 1
	}
	switch req.Op {
	case Shrink:
		if _, err := SelectShrinkShards(0, src, target); err != nil {
			return err
		}
		if src.Shards == 1 {
			return newError(IllegalArgument, "can't shrink an index with only one shard")
		}
		if !req.AllShardsOnOneNode {
			return newError(IllegalState, "index %s must have all shards allocated on the same node to shrink index", req.Source)
		}
	case Split:
		if _, err := SelectSplitShard(0, src, target); err != nil {
			return err
		}
	case Clone:
		if _, err := SelectCloneShard(0, src, target); err != nil {
			return err
		}
	default:
		return fmt.Errorf("routing: unknown resize operation %d", req.Op)
	}
	return nil
}
