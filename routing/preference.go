package routing

import (
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
		// OperationRouting compares Integer.parseInt(id) with each shard
		// id: a value that is not a Java int throws, a negative one matches
		// no shard.
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil {
			return Preference{}, newError(NumberFormat, "For input string: \"%s\"", v)
		}
		if n >= 0 {
			p.Shards = append(p.Shards, ShardID(n))
		}
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
