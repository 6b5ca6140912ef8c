package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/routing"
)

// Setting names the service knows.
const (
	SettingShards        = "index.number_of_shards"
	SettingRoutingShards = "index.number_of_routing_shards"
	SettingPartitionSize = "index.routing_partition_size"
	SettingReplicas      = "index.number_of_replicas"
	SettingMode          = "index.shardsplit.mode"
	SettingBlockWrite    = "index.blocks.write"
	SettingBlockReadOnly = "index.blocks.read_only"
	SettingBlockRead     = "index.blocks.read"
	SettingBlockMetadata = "index.blocks.metadata"
	// SettingBlockReadOnlyAllowDelete is the flood-stage block: OpenSearch's
	// disk threshold decider sets it when a node's disk passes the flood
	// stage watermark; a user may set or clear it too.
	SettingBlockReadOnlyAllowDelete = "index.blocks.read_only_allow_delete"
	allocationPrefix                = "index.routing.allocation."
)

type settingKind uint8

const (
	kindStatic  settingKind = iota + 1 // set at creation only
	kindFinal                          // set at creation only, "final"
	kindDynamic                        // updatable
	kindPrivate                        // set by the service only
)

type settingSpec struct {
	kind  settingKind
	parse func(key, v string) error
}

func parseBool(key, v string) error {
	if v != "true" && v != "false" {
		return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "Failed to parse value [%s] as only [true] or [false] are allowed.", v)
	}
	return nil
}

func parseIntMin(lo int) func(key, v string) error {
	return func(key, v string) error {
		// A Java int, as OpenSearch's intSetting parses it.
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "Failed to parse value [%s] for setting [%s]", v, key)
		}
		if n < int64(lo) {
			return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "Failed to parse value [%s] for setting [%s] must be >= %d", v, key, lo)
		}
		return nil
	}
}

func parseMode(key, v string) error {
	if _, err := routing.ParseMode(v); err != nil {
		return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "unknown value [%s] for setting [%s]: want [partition] or [opensearch]", v, key)
	}
	return nil
}

// parseReplicaSplit accepts the strategies a replicated shard's split
// gives its children replicas by (cluster.Strategies).
func parseReplicaSplit(key, v string) error {
	if !slices.Contains(cluster.Strategies, v) {
		return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "unknown value [%s] for setting [%s]: want one of %v", v, key, cluster.Strategies)
	}
	return nil
}

func anyValue(key, v string) error { return nil }

// parseTimeMinMinusOneMs accepts a time value (ParseTimeValue) of at
// least -1ms, as OpenSearch's Setting.timeSetting with that minimum
// (index.refresh_interval's) does: "-1s" is a time value, and refused.
// parseTimeMin0 is Setting.positiveTimeSetting's check.
func parseTimeMin0(key, v string) error {
	n, _, err := parseTimeValue(v, key)
	if err != nil {
		return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "%s", err.Error())
	}
	if n < 0 {
		return newErr(TypeIllegalArgument, http.StatusBadRequest, "",
			"failed to parse value [%s] for setting [%s], must be >= [0ms]", v, key)
	}
	return nil
}

func parseTimeMinMinusOneMs(key, v string) error {
	n, unit, err := parseTimeValue(v, key)
	if err != nil {
		return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "%s", err.Error())
	}
	if n < 0 && unit >= time.Second { // TimeValue.millis() below -1
		return newErr(TypeIllegalArgument, http.StatusBadRequest, "",
			"failed to parse value [%s] for setting [%s], must be >= [-1ms]", v, key)
	}
	return nil
}

// NoTimeout is what a time value of -1 (none) means as a wait: the longest
// one ParseTimeValue returns.
const NoTimeout = 24 * time.Hour

// ParseTimeValue parses a time value as OpenSearch's
// TimeValue.parseTimeValue does, with its messages: a whole number (a Java
// long, -1 the only negative) and a unit (nanos, micros, ms, s, m, h, d;
// case-insensitive except m), or "-1" or "0" alone. A negative value (-1:
// no timeout) waits NoTimeout; a value too long for a Duration is capped to
// NoTimeout.
func ParseTimeValue(sValue, setting string) (time.Duration, error) {
	n, unit, err := parseTimeValue(sValue, setting)
	switch {
	case err != nil:
		return 0, err
	case n < 0 || n > int64(NoTimeout/unit):
		return NoTimeout, nil
	}
	return time.Duration(n) * unit, nil
}

// parseTimeValue is ParseTimeValue's parse: the number and its unit ("-1"
// alone is -1 of a millisecond, "0" alone 0 of one).
func parseTimeValue(sValue, setting string) (int64, time.Duration, error) {
	normalized := strings.TrimSpace(strings.ToLower(sValue))
	units := []struct {
		suffix string
		d      time.Duration
	}{{"nanos", time.Nanosecond}, {"micros", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second},
		{"m", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}}
	for _, u := range units {
		if u.suffix == "m" && !strings.HasSuffix(sValue, "m") {
			continue // "M" would be months: only a lowercase m is minutes
		}
		n, ok := strings.CutSuffix(normalized, u.suffix)
		if !ok {
			continue
		}
		n = strings.TrimSpace(n)
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			if _, ferr := strconv.ParseFloat(n, 64); ferr == nil {
				return 0, 0, fmt.Errorf("failed to parse [%s], fractional time values are not supported", sValue)
			}
			return 0, 0, fmt.Errorf("failed to parse [%s]", sValue)
		}
		if v < -1 {
			return 0, 0, fmt.Errorf("failed to parse setting [%s] with value [%s] as a time value: negative durations are not supported", setting, sValue)
		}
		return v, u.d, nil
	}
	switch {
	case strings.TrimLeft(normalized, "0") == "" && normalized != "":
		return 0, time.Millisecond, nil
	case strings.HasPrefix(normalized, "-") && strings.TrimLeft(normalized[1:], "0") == "1":
		return -1, time.Millisecond, nil
	}
	return 0, 0, fmt.Errorf("failed to parse setting [%s] with value [%s] as a time value: unit is missing or unrecognized", setting, sValue)
}

var settingSpecs = map[string]settingSpec{
	SettingShards:                   {kindStatic, parseIntMin(1)},
	SettingRoutingShards:            {kindFinal, parseIntMin(1)},
	SettingPartitionSize:            {kindStatic, parseIntMin(1)},
	SettingReplicas:                 {kindDynamic, parseIntMin(0)},
	SettingMode:                     {kindStatic, parseMode},
	cluster.SettingReplicaSplit:     {kindStatic, parseReplicaSplit},
	SettingBlockWrite:               {kindDynamic, parseBool},
	SettingBlockReadOnly:            {kindDynamic, parseBool},
	SettingBlockRead:                {kindDynamic, parseBool},
	SettingBlockMetadata:            {kindDynamic, parseBool},
	SettingBlockReadOnlyAllowDelete: {kindDynamic, parseBool},
	"index.refresh_interval":        {kindDynamic, parseTimeMinMinusOneMs},
	"index.max_result_window":       {kindDynamic, parseIntMin(1)},
	// How long a replica of a node that left waits for it (cluster mode:
	// cluster.SettingDelayedTimeout; a single node has no replicas).
	"index.unassigned.node_left.delayed_timeout": {kindDynamic, parseTimeMin0},
	"index.uuid":               {kindPrivate, anyValue},
	"index.creation_date":      {kindPrivate, anyValue},
	"index.provided_name":      {kindPrivate, anyValue},
	"index.version.created":    {kindPrivate, anyValue},
	"index.resize.source.name": {kindPrivate, anyValue},
	"index.resize.source.uuid": {kindPrivate, anyValue},
}

func specOf(key string) (settingSpec, bool) {
	if s, ok := settingSpecs[key]; ok {
		return s, true
	}
	if strings.HasPrefix(key, allocationPrefix) && len(key) > len(allocationPrefix) {
		return settingSpec{kindDynamic, anyValue}, true
	}
	return settingSpec{}, false
}

func unknownSetting(key string) *Error {
	return newErr(TypeIllegalArgument, http.StatusBadRequest, "",
		"unknown setting [%s] please check that any required plugins are installed, or check the breaking changes documentation for removed settings", key)
}

// FlatSettings maps flat "index.*" setting names to values; a nil value
// removes the setting (JSON null).
type FlatSettings map[string]*string

// ParseSettings flattens a settings object as OpenSearch accepts it:
// nested ({"index":{"number_of_shards":2}}), dotted ("index.number_of_shards")
// or without the "index." prefix; numbers and booleans become strings. It
// checks names and values: unknown settings and bad values are
// illegal_argument_exception.
func ParseSettings(raw json.RawMessage) (FlatSettings, error) {
	out := FlatSettings{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, newErr(TypeParse, http.StatusBadRequest, "", "failed to parse settings: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, newErr(TypeParse, http.StatusBadRequest, "", "settings must be an object")
	}
	if err := flatten("", obj, out); err != nil {
		return nil, err
	}
	if err := out.check(); err != nil {
		return nil, err
	}
	return out, nil
}

// check refuses unknown setting names and bad values (a nil value, a
// removal, has none), in name order, with OpenSearch's messages.
func (f FlatSettings) check() error {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		spec, ok := specOf(k)
		if !ok {
			return unknownSetting(k)
		}
		if v := f[k]; v != nil {
			if err := spec.parse(k, *v); err != nil {
				return err
			}
		}
	}
	return nil
}

func flatten(prefix string, obj map[string]any, out FlatSettings) error {
	for k, v := range obj {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		switch x := v.(type) {
		case map[string]any:
			if err := flatten(key, x, out); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(key, "index.") {
			key = "index." + key
		}
		switch x := v.(type) {
		case nil:
			out[key] = nil
		case string:
			out[key] = &x
		case json.Number:
			s := x.String()
			out[key] = &s
		case bool:
			s := strconv.FormatBool(x)
			out[key] = &s
		case []any:
			parts := make([]string, 0, len(x))
			for _, e := range x {
				parts = append(parts, fmt.Sprint(e))
			}
			s := strings.Join(parts, ",")
			out[key] = &s
		default:
			return newErr(TypeIllegalArgument, http.StatusBadRequest, "", "unsupported value for setting [%s]", key)
		}
	}
	return nil
}

func atoi(m map[string]string, key string, def int) int {
	if v, ok := m[key]; ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

// tableFor returns the initial table of an index from its settings.
func tableFor(m *IndexMeta) (*routing.Table, error) {
	s, err := routingSettings(m.Name, m.Settings)
	if err != nil {
		return nil, err
	}
	mode, err := routing.ParseMode(m.Settings[SettingMode])
	if err != nil {
		return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, m.Name, "%v", err)
	}
	return routing.NewTable(mode, s)
}

func routingSettings(name string, m map[string]string) (routing.Settings, error) {
	return routing.NewSettings(name, atoi(m, SettingShards, 1), atoi(m, SettingRoutingShards, 0), atoi(m, SettingPartitionSize, 0))
}

// maxShardsPerNode is cluster.max_shards_per_node's default; this one node
// holds every shard copy, so it is the cluster's limit.
const maxShardsPerNode = 1000

// shardCopies is an index's number of shard copies as OpenSearch counts
// them (IndexMetadata.getTotalNumberOfShards): shards × (1 + replicas).
func shardCopies(settings map[string]string) int64 {
	return int64(atoi(settings, SettingShards, 1)) * (1 + int64(atoi(settings, SettingReplicas, 0)))
}

// checkShardLimit is OpenSearch's ShardLimitValidator.checkShardLimit:
// adding shard copies to the open ones must stay within the limit (a
// validation_exception otherwise). It bounds what _cat/shards and health
// list, one row per copy.
func checkShardLimit(st *state, add int64) error {
	if add <= 0 {
		return nil
	}
	var open int64
	for _, m := range st.Indices {
		open += shardCopies(m.Settings)
	}
	if open+add > maxShardsPerNode {
		return newErr(TypeValidationException, http.StatusBadRequest, "",
			"Validation Failed: 1: this action would add [%d] total shards, but this cluster currently has [%d]/[%d] maximum shards open;",
			add, open, maxShardsPerNode)
	}
	return nil
}

// Blocks are an index's blocks.
type Blocks struct{ Write, ReadOnly, Read, Metadata, ReadOnlyAllowDelete bool }

func blocksOf(m map[string]string) Blocks {
	return Blocks{Write: m[SettingBlockWrite] == "true", ReadOnly: m[SettingBlockReadOnly] == "true",
		Read: m[SettingBlockRead] == "true", Metadata: m[SettingBlockMetadata] == "true",
		ReadOnlyAllowDelete: m[SettingBlockReadOnlyAllowDelete] == "true"}
}

// BlockError is OpenSearch's cluster_block_exception.
type BlockError struct {
	Index  string
	Blocks []string // e.g. "FORBIDDEN/8/index write (api)"
	// Status is ClusterBlockException.status(): the highest of its
	// blocks' statuses (0: 403, every API block's).
	Status int
}

func (e *BlockError) Error() string {
	return fmt.Sprintf("index [%s] blocked by: [%s];", e.Index, strings.Join(e.Blocks, ", "))
}

// floodStageBlock is IndexMetadata.INDEX_READ_ONLY_ALLOW_DELETE_BLOCK's
// description: id 12, status TOO_MANY_REQUESTS, levels WRITE and
// METADATA_WRITE, allowing the index's delete.
const floodStageBlock = "TOO_MANY_REQUESTS/12/disk usage exceeded flood-stage watermark, index has read-only-allow-delete block"

// blockError lists blocks as ClusterBlocks.indexBlockedException does,
// with the status the flood-stage block raises to 429.
func (b Blocks) blockError(index string, names []string) error {
	if names == nil {
		return nil
	}
	e := &BlockError{Index: index, Blocks: names}
	if b.ReadOnlyAllowDelete {
		e.Status = http.StatusTooManyRequests
	}
	return e
}

func (b Blocks) writeError(index string) error {
	var names []string
	if b.ReadOnly {
		names = append(names, "FORBIDDEN/5/index read-only (api)")
	}
	if b.Write {
		names = append(names, "FORBIDDEN/8/index write (api)")
	}
	if b.ReadOnlyAllowDelete {
		names = append(names, floodStageBlock)
	}
	return b.blockError(index, names)
}

func (b Blocks) readError(index string) error {
	if !b.Read {
		return nil
	}
	return &BlockError{Index: index, Blocks: []string{"FORBIDDEN/7/index read (api)"}}
}

func (b Blocks) metadataError(index string) error {
	var names []string
	if b.ReadOnly {
		names = append(names, "FORBIDDEN/5/index read-only (api)")
	}
	if b.Metadata {
		names = append(names, "FORBIDDEN/9/index metadata (api)")
	}
	if b.ReadOnlyAllowDelete {
		names = append(names, floodStageBlock)
	}
	return b.blockError(index, names)
}

// deleteError is metadataError for an index's delete, which a block that
// allows releasing resources (the flood-stage block) does not stop
// (ClusterBlocks.indicesAllowReleaseResources).
func (b Blocks) deleteError(index string) error {
	b.ReadOnlyAllowDelete = false
	return b.metadataError(index)
}

// NestedSettings turns flat settings into OpenSearch's nested form
// ({"index":{"number_of_shards":"1",...}}).
func NestedSettings(flat map[string]string) map[string]any {
	out := map[string]any{}
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts := strings.Split(k, ".")
		m := out
		for i, p := range parts {
			if i == len(parts)-1 {
				m[p] = flat[k]
				break
			}
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
	}
	return out
}
