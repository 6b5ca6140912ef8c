package routing

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// This file speaks OpenSearch's own representation of the in-place split
// metadata (SplitShardsMetadata and ShardRange, OpenSearch #20859): its
// inclusive signed-int ranges, its XContent document and its StreamOutput
// wire form. It exists so that our tables can be compared with, and checked
// against, OpenSearch's tests. Our own durable encoding is in encode.go.

// ShardRange is OpenSearch's ShardRange: a shard and an inclusive range of
// signed hashes.
type ShardRange struct {
	ShardID    int32
	Start, End int32
}

// Contains reports start <= h <= end.
func (r ShardRange) Contains(h int32) bool { return r.Start <= h && h <= r.End }

// CompareTo compares starts only, as ShardRange.compareTo does: two ranges
// with equal starts compare as 0 even when their ids differ.
func (r ShardRange) CompareTo(o ShardRange) int {
	switch {
	case r.Start < o.Start:
		return -1
	case r.Start > o.Start:
		return 1
	}
	return 0
}

// JavaHashCode is ShardRange.hashCode: 31*(31*id+start)+end with int wrap.
func (r ShardRange) JavaHashCode() int32 { return 31*(31*r.ShardID+r.Start) + r.End }

// String is ShardRange.toString.
func (r ShardRange) String() string {
	return fmt.Sprintf("ShardRange{shardId=%d, start=%d, end=%d}", r.ShardID, r.Start, r.End)
}

// MarshalJSON writes the XContent form {"shard_id":…,"start":…,"end":…}.
func (r ShardRange) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"shard_id":%d,"start":%d,"end":%d}`, r.ShardID, r.Start, r.End), nil
}

// UnmarshalJSON parses the XContent form; a missing number is -1 and unknown
// fields are ignored, as ShardRange.parse does.
func (r *ShardRange) UnmarshalJSON(b []byte) error {
	var raw struct {
		ShardID *int32 `json:"shard_id"`
		Start   *int32 `json:"start"`
		End     *int32 `json:"end"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("routing: parse shard range: %w", err)
	}
	get := func(p *int32) int32 {
		if p == nil {
			return -1
		}
		return *p
	}
	*r = ShardRange{ShardID: get(raw.ShardID), Start: get(raw.Start), End: get(raw.End)}
	return nil
}

// AppendWire appends the StreamOutput form: vint id, then start and end as
// 4-byte big-endian ints.
func (r ShardRange) AppendWire(b []byte) []byte {
	b = appendVInt(b, r.ShardID)
	b = binary.BigEndian.AppendUint32(b, uint32(r.Start))
	return binary.BigEndian.AppendUint32(b, uint32(r.End))
}

// ValidateShardRanges reproduces SplitShardsMetadata.validateShardRanges:
// ranges, sorted by start, must tile [-2^31, 2^31-1], each at least 1000
// wide.
func ValidateShardRanges(shard int32, ranges []ShardRange) error {
	sorted := slices.Clone(ranges)
	slices.SortStableFunc(sorted, ShardRange.CompareTo)
	return validateTiling(ModeOpenSearch, ShardID(shard), Span{0, keySpaceEnd}, leavesOf(sorted))
}

func leavesOf(ranges []ShardRange) []Leaf {
	leaves := make([]Leaf, len(ranges))
	for i, r := range ranges {
		leaves[i] = Leaf{
			Shard: ShardID(r.ShardID),
			Span:  Span{Start: uint64(uint32(r.Start) ^ signBias), End: uint64(uint32(r.End)^signBias) + 1},
		}
	}
	return leaves
}

// rangesOf converts leaves to OpenSearch's inclusive ranges in display units.
func (m Mode) rangesOf(leaves []Leaf) []ShardRange {
	out := make([]ShardRange, len(leaves))
	for i, l := range leaves {
		out[i] = ShardRange{ShardID: int32(l.Shard), Start: int32(m.Display(l.Span.Start)), End: int32(m.Display(l.Span.End - 1))}
	}
	return out
}

// splitMeta is the field-by-field shape of SplitShardsMetadata.
type splitMeta struct {
	NumRoots   int
	MaxShardID int32
	InProgress []int32
	Active     []int32
	RootLeaves map[int32][]ShardRange // only split roots
	Children   map[int32][]ShardRange // parentToChildShards
}

func (t *Table) splitMeta() splitMeta {
	m := splitMeta{
		NumRoots:   len(t.roots),
		MaxShardID: int32(t.maxShard),
		RootLeaves: map[int32][]ShardRange{},
		Children:   map[int32][]ShardRange{},
	}
	for _, id := range t.InProgress() {
		m.InProgress = append(m.InProgress, int32(id))
	}
	for _, id := range t.ActiveShards() {
		m.Active = append(m.Active, int32(id))
	}
	for r, leaves := range t.roots {
		if len(leaves) != 1 || leaves[0].Shard != ShardID(r) {
			m.RootLeaves[int32(r)] = t.mode.rangesOf(leaves)
		}
	}
	for _, s := range t.splits {
		m.Children[int32(s.Parent)] = t.mode.rangesOf(s.Children)
	}
	return m
}

// MarshalXContent writes the split metadata as OpenSearch's XContent
// document (the split_shards_metadata object), keys in its write order and
// maps in ascending key order.
func (t *Table) MarshalXContent() []byte {
	m := t.splitMeta()
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"num_of_root_shards":%d,"max_shard_id":%d`, m.NumRoots, m.MaxShardID)
	if len(m.InProgress) > 0 {
		b.WriteString(`,"in_progress_split_shard_id":`)
		writeInts(&b, m.InProgress)
	}
	b.WriteString(`,"active_shard_ids":`)
	writeInts(&b, m.Active)
	b.WriteString(`,"root_shards_to_all_children":`)
	writeRangeMap(&b, m.RootLeaves)
	b.WriteString(`,"parent_to_child_shards":`)
	writeRangeMap(&b, m.Children)
	b.WriteString("}")
	return b.Bytes()
}

func writeInts(b *bytes.Buffer, ids []int32) {
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(id)))
	}
	b.WriteByte(']')
}

func writeRangeMap(b *bytes.Buffer, m map[int32][]ShardRange) {
	b.WriteByte('{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(b, `"%d":[`, k)
		for j, r := range m[k] {
			if j > 0 {
				b.WriteByte(',')
			}
			js, _ := r.MarshalJSON()
			b.Write(js)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
}

func sortedKeys(m map[int32][]ShardRange) []int32 {
	keys := make([]int32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ParseXContent rebuilds a table from OpenSearch's XContent split metadata.
// The document does not carry the routing settings, so the caller supplies
// them with the mode and the version to give the result.
func ParseXContent(mode Mode, s Settings, v Version, doc []byte) (*Table, error) {
	var raw struct {
		NumRoots   int                     `json:"num_of_root_shards"`
		MaxShardID int32                   `json:"max_shard_id"`
		InProgress []int32                 `json:"in_progress_split_shard_id"`
		Active     []int32                 `json:"active_shard_ids"`
		RootLeaves map[string][]ShardRange `json:"root_shards_to_all_children"`
		Children   map[string][]ShardRange `json:"parent_to_child_shards"`
	}
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, fmt.Errorf("routing: parse split metadata: %w", err)
	}
	m := splitMeta{NumRoots: raw.NumRoots, MaxShardID: raw.MaxShardID, InProgress: raw.InProgress, Active: raw.Active,
		RootLeaves: map[int32][]ShardRange{}, Children: map[int32][]ShardRange{}}
	for _, pair := range []struct {
		from map[string][]ShardRange
		to   map[int32][]ShardRange
	}{{raw.RootLeaves, m.RootLeaves}, {raw.Children, m.Children}} {
		for k, v := range pair.from {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("routing: parse split metadata: shard key %q: %w", k, err)
			}
			pair.to[int32(id)] = v
		}
	}
	return tableFromMeta(mode, s, v, m)
}

// tableFromMeta rebuilds and validates a table from split metadata.
func tableFromMeta(mode Mode, s Settings, v Version, m splitMeta) (*Table, error) {
	if m.NumRoots != s.Shards {
		return nil, fmt.Errorf("routing: split metadata has %d roots, settings say %d shards", m.NumRoots, s.Shards)
	}
	t, err := NewTable(mode, s)
	if err != nil {
		return nil, err
	}
	t.version, t.maxShard = v, ShardID(m.MaxShardID)
	for r, ranges := range m.RootLeaves {
		if r < 0 || int(r) >= len(t.roots) {
			return nil, fmt.Errorf("routing: split metadata names root %d of %d", r, len(t.roots))
		}
		t.roots[r] = t.leavesFromRanges(ranges)
	}
	inProgress := map[int32]bool{}
	for _, id := range m.InProgress {
		inProgress[id] = true
	}
	for _, p := range sortedKeys(m.Children) {
		t.splits = append(t.splits, SplitRecord{Parent: ShardID(p), Children: t.leavesFromRanges(m.Children[p]), InProgress: inProgress[p]})
	}
	for i := range t.splits {
		root, err := t.rootOf(t.splits[i].Parent, len(t.splits))
		if err != nil {
			return nil, err
		}
		t.splits[i].Root = root
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if got := t.splitMeta().Active; !slices.Equal(got, m.Active) {
		return nil, fmt.Errorf("routing: split metadata lists active shards %v, its ranges give %v", m.Active, got)
	}
	return t, nil
}

// rootOf finds the root a split parent descends from, following child links
// at most limit times.
func (t *Table) rootOf(id ShardID, limit int) (ShardID, error) {
	for range limit + 1 {
		if int(id) < len(t.roots) {
			return id, nil
		}
		i := slices.IndexFunc(t.splits, func(s SplitRecord) bool {
			return slices.ContainsFunc(s.Children, func(l Leaf) bool { return l.Shard == id })
		})
		if i < 0 {
			return 0, fmt.Errorf("routing: split parent %d descends from no root", id)
		}
		id = t.splits[i].Parent
	}
	return 0, fmt.Errorf("routing: split parent %d: cycle in split records", id)
}

func (t *Table) leavesFromRanges(ranges []ShardRange) []Leaf {
	leaves := leavesOf(ranges)
	if t.mode == ModePartition {
		for i, r := range ranges {
			leaves[i].Span = Span{Start: uint64(uint32(r.Start)), End: uint64(uint32(r.End)) + 1}
		}
	}
	return leaves
}

// MarshalStream writes the split metadata in OpenSearch's StreamOutput form
// (SplitShardsMetadata.writeTo), sets and maps in ascending order.
func (t *Table) MarshalStream() []byte {
	m := t.splitMeta()
	b := appendVInt(nil, int32(m.NumRoots))
	for r := range m.NumRoots {
		b = appendOptionalRanges(b, m.RootLeaves[int32(r)], m.RootLeaves[int32(r)] != nil)
	}
	b = appendVInt(b, m.MaxShardID)
	for _, ids := range [][]int32{m.InProgress, m.Active} {
		b = appendVInt(b, int32(len(ids)))
		for _, id := range ids {
			b = binary.BigEndian.AppendUint32(b, uint32(id))
		}
	}
	b = appendVInt(b, int32(len(m.Children)))
	for _, p := range sortedKeys(m.Children) {
		b = binary.BigEndian.AppendUint32(b, uint32(p))
		b = appendRanges(b, m.Children[p])
	}
	return b
}

func appendOptionalRanges(b []byte, ranges []ShardRange, present bool) []byte {
	if !present {
		return append(b, 0)
	}
	return appendRanges(append(b, 1), ranges)
}

// appendRanges writes StreamOutput.writeArray: vint length, then elements.
func appendRanges(b []byte, ranges []ShardRange) []byte {
	b = appendVInt(b, int32(len(ranges)))
	for _, r := range ranges {
		b = r.AppendWire(b)
	}
	return b
}

// UnmarshalStream rebuilds a table from OpenSearch's StreamOutput form.
func UnmarshalStream(mode Mode, s Settings, v Version, data []byte) (*Table, error) {
	r := &streamReader{b: data}
	m := splitMeta{NumRoots: int(r.vint()), RootLeaves: map[int32][]ShardRange{}, Children: map[int32][]ShardRange{}}
	if m.NumRoots < 0 || m.NumRoots > MaxShards {
		return nil, fmt.Errorf("routing: stream split metadata: %d roots", m.NumRoots)
	}
	for root := range m.NumRoots {
		if ranges, ok := r.optionalRanges(); ok {
			m.RootLeaves[int32(root)] = ranges
		}
	}
	m.MaxShardID = r.vint()
	m.InProgress, m.Active = r.ints(), r.ints()
	for n := r.vint(); n > 0 && r.err == nil; n-- {
		p := int32(r.u32())
		m.Children[p] = r.ranges()
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return nil, fmt.Errorf("routing: stream split metadata: %w", r.err)
	}
	return tableFromMeta(mode, s, v, m)
}

// appendVInt writes Java's StreamOutput.writeVInt: 7 bits per byte, low
// first, high bit set on all but the last byte.
func appendVInt(b []byte, v int32) []byte {
	u := uint32(v)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

var errShortStream = errors.New("truncated")

// streamReader reads StreamInput values; the first error sticks.
type streamReader struct {
	b   []byte
	err error
}

func (r *streamReader) byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.err = errShortStream
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *streamReader) vint() int32 {
	var u uint32
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		u |= uint32(c&0x7f) << shift
		if c < 0x80 {
			return int32(u)
		}
	}
	if r.err == nil {
		r.err = errors.New("vint too long")
	}
	return 0
}

func (r *streamReader) u32() uint32 {
	if r.err != nil || len(r.b) < 4 {
		r.err = errShortStream
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *streamReader) ints() []int32 {
	n := r.vint()
	if n < 0 || int(n) > len(r.b)/4 {
		if r.err == nil {
			r.err = fmt.Errorf("int array of %d", n)
		}
		return nil
	}
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.u32())
	}
	return out
}

func (r *streamReader) optionalRanges() ([]ShardRange, bool) {
	if r.byte() == 0 {
		return nil, false
	}
	return r.ranges(), true
}

func (r *streamReader) ranges() []ShardRange {
	n := r.vint()
	if n < 0 || int(n) > len(r.b)/9 {
		if r.err == nil {
			r.err = fmt.Errorf("range array of %d", n)
		}
		return nil
	}
	out := make([]ShardRange, n)
	for i := range out {
		out[i] = ShardRange{ShardID: r.vint(), Start: int32(r.u32()), End: int32(r.u32())}
	}
	return out
}

// Diff reproduces SplitShardsMetadata's AbstractDiffable: an equal table
// gives an empty diff; any change ships the whole metadata.
func (t *Table) Diff(prev *Table) []byte {
	if prev != nil && t.SameLayout(prev) {
		return nil
	}
	return t.MarshalStream()
}

// ApplyDiff applies a diff made by Diff to prev.
func ApplyDiff(prev *Table, diff []byte) (*Table, error) {
	if len(diff) == 0 {
		return prev, nil
	}
	return UnmarshalStream(prev.mode, prev.settings, prev.version+1, diff)
}
