package routing

// Placement is where a document lands before any in-place split is applied:
// its routing hash, its partition (routing slot) and its root shard.
type Placement struct {
	// Hash is murmur3 of the effective routing value (routing, else _id),
	// before the partition offset.
	Hash int32
	// Sum is Hash + offset with Java int wrap-around: the value OpenSearch's
	// hash-range mode looks up in a root's leaves.
	Sum int32
	// Partition is floorMod(Sum, R): the routing slot.
	Partition uint32
	// Root is Partition / factor: the shard of an unsplit index.
	Root ShardID
}

// Place computes the placement of a document with the given _id and
// routing value (OperationRouting.generateShardId and
// calculateScaledShardId). An empty routing string routes by _id, as
// IndexRequest.routing("") stores null.
//
// The partition offset always comes from the _id, even when a routing
// value is given, and is added with int32 wrap-around before floorMod.
func (s Settings) Place(id, routing string) Placement {
	effective := routing
	if effective == "" {
		effective = id
	}
	h := Hash(effective)
	var offset int32
	if s.PartitionSize != 1 {
		offset = floorMod(Hash(id), int32(s.PartitionSize))
	}
	return s.placeHash(h, offset)
}

// placeHash places a routing hash at a given partition offset.
func (s Settings) placeHash(h, offset int32) Placement {
	sum := h + offset // wraps like Java int addition
	slot := uint32(floorMod(sum, int32(s.RoutingShards)))
	return Placement{
		Hash:      h,
		Sum:       sum,
		Partition: slot,
		Root:      ShardID(slot / uint32(s.Factor())),
	}
}

// floorMod is Java's Math.floorMod for int: the result has the sign of m.
func floorMod(x, m int32) int32 {
	r := x % m
	if r != 0 && (r^m) < 0 {
		r += m
	}
	return r
}
