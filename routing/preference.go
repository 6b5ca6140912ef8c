package routing

import (
	"fmt"
	"strconv"
	"strings"
)

// PreferenceType is a search preference type (Preference.java).
type PreferenceType uint8

const (
	// PreferNone is no preference: adaptive replica selection.
	PreferNone PreferenceType = iota
	PreferShards
	PreferNodes
	PreferLocal
	PreferPrimary
	PreferReplica
	PreferPrimaryFirst
	PreferReplicaFirst
	PreferOnlyLocal
	PreferOnlyNodes
	// PreferCustom is any string not starting with '_': a stable seed.
	PreferCustom
)

var preferenceNames = map[string]PreferenceType{
	"_shards": PreferShards, "_prefer_nodes": PreferNodes, "_local": PreferLocal,
	"_primary": PreferPrimary, "_replica": PreferReplica,
	"_primary_first": PreferPrimaryFirst, "_primaryFirst": PreferPrimaryFirst,
	"_replica_first": PreferReplicaFirst, "_replicaFirst": PreferReplicaFirst,
	"_only_local": PreferOnlyLocal, "_onlyLocal": PreferOnlyLocal,
	"_only_nodes": PreferOnlyNodes,
}

// Preference is a parsed preference string.
type Preference struct {
	Type PreferenceType
	// Shards lists the ids of a "_shards:0,3" preference.
	Shards []ShardID
	// Value is the part after ':' (node ids), or the whole custom string.
	Value string
	// Next is the preference after '|' of a _shards preference, if any.
	Next string
}

// ParsePreference parses a preference the way Preference.parse and
// OperationRouting do: the part before the first ':' is the type; an
// unknown type starting with '_' is rejected; anything else is a custom
// string.
func ParsePreference(s string) (Preference, error) {
	if s == "" {
		return Preference{}, nil
	}
	if s[0] != '_' {
		return Preference{Type: PreferCustom, Value: s}, nil
	}
	name, rest, _ := strings.Cut(s, ":")
	typ, ok := preferenceNames[name]
	if !ok {
		return Preference{}, newError(IllegalArgument, "no Preference for [%s]", name)
	}
	p := Preference{Type: typ, Value: rest}
	if typ != PreferShards {
		return p, nil
	}
	ids, next, _ := strings.Cut(rest, "|")
	p.Value, p.Next = ids, next
	for _, v := range strings.Split(ids, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return Preference{}, fmt.Errorf("routing: preference %q: shard id %q is not a number", s, v)
		}
		p.Shards = append(p.Shards, ShardID(n))
	}
	return p, nil
}

// Includes reports whether a _shards preference names the shard (other
// preferences include every shard).
func (p Preference) Includes(id ShardID) bool {
	if p.Type != PreferShards {
		return true
	}
	for _, s := range p.Shards {
		if s == id {
			return true
		}
	}
	return false
}

// CustomSeed is the copy-rotation seed of a custom preference string:
// 31 * murmur3(pref) + ShardId.hashCode(), where ShardId.hashCode is
// 31 * (31 * index.hashCode() + uuid.hashCode()) + shard, all Java int
// arithmetic. Copies are rotated left by floorMod(seed, copies).
func CustomSeed(pref, index, indexUUID string, shard ShardID) int32 {
	shardHash := 31*(31*javaStringHash(index)+javaStringHash(indexUUID)) + int32(shard)
	return 31*Hash(pref) + shardHash
}

// javaStringHash is Java's String.hashCode over UTF-16 code units.
func javaStringHash(s string) int32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10)&0x3FF)
			h = 31*h + int32(0xDC00+r&0x3FF)
			continue
		}
		h = 31*h + int32(r)
	}
	return h
}
