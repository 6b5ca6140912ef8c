package routing

import (
	"fmt"
	"slices"
)

// Validate checks the table's invariants (INV-1..INV-5m on Table). It is
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
	merging := map[ShardID]bool{}
	for i, m := range t.merges {
		if i > 0 && t.merges[i-1].Target >= m.Target {
			return fmt.Errorf("routing: table v%d: merge records not ascending at target %d", t.version, m.Target)
		}
		if err := t.validateMerge(m, active); err != nil {
			return fmt.Errorf("routing: table v%d merge into %d: %w", t.version, m.Target, err)
		}
		if m.InProgress {
			for _, s := range m.Sources {
				if merging[s.Shard] {
					return fmt.Errorf("routing: table v%d: shard %d is a source of two merges", t.version, s.Shard)
				}
				merging[s.Shard] = true
			}
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

// validateTree checks that the split and merge records form the history
// Apply builds, so that a decoded table is one some sequence of edits could
// have made:
//
//   - replaying the committed records from each root (a split replaces its
//     parent by its children, which cover exactly the parent's span; a
//     merge replaces adjacent sources of its root by its target) reaches
//     exactly the root's leaves, in order, with the same spans;
//   - every committed record is replayed, and names the root it is
//     replayed in;
//   - no id is a root, a child or a merge target twice (so ids are never
//     reused, INV-5, and each record is replayed once);
//   - the max shard id is the highest committed id, and no id exceeds
//     maxShardID.
//
// Records are replayed in any order in which their inputs exist: each id
// is produced once and consumed at most once, so every such order gives the
// same leaves. The per-record checks of validateSplit and validateMerge run
// first and give the more specific messages; this catches what they cannot
// see one record at a time.
func (t *Table) validateTree() error {
	if t.maxShard > maxShardID {
		return fmt.Errorf("max shard id %d exceeds %d", t.maxShard, maxShardID)
	}
	seen := make(map[ShardID]bool, len(t.roots))
	for r := range t.roots {
		seen[ShardID(r)] = true
	}
	produce := func(what string, id ShardID) error {
		if id > maxShardID {
			return fmt.Errorf("%s: id %d exceeds %d", what, id, maxShardID)
		}
		if seen[id] {
			return fmt.Errorf("%s: id %d is already a root, a child or a merge target", what, id)
		}
		seen[id] = true
		return nil
	}
	for _, s := range t.splits {
		for _, c := range s.Children {
			if err := produce(fmt.Sprintf("split of %d", s.Parent), c.Shard); err != nil {
				return err
			}
		}
	}
	for _, m := range t.merges {
		if err := produce(fmt.Sprintf("merge into %d", m.Target), m.Target); err != nil {
			return err
		}
	}
	frontier := make([][]Leaf, len(t.roots))
	rootOf := make(map[ShardID]int, len(t.roots))
	for r := range t.roots {
		frontier[r] = []Leaf{{Shard: ShardID(r), Span: t.RootSpan(ShardID(r))}}
		rootOf[ShardID(r)] = r
	}
	indexOf := func(r int, id ShardID) int {
		return slices.IndexFunc(frontier[r], func(l Leaf) bool { return l.Shard == id })
	}
	maxCommitted := ShardID(len(t.roots) - 1)
	splitDone := make([]bool, len(t.splits))
	mergeDone := make([]bool, len(t.merges))
	pending := 0
	for _, s := range t.splits {
		if !s.InProgress {
			pending++
		}
	}
	for _, m := range t.merges {
		if !m.InProgress {
			pending++
		}
	}
	for progress := true; progress && pending > 0; {
		progress = false
		for i, s := range t.splits {
			if s.InProgress || splitDone[i] {
				continue
			}
			r, ok := rootOf[s.Parent]
			if !ok {
				continue
			}
			if s.Root != ShardID(r) {
				return fmt.Errorf("split of %d names root %d, its parent descends from root %d", s.Parent, s.Root, r)
			}
			idx := indexOf(r, s.Parent)
			n := frontier[r][idx]
			if cover := (Span{Start: s.Children[0].Span.Start, End: s.Children[len(s.Children)-1].Span.End}); cover != n.Span {
				return fmt.Errorf("split of %d: children cover %s, parent owns %s", s.Parent, cover, n.Span)
			}
			frontier[r] = slices.Replace(frontier[r], idx, idx+1, s.Children...)
			delete(rootOf, s.Parent)
			for _, c := range s.Children {
				rootOf[c.Shard] = r
				maxCommitted = max(maxCommitted, c.Shard)
			}
			splitDone[i], progress = true, true
			pending--
		}
		for i, m := range t.merges {
			if m.InProgress || mergeDone[i] {
				continue
			}
			ready := true
			for _, src := range m.Sources {
				if r, ok := rootOf[src.Shard]; !ok {
					ready = false
				} else if ShardID(r) != m.Root {
					return fmt.Errorf("merge into %d names root %d, its source %d descends from root %d", m.Target, m.Root, src.Shard, r)
				}
			}
			if !ready {
				continue
			}
			r := int(m.Root)
			idx := indexOf(r, m.Sources[0].Shard)
			if idx+len(m.Sources) > len(frontier[r]) || !slices.Equal(frontier[r][idx:idx+len(m.Sources)], m.Sources) {
				return fmt.Errorf("merge into %d: sources %v are not adjacent leaves of root %d", m.Target, m.SourceIDs(), r)
			}
			frontier[r] = slices.Replace(frontier[r], idx, idx+len(m.Sources), Leaf{Shard: m.Target, Span: m.Span()})
			for _, src := range m.Sources {
				delete(rootOf, src.Shard)
			}
			rootOf[m.Target] = r
			maxCommitted = max(maxCommitted, m.Target)
			mergeDone[i], progress = true, true
			pending--
		}
	}
	if pending > 0 {
		return fmt.Errorf("%d committed split or merge records descend from no root", pending)
	}
	for r, leaves := range t.roots {
		if !slices.Equal(frontier[r], leaves) {
			return fmt.Errorf("root %d: leaves %v, its split and merge records give %v", r, leaves, frontier[r])
		}
	}
	if t.maxShard != maxCommitted {
		return fmt.Errorf("max shard id %d, the highest committed id is %d", t.maxShard, maxCommitted)
	}
	return nil
}

// validateMerge checks INV-5m for one merge record.
func (t *Table) validateMerge(m MergeRecord, active map[ShardID]bool) error {
	if int(m.Root) >= len(t.roots) {
		return fmt.Errorf("root %d out of range", m.Root)
	}
	if len(m.Sources) < 2 {
		return fmt.Errorf("%d sources, a merge needs at least 2", len(m.Sources))
	}
	span := m.Span()
	if root := t.RootSpan(m.Root); span.Start < root.Start || span.End > root.End {
		return fmt.Errorf("sources cover %s outside root %d's span %s", span, m.Root, root)
	}
	if err := validateTiling(t.mode, m.Target, span, m.Sources); err != nil {
		return err
	}
	if !m.InProgress {
		for _, s := range m.Sources {
			if active[s.Shard] {
				return fmt.Errorf("committed source %d is still active", s.Shard)
			}
		}
		return nil
	}
	if active[m.Target] {
		return fmt.Errorf("in-progress target is active")
	}
	root, idx, ok := t.findLeaf(m.Sources[0].Shard)
	if !ok || ShardID(root) != m.Root {
		return fmt.Errorf("in-progress source %d is not a leaf of root %d", m.Sources[0].Shard, m.Root)
	}
	leaves := t.roots[root]
	if idx+len(m.Sources) > len(leaves) || !slices.Equal(leaves[idx:idx+len(m.Sources)], m.Sources) {
		return fmt.Errorf("in-progress sources %v are not adjacent leaves of root %d", m.SourceIDs(), m.Root)
	}
	for _, s := range m.Sources {
		if sp, ok := t.Split(s.Shard); ok && sp.InProgress {
			return fmt.Errorf("in-progress source %d is also splitting", s.Shard)
		}
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
