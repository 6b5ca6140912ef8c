package routing

import (
	"fmt"
	"slices"
)

// ShardID names a shard. Root shards are 0..Settings.Shards-1; children of
// in-place splits get new ids by OpenSearch's rule (holes first, then above
// the highest id ever committed).
type ShardID uint32

// Version numbers routing tables. Every edit produces the next version;
// versions only increase (INV-3).
type Version uint64

// Mode selects how a table turns a document's placement into a routing key
// and how a split divides a parent's key range.
type Mode uint8

const (
	// ModePartition is this project's design: the routing key is the
	// partition (routing slot), so a split cuts a parent's slot range at slot
	// boundaries. Splitting every root at its factor midpoint reproduces
	// new-index _split x2 exactly.
	ModePartition Mode = iota + 1
	// ModeOpenSearch is the hash-range rule merged in OpenSearch #20859: the
	// routing key is the wrapped hash itself, each root spans the whole int32
	// range, and a split divides it into equal widths (remainder to the last
	// child), each wider than 1000.
	ModeOpenSearch
)

// String returns "partition" or "opensearch".
func (m Mode) String() string {
	switch m {
	case ModePartition:
		return "partition"
	case ModeOpenSearch:
		return "opensearch"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode parses "partition" or "opensearch".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "partition":
		return ModePartition, nil
	case "opensearch":
		return ModeOpenSearch, nil
	}
	return 0, fmt.Errorf("routing: unknown mode %q (want partition or opensearch)", s)
}

// Key is a position in the 32-bit routing-key space. Storage keys documents
// by [root][Key][_id], so that every leaf of a table is one contiguous key
// span in either mode.
//
//   - ModePartition: Key = partition, in [0, R).
//   - ModeOpenSearch: Key = uint32(Sum) XOR 1<<31, the signed hash biased so
//     that unsigned order of keys equals signed order of hashes.
type Key uint32

const (
	keySpaceEnd = 1 << 32 // exclusive end of the key space
	signBias    = 1 << 31 // bias between signed hashes and keys in ModeOpenSearch
	// minHashRangeWidth is OpenSearch's MINIMUM_RANGE_LENGTH_THRESHOLD: a
	// hash range narrower than this fails validation, and a split is refused
	// unless every child would be wider than it.
	minHashRangeWidth = 1000
)

// Display converts a key to the unit users see: the partition in
// ModePartition, the signed hash in ModeOpenSearch.
func (m Mode) Display(k uint64) int64 {
	if m == ModeOpenSearch {
		return int64(k) - signBias
	}
	return int64(k)
}

// KeyOf converts a display value (partition or signed hash) to a key. It
// fails if v is outside the key space of the mode.
func (m Mode) KeyOf(v int64) (Key, error) {
	if m == ModeOpenSearch {
		if v < -signBias || v >= signBias {
			return 0, fmt.Errorf("routing: split point %d is not a 32-bit signed hash", v)
		}
		return Key(v + signBias), nil
	}
	if v < 0 || v >= keySpaceEnd {
		return 0, fmt.Errorf("routing: split point %d is not a partition", v)
	}
	return Key(v), nil
}

// Span is a half-open range [Start, End) of routing keys. End may be 1<<32.
type Span struct {
	Start, End uint64
}

// Contains reports whether k lies in the span.
func (s Span) Contains(k Key) bool { return s.Start <= uint64(k) && uint64(k) < s.End }

// Width is End - Start.
func (s Span) Width() uint64 { return s.End - s.Start }

func (s Span) String() string { return fmt.Sprintf("[%d,%d)", s.Start, s.End) }

// Leaf is a shard and the span of routing keys it owns inside its root.
type Leaf struct {
	Shard ShardID
	Span  Span
}

// SplitRecord is one split that was begun and not cancelled: OpenSearch's
// parentToChildShards entry plus its in-progress flag.
type SplitRecord struct {
	Parent     ShardID
	Root       ShardID
	Children   []Leaf // ascending by span; they tile the parent's span
	InProgress bool
}

// MergeRecord is one merge that was begun and not cancelled: adjacent
// leaves of one root (the sources) that become one new shard (the target)
// owning their union. OpenSearch has no such record; see DESIGN.md.
type MergeRecord struct {
	Target     ShardID
	Root       ShardID
	Sources    []Leaf // ascending by span; they are adjacent and tile Span()
	InProgress bool
}

// Span is the union of the sources' spans: the span the target owns.
func (m MergeRecord) Span() Span {
	return Span{Start: m.Sources[0].Span.Start, End: m.Sources[len(m.Sources)-1].Span.End}
}

// SourceIDs returns the sources' ids, ascending by span.
func (m MergeRecord) SourceIDs() []ShardID {
	ids := make([]ShardID, len(m.Sources))
	for i, s := range m.Sources {
		ids[i] = s.Shard
	}
	return ids
}

// Table is an immutable, versioned routing table: every partition (or hash)
// of every root maps to exactly one active shard. Edits produce new tables
// through Apply; a *Table is never modified after Apply returns it, so it
// may be shared between goroutines freely.
//
// INVARIANTS (checked by Validate, on the input and output of every edit):
//
//	INV-1  the leaves of each root tile the root's span: sorted, no gap, no overlap.
//	INV-2  a shard id is a leaf of at most one root, at most once.
//	INV-3  versions only increase; Version() >= 1.
//	INV-4  an in-progress split's children tile its parent's span, its parent
//	       is an active leaf, and its child ids are not active.
//	INV-5  a committed split's parent is not active and its id is never reused.
//	INV-5m an in-progress merge's sources are adjacent active leaves of its
//	       root and its target is not active; a committed merge's sources
//	       are not active and their ids are never reused.
//
// Validate also checks that the split and merge records form the history
// Apply builds (validateTree): each root's committed splits and merges,
// replayed from the root, give exactly its leaves; every record is reached from the root it
// names; no id is used twice; max shard id is the highest committed id. So
// a table decoded from bytes is one that edits could have produced.
type Table struct {
	version  Version
	mode     Mode
	settings Settings
	roots    [][]Leaf      // committed leaves of each root, ascending
	maxShard ShardID       // highest committed shard id
	splits   []SplitRecord // ascending by parent
	merges   []MergeRecord // ascending by target
}

// NewTable returns version 1 of a table in which every root is unsplit.
func NewTable(mode Mode, s Settings) (*Table, error) {
	if mode != ModePartition && mode != ModeOpenSearch {
		return nil, fmt.Errorf("routing: unknown mode %d", mode)
	}
	if err := s.Validate("index"); err != nil {
		return nil, fmt.Errorf("routing: new table: %w", err)
	}
	t := &Table{version: 1, mode: mode, settings: s, maxShard: ShardID(s.Shards - 1)}
	t.roots = make([][]Leaf, s.Shards)
	for r := range t.roots {
		t.roots[r] = []Leaf{{Shard: ShardID(r), Span: t.RootSpan(ShardID(r))}}
	}
	return t, t.Validate()
}

// Version returns the table's version.
func (t *Table) Version() Version { return t.version }

// Mode returns the table's split mode.
func (t *Table) Mode() Mode { return t.mode }

// Settings returns the index routing settings the table routes by.
func (t *Table) Settings() Settings { return t.settings }

// MaxShardID returns the highest shard id ever committed.
func (t *Table) MaxShardID() ShardID { return t.maxShard }

// RootSpan returns the key span a root owns: its partitions
// [root*factor, (root+1)*factor) in ModePartition, the whole key space in
// ModeOpenSearch (every root spans the whole int32 hash range).
func (t *Table) RootSpan(root ShardID) Span {
	if t.mode == ModeOpenSearch {
		return Span{Start: 0, End: keySpaceEnd}
	}
	f := uint64(t.settings.Factor())
	return Span{Start: uint64(root) * f, End: uint64(root+1) * f}
}

// Keyspace returns the storage key prefix of a root's documents. In
// ModePartition partitions are unique across roots, so every document lives
// in keyspace 0 and any resize of the index (a new-index split, shrink or
// clone) is a change of which shard owns which partition span, never a
// rewrite of keys. In ModeOpenSearch every root spans the whole hash range,
// so the root is the keyspace.
func (t *Table) Keyspace(root ShardID) ShardID {
	if t.mode == ModeOpenSearch {
		return root
	}
	return 0
}

// KeyOf returns the routing key of a placement in this table's mode.
func (t *Table) KeyOf(p Placement) Key {
	if t.mode == ModeOpenSearch {
		return Key(uint32(p.Sum) ^ signBias)
	}
	return Key(p.Partition)
}

// Lookup returns the active shard that owns a placement: the root by the
// classic formula, then a binary search of the root's leaves. Children of
// in-progress splits are invisible to it, as in OpenSearch.
func (t *Table) Lookup(p Placement) ShardID {
	leaves := t.roots[p.Root]
	if len(leaves) == 1 {
		return leaves[0].Shard
	}
	return leaves[searchLeaves(leaves, uint64(t.KeyOf(p)))].Shard
}

// Owner returns the active shard that owns a routing key of a root. root
// must be a root of the table.
func (t *Table) Owner(root ShardID, k Key) ShardID {
	leaves := t.roots[root]
	return leaves[searchLeaves(leaves, uint64(k))].Shard
}

// Route places a document and returns its placement and its shard.
func (t *Table) Route(id, routing string) (Placement, ShardID) {
	p := t.settings.Place(id, routing)
	return p, t.Lookup(p)
}

// searchLeaves returns the index of the leaf containing k: the last leaf
// whose start is <= k. A hand-written loop keeps Lookup allocation-free.
func searchLeaves(leaves []Leaf, k uint64) int {
	lo, hi := 0, len(leaves)
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if leaves[mid].Span.Start <= k {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Leaves returns the committed leaves of a root, ascending. The slice must
// not be modified.
func (t *Table) Leaves(root ShardID) []Leaf { return t.roots[root] }

// Splits returns every split begun and not cancelled, ascending by parent.
// The slice must not be modified.
func (t *Table) Splits() []SplitRecord { return t.splits }

// ActiveShards returns the shards that serve traffic, ascending: every leaf
// of every root.
func (t *Table) ActiveShards() []ShardID {
	var ids []ShardID
	for _, leaves := range t.roots {
		for _, l := range leaves {
			ids = append(ids, l.Shard)
		}
	}
	slices.Sort(ids)
	return ids
}

// Location is where a shard sits in a table: its root, its span and
// whether it serves traffic.
type Location struct {
	Root   ShardID
	Span   Span
	Active bool // a committed leaf (false: a child of an in-progress split)
}

// Shard returns the root and span of an active leaf or of a child of an
// in-progress split. Storage keys a shard's documents by this span.
func (t *Table) Shard(id ShardID) (Location, bool) {
	for r, leaves := range t.roots {
		for _, l := range leaves {
			if l.Shard == id {
				return Location{Root: ShardID(r), Span: l.Span, Active: true}, true
			}
		}
	}
	for _, sp := range t.splits {
		if !sp.InProgress {
			continue
		}
		for _, c := range sp.Children {
			if c.Shard == id {
				return Location{Root: sp.Root, Span: c.Span}, true
			}
		}
	}
	if m, ok := t.Merge(id); ok && m.InProgress {
		return Location{Root: m.Root, Span: m.Span()}, true
	}
	return Location{}, false
}

// Merges returns every merge begun and not cancelled, ascending by target.
// The slice must not be modified.
func (t *Table) Merges() []MergeRecord { return t.merges }

// Merge returns the merge record of a target, if a merge into it was begun
// and not cancelled.
func (t *Table) Merge(target ShardID) (MergeRecord, bool) {
	i, ok := slices.BinarySearchFunc(t.merges, target, func(m MergeRecord, id ShardID) int { return cmpShard(m.Target, id) })
	if !ok {
		return MergeRecord{}, false
	}
	return t.merges[i], true
}

// MergeOf returns the in-progress merge that id is a source of, if any.
func (t *Table) MergeOf(id ShardID) (MergeRecord, bool) {
	for _, m := range t.merges {
		if !m.InProgress {
			continue
		}
		for _, s := range m.Sources {
			if s.Shard == id {
				return m, true
			}
		}
	}
	return MergeRecord{}, false
}

// MergesInProgress returns the targets of merges begun and not committed.
func (t *Table) MergesInProgress() []ShardID {
	var ids []ShardID
	for _, m := range t.merges {
		if m.InProgress {
			ids = append(ids, m.Target)
		}
	}
	return ids
}

// Split returns the split record of a parent, if a split of it was begun
// and not cancelled.
func (t *Table) Split(parent ShardID) (SplitRecord, bool) {
	i, ok := slices.BinarySearchFunc(t.splits, parent, func(s SplitRecord, p ShardID) int { return cmpShard(s.Parent, p) })
	if !ok {
		return SplitRecord{}, false
	}
	return t.splits[i], true
}

// InProgress returns the parents whose split is begun but not committed.
func (t *Table) InProgress() []ShardID {
	var ids []ShardID
	for _, s := range t.splits {
		if s.InProgress {
			ids = append(ids, s.Parent)
		}
	}
	return ids
}

// IsSplitParent reports whether id was split and committed (OpenSearch's
// isSplitParent: not active and has recorded children).
func (t *Table) IsSplitParent(id ShardID) bool {
	sp, ok := t.Split(id)
	return ok && !sp.InProgress
}

// LookupInProgress resolves like Lookup but descends one level into the
// children of an in-progress split (OpenSearch's shardWithRecoveringChild
// path, includeInProgressChild = true), or into the target of an
// in-progress merge.
func (t *Table) LookupInProgress(p Placement) ShardID {
	id := t.Lookup(p)
	if m, ok := t.MergeOf(id); ok {
		return m.Target
	}
	sp, ok := t.Split(id)
	if !ok || !sp.InProgress {
		return id
	}
	return sp.Children[searchLeaves(sp.Children, uint64(t.KeyOf(p)))].Shard
}

func cmpShard(a, b ShardID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// clone returns a deep copy of t with the next version.
func (t *Table) clone() *Table {
	n := &Table{version: t.version + 1, mode: t.mode, settings: t.settings, maxShard: t.maxShard}
	n.roots = make([][]Leaf, len(t.roots))
	for i, l := range t.roots {
		n.roots[i] = slices.Clone(l)
	}
	n.splits = make([]SplitRecord, len(t.splits))
	for i, s := range t.splits {
		s.Children = slices.Clone(s.Children)
		n.splits[i] = s
	}
	if len(t.merges) > 0 {
		n.merges = make([]MergeRecord, len(t.merges))
		for i, m := range t.merges {
			m.Sources = slices.Clone(m.Sources)
			n.merges[i] = m
		}
	}
	return n
}

// SameLayout reports whether two tables route identically and record the
// same splits and merges: OpenSearch's SplitShardsMetadata.equals, plus the mode and
// settings. Versions are not compared.
func (t *Table) SameLayout(o *Table) bool {
	if t.mode != o.mode || t.settings != o.settings || t.maxShard != o.maxShard {
		return false
	}
	if !slices.EqualFunc(t.roots, o.roots, slices.Equal) {
		return false
	}
	if !slices.EqualFunc(t.splits, o.splits, func(a, b SplitRecord) bool {
		return a.Parent == b.Parent && a.Root == b.Root && a.InProgress == b.InProgress && slices.Equal(a.Children, b.Children)
	}) {
		return false
	}
	return slices.EqualFunc(t.merges, o.merges, func(a, b MergeRecord) bool {
		return a.Target == b.Target && a.Root == b.Root && a.InProgress == b.InProgress && slices.Equal(a.Sources, b.Sources)
	})
}
