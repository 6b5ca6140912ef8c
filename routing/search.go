package routing

import (
	"slices"
	"strings"
)

// SearchShards returns the shards a search with the given routing parameter
// targets, ascending (OperationRouting.computeTargetedShards).
//
//   - No routing value: every active shard.
//   - Otherwise the parameter is split on commas into a set (values are
//     trimmed; empty values are ignored), and for each value r and each
//     offset k in 0..P-1 the shard of hash(r)+k is added. On a partitioned
//     index with R much larger than N those P slots nearly always fall into
//     one shard: OpenSearch's open partition-collapse behaviour (#17472,
//     #20001), reproduced on purpose.
//
// Children of in-progress splits are never targeted, as in OpenSearch.
func (t *Table) SearchShards(routing string) []ShardID {
	values := SplitRouting(routing)
	if len(values) == 0 {
		return t.ActiveShards()
	}
	var out []ShardID
	for _, r := range values {
		h := Hash(r)
		for k := range t.settings.PartitionSize {
			out = append(out, t.Lookup(t.settings.placeHash(h, int32(k))))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// SplitRouting splits a comma-separated routing parameter into its distinct
// values, untrimmed: OpenSearch splits with String.split(",")
// (Strings.splitStringByCommaToArray), so "a, b" names "a" and " b", and a
// value with a space is the one a write used. A value of spaces only is
// dropped (routing " , " searches every shard, a superset of the shard of
// " ").
func SplitRouting(routing string) []string {
	var values []string
	for v := range strings.SplitSeq(routing, ",") {
		if strings.TrimSpace(v) != "" && !slices.Contains(values, v) {
			values = append(values, v)
		}
	}
	return values
}
