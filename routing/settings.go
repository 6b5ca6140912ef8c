package routing

import (
	"fmt"
	"math/bits"
	"unicode/utf8"
)

const (
	// MaxShards is the largest index.number_of_shards OpenSearch accepts
	// (opensearch.index.max_number_of_shards default).
	MaxShards = 1024
	// MaxIDBytes is the longest _id in UTF-8 bytes
	// (IndexRequest.MAX_DOCUMENT_ID_LENGTH_IN_BYTES).
	MaxIDBytes = 512
	// MaxDocsPerShard is Lucene's IndexWriter.MAX_DOCS, the per-shard document
	// limit a shrink checks.
	MaxDocsPerShard = 2147483519
)

// Settings are the routing settings of an index: index.number_of_shards,
// index.number_of_routing_shards and index.routing_partition_size.
//
// INVARIANTS (checked by Validate):
//  1. 1 <= Shards <= MaxShards.
//  2. RoutingShards == Shards, or RoutingShards is a multiple of Shards with a
//     factor > 1.
//  3. PartitionSize >= 1, and PartitionSize == 1 or PartitionSize < RoutingShards.
type Settings struct {
	Shards        int // index.number_of_shards: the number of root shards
	RoutingShards int // index.number_of_routing_shards (R)
	PartitionSize int // index.routing_partition_size (P), 1 when not partitioned
}

// DefaultRoutingShards is the number_of_routing_shards that index creation
// picks when none is given: n << max(1, 10 - ceil(log2 n))
// (MetadataCreateIndexService.calculateNumRoutingShards).
func DefaultRoutingShards(shards int) int {
	log2 := 32 - bits.LeadingZeros32(uint32(shards-1))
	splits := max(1, 10-log2)
	return shards << splits
}

// NewSettings returns the settings of an index created with the given
// number_of_shards, optional number_of_routing_shards (0 = the create-index
// default) and routing_partition_size (0 = 1), validated as OpenSearch does
// at index creation. index is the index name used in error messages.
func NewSettings(index string, shards, routingShards, partitionSize int) (Settings, error) {
	if err := validateShardCount(shards); err != nil {
		return Settings{}, err
	}
	if routingShards == 0 {
		routingShards = DefaultRoutingShards(shards)
	} else if err := ValidateRoutingShardsSetting(shards, routingShards); err != nil {
		return Settings{}, err
	}
	if partitionSize == 0 {
		partitionSize = 1
	}
	s := Settings{Shards: shards, RoutingShards: routingShards, PartitionSize: partitionSize}
	if err := s.validatePartition(index); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// validateShardCount reproduces the bounds of index.number_of_shards with
// the messages of Setting.parseInt.
func validateShardCount(shards int) error {
	if shards < 1 {
		return newError(IllegalArgument,
			"Failed to parse value [%d] for setting [index.number_of_shards] must be >= 1", shards)
	}
	if shards > MaxShards {
		return newError(IllegalArgument,
			"Failed to parse value [%d] for setting [index.number_of_shards] must be <= %d", shards, MaxShards)
	}
	return nil
}

// ValidateRoutingShardsSetting reproduces the validator of
// index.number_of_routing_shards: it must be >= number_of_shards, and the
// two must have a routing factor (equal, or a multiple with factor > 1).
func ValidateRoutingShardsSetting(shards, routingShards int) error {
	if routingShards < shards {
		return newError(IllegalArgument,
			"index.number_of_routing_shards [%d] must be >= index.number_of_shards [%d]", routingShards, shards)
	}
	if routingShards > maxRoutingShards {
		// OpenSearch's setting is a Java int and cannot hold such a value;
		// Place computes floorMod in int32 and would wrap.
		return fmt.Errorf("routing: index.number_of_routing_shards [%d] exceeds %d", routingShards, maxRoutingShards)
	}
	_, err := RoutingFactor(shards, routingShards)
	return err
}

// maxRoutingShards is the largest index.number_of_routing_shards: the
// setting is a Java int.
const maxRoutingShards = 1<<31 - 1

// Validate checks the invariants of s; index names the index in messages.
func (s Settings) Validate(index string) error {
	if err := validateShardCount(s.Shards); err != nil {
		return err
	}
	if err := ValidateRoutingShardsSetting(s.Shards, s.RoutingShards); err != nil {
		return err
	}
	return s.validatePartition(index)
}

// validatePartition reproduces IndexMetadata.Builder.build(): the partition
// size is checked against the routing shards, although the message says
// "number of shards".
func (s Settings) validatePartition(index string) error {
	if s.PartitionSize < 1 {
		return newError(IllegalArgument,
			"Failed to parse value [%d] for setting [index.routing_partition_size] must be >= 1", s.PartitionSize)
	}
	if s.PartitionSize != 1 && s.PartitionSize >= s.RoutingShards {
		return newError(IllegalArgument,
			"routing partition size [%d] should be a positive number less than the number of shards [%d] for [%s]",
			s.PartitionSize, s.RoutingShards, index)
	}
	return nil
}

// Factor is the routing factor R / N: the number of routing slots
// (partitions) each root shard owns.
func (s Settings) Factor() int { return s.RoutingShards / s.Shards }

// ValidateID reproduces OpenSearch's _id checks: not empty, and at most
// MaxIDBytes UTF-8 bytes.
func ValidateID(id string) error {
	if id == "" {
		return newError(IllegalArgument, "if _id is specified it must not be empty")
	}
	if n := len(id); n > MaxIDBytes {
		return newError(IllegalArgument,
			"id [%s] is too long, must be no longer than %d bytes but was: %d", id, MaxIDBytes, n)
	}
	if !utf8.ValidString(id) {
		return newError(IllegalArgument, "id [%q] is not valid UTF-8", id)
	}
	return nil
}
