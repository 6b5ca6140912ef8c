package routing

import "fmt"

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
	_, idx, _ := t.findLeaf(s.Parent)
	if got := t.roots[s.Root][idx].Span; got != parent {
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
