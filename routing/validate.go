package routing

import (
	"fmt"
	"slices"
)

// Validate checks the table's invariants (INV-1..INV-5 on Table). It is
// cheap, so it is always on: Apply runs it on its input and its output, and
// Decode on what it decoded.
func (t *Table) Validate() error {
	if t.version < 1 {
		return fmt.Errorf("routing: table version %d: versions start at 1", t.version)
	}
	if err := t.settings.Validate("index"); err != nil {
		return fmt.Errorf("routing: table v%d settings: %w", t.version, err)
	}
	if len(t.roots) != t.settings.Shards {
		return fmt.Errorf("routing: table v%d has %d roots, settings say %d", t.version, len(t.roots), t.settings.Shards)
	}
	active := map[ShardID]bool{}
	for r, leaves := range t.roots {
		if err := validateTiling(t.mode, ShardID(r), t.RootSpan(ShardID(r)), leaves); err != nil {
			return fmt.Errorf("routing: table v%d root %d: %w", t.version, r, err)
		}
		for _, l := range leaves {
			if active[l.Shard] {
				return fmt.Errorf("routing: table v%d: shard %d is a leaf twice", t.version, l.Shard)
			}
			active[l.Shard] = true
			if l.Shard > t.maxShard {
				return fmt.Errorf("routing: table v%d: active shard %d above max shard id %d", t.version, l.Shard, t.maxShard)
			}
		}
	}
	for i, s := range t.splits {
		if i > 0 && t.splits[i-1].Parent >= s.Parent {
			return fmt.Errorf("routing: table v%d: split records not ascending at parent %d", t.version, s.Parent)
		}
		if err := t.validateSplit(s, active); err != nil {
			return fmt.Errorf("routing: table v%d split of %d: %w", t.version, s.Parent, err)
		}
	}
	if err := t.validateTree(); err != nil {
		return fmt.Errorf("routing: table v%d: %w", t.version, err)
	}
	return nil
}

// maxShardID is the highest shard id a table may hold: OpenSearch's shard
// ids are Java ints.
const maxShardID = 1<<31 - 1

// validateTree checks that the split records form the forest Apply builds,
// so that a decoded table is one some sequence of edits could have made:
//
//   - walking down from each root through its committed splits reaches
//     exactly the root's leaves, in order, with the same spans;
//   - every split record is reached, names the root it is reached from, and
//     its children cover exactly the span of the node it splits;
//   - no id is a root and a child, or a child twice (so child ids are never
//     reused, INV-5, and the walk visits each record once);
//   - the max shard id is the highest committed id, and no id exceeds
//     maxShardID.
//
// The per-record checks of validateSplit run first and give the more
// specific messages; this catches what they cannot see one record at a time.
func (t *Table) validateTree() error {
	if t.maxShard > maxShardID {
		return fmt.Errorf("max shard id %d exceeds %d", t.maxShard, maxShardID)
	}
	recs := make(map[ShardID]int, len(t.splits)) // parent -> index in t.splits
	for i, s := range t.splits {
		recs[s.Parent] = i
	}
	seen := make(map[ShardID]bool, len(t.roots))
	for r := range t.roots {
		seen[ShardID(r)] = true
	}
	visited, maxCommitted := 0, ShardID(len(t.roots)-1)
	var stack, want []Leaf
	for r, leaves := range t.roots {
		want = want[:0]
		stack = append(stack[:0], Leaf{Shard: ShardID(r), Span: t.RootSpan(ShardID(r))})
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			i, split := recs[n.Shard]
			if !split {
				want = append(want, n)
				continue
			}
			s := t.splits[i]
			visited++
			if s.Root != ShardID(r) {
				return fmt.Errorf("split of %d names root %d, its parent descends from root %d", s.Parent, s.Root, r)
			}
			if cover := (Span{Start: s.Children[0].Span.Start, End: s.Children[len(s.Children)-1].Span.End}); cover != n.Span {
				return fmt.Errorf("split of %d: children cover %s, parent owns %s", s.Parent, cover, n.Span)
			}
			for _, c := range s.Children {
				if c.Shard > maxShardID {
					return fmt.Errorf("split of %d: child id %d exceeds %d", s.Parent, c.Shard, maxShardID)
				}
				if seen[c.Shard] {
					return fmt.Errorf("split of %d: child id %d is already a root or a child", s.Parent, c.Shard)
				}
				seen[c.Shard] = true
			}
			if s.InProgress {
				want = append(want, n) // the parent serves until the commit
				continue
			}
			for j := len(s.Children) - 1; j >= 0; j-- { // pop in ascending order
				stack = append(stack, s.Children[j])
				maxCommitted = max(maxCommitted, s.Children[j].Shard)
			}
		}
		if !slices.Equal(want, leaves) {
			return fmt.Errorf("root %d: leaves %v, its split records give %v", r, leaves, want)
		}
	}
	if visited != len(t.splits) {
		return fmt.Errorf("%d split records descend from no root", len(t.splits)-visited)
	}
	if t.maxShard != maxCommitted {
		return fmt.Errorf("max shard id %d, the highest committed id is %d", t.maxShard, maxCommitted)
	}
	return nil
}

// validateSplit checks INV-4 and INV-5 for one split record.
func (t *Table) validateSplit(s SplitRecord, active map[ShardID]bool) error {
	if int(s.Root) >= len(t.roots) {
		return fmt.Errorf("root %d out of range", s.Root)
	}
	if len(s.Children) == 0 {
		return fmt.Errorf("no children")
	}
	parent := Span{Start: s.Children[0].Span.Start, End: s.Children[len(s.Children)-1].Span.End}
	if root := t.RootSpan(s.Root); parent.Start < root.Start || parent.End > root.End {
		return fmt.Errorf("children cover %s outside root %d's span %s", parent, s.Root, root)
	}
	if err := validateTiling(t.mode, s.Parent, parent, s.Children); err != nil {
		return err
	}
	if !s.InProgress {
		if active[s.Parent] {
			return fmt.Errorf("committed parent is still active")
		}
		return nil
	}
	if !active[s.Parent] {
		return fmt.Errorf("in-progress parent is not active")
	}
	// NB: the record's root comes from the encoding, so it may name a root
	// other than the one the parent is a leaf of; indexing that root's
	// leaves with the parent's index would run off its end.
	root, idx, _ := t.findLeaf(s.Parent)
	if ShardID(root) != s.Root {
		return fmt.Errorf("in-progress parent is a leaf of root %d, the record names root %d", root, s.Root)
	}
	if got := t.roots[root][idx].Span; got != parent {
		return fmt.Errorf("children cover %s, parent owns %s", parent, got)
	}
	for _, c := range s.Children {
		if active[c.Shard] {
			return fmt.Errorf("in-progress child %d is active", c.Shard)
		}
	}
	return nil
}

// validateTiling checks that leaves tile span exactly, with OpenSearch's
// validateShardRanges messages (bounds shown inclusive, in display units).
func validateTiling(m Mode, shard ShardID, span Span, leaves []Leaf) error {
	if len(leaves) == 0 {
		return newError(IllegalArgument, "No shard range defined for child shards of shard %d", shard)
	}
	d := m.Display
	minWidth := uint64(1)
	if m == ModeOpenSearch {
		minWidth = minHashRangeWidth
	}
	next := span.Start
	for i, l := range leaves {
		switch {
		case i == 0 && l.Span.Start != span.Start:
			return newError(IllegalArgument, "Shard range from %d to %d is missing from the list of shard ranges",
				d(span.Start), d(l.Span.Start)-1)
		case l.Span.Start < next:
			return newError(IllegalArgument, "Shard range overlaps from %d to %d", d(l.Span.Start), d(next)-1)
		case l.Span.Start > next:
			return newError(IllegalArgument, "Shard range from %d to %d is missing from the list of shard ranges",
				d(next), d(l.Span.Start)-1)
		}
		if l.Span.End <= l.Span.Start || l.Span.Width() < minWidth {
			return newError(IllegalArgument, "Shard range from %d to %d is below shard range threshold of %d",
				d(l.Span.Start), d(l.Span.End)-1, minWidth)
		}
		next = l.Span.End
	}
	if next != span.End {
		return newError(IllegalArgument, "Shard range from %d to %d is missing from the list of shard ranges",
			d(next), d(span.End)-1)
	}
	return nil
}
