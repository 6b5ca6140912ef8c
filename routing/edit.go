package routing

import (
	"fmt"
	"slices"
)

// EditKind is the kind of a table edit.
type EditKind uint8

const (
	// BeginSplit reserves child ids and ranges for a parent (OpenSearch's
	// splitShard). Routing does not change: the children are invisible to
	// Lookup until the split commits.
	BeginSplit EditKind = iota + 1
	// CommitSplit replaces the parent by its children in its root's leaves
	// (updateSplitMetadataForChildShards). This is the publish of a split.
	CommitSplit
	// CancelSplit forgets the reservation (cancelSplit); the child ids
	// become holes that the next split reuses.
	CancelSplit
	// BeginMerge reserves a target id for two or more adjacent leaves of
	// one root (Edit.Sources). Routing does not change: the target is
	// invisible to Lookup until the merge commits.
	BeginMerge
	// CommitMerge replaces the sources by the target in their root's
	// leaves. This is the publish of a merge. Edit.Shard is the target.
	CommitMerge
	// CancelMerge forgets the reservation; the target id becomes a hole.
	CancelMerge
)

func (k EditKind) String() string {
	switch k {
	case BeginSplit:
		return "begin-split"
	case CommitSplit:
		return "commit-split"
	case CancelSplit:
		return "cancel-split"
	case BeginMerge:
		return "begin-merge"
	case CommitMerge:
		return "commit-merge"
	case CancelMerge:
		return "cancel-merge"
	}
	return fmt.Sprintf("EditKind(%d)", uint8(k))
}

// Edit is a delta to a routing table.
type Edit struct {
	Kind  EditKind
	Shard ShardID // the parent being split, or the target of a merge

	// Sources are the shards a BeginMerge merges (in any order), and, if
	// set, the sources a CommitMerge must name.
	Sources []ShardID

	// Ways is the number of equal children of a BeginSplit without Points.
	Ways int
	// Points are explicit split points of a BeginSplit: ascending keys
	// strictly inside the parent's span; child i starts at Points[i-1].
	Points []Key

	// Children are the child ids a CommitSplit publishes; they must equal
	// the ids BeginSplit reserved.
	Children []ShardID
}

func (e Edit) String() string {
	switch e.Kind {
	case BeginSplit:
		if len(e.Points) > 0 {
			return fmt.Sprintf("begin-split %d at %v", e.Shard, e.Points)
		}
		return fmt.Sprintf("begin-split %d into %d", e.Shard, e.Ways)
	case CommitSplit:
		return fmt.Sprintf("commit-split %d children %v", e.Shard, e.Children)
	case BeginMerge:
		return fmt.Sprintf("begin-merge %v", e.Sources)
	}
	return fmt.Sprintf("%s %d", e.Kind, e.Shard)
}

// Apply returns the table that results from applying e to t, with the next
// version. t is not modified. Both t and the result are validated, so an
// invalid table never escapes (the raft checkAndCopy/checkAndReturn
// pattern). Rule violations are *Error values with OpenSearch's exception
// class and message.
func Apply(t *Table, e Edit) (*Table, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("routing: apply %s to invalid table: %w", e, err)
	}
	n := t.clone()
	var err error
	switch e.Kind {
	case BeginSplit:
		err = n.beginSplit(e)
	case CommitSplit:
		err = n.commitSplit(e.Shard, e.Children)
	case CancelSplit:
		err = n.cancelSplit(e.Shard)
	case BeginMerge:
		err = n.beginMerge(e.Sources)
	case CommitMerge:
		err = n.commitMerge(e.Shard, e.Sources)
	case CancelMerge:
		err = n.cancelMerge(e.Shard)
	default:
		err = fmt.Errorf("routing: unknown edit kind %d", e.Kind)
	}
	if err != nil {
		return nil, err
	}
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("routing: %s produced an invalid table: %w", e, err)
	}
	return n, nil
}

// findLeaf returns the root and index of an active leaf.
func (t *Table) findLeaf(id ShardID) (root, idx int, ok bool) {
	for r, leaves := range t.roots {
		for i, l := range leaves {
			if l.Shard == id {
				return r, i, true
			}
		}
	}
	return 0, 0, false
}

// beginSplit reproduces SplitShardsMetadata.Builder.splitShard, in its
// check order, generalised to both modes.
func (t *Table) beginSplit(e Edit) error {
	if _, ok := t.Split(e.Shard); ok {
		return newError(IllegalArgument, "Split of shard [%d] is already in progress or completed.", e.Shard)
	}
	root, idx, ok := t.findLeaf(e.Shard)
	if !ok {
		return newError(IllegalArgument, "Shard ID doesn't exist in the current list of shard ranges")
	}
	if m, ok := t.MergeOf(e.Shard); ok {
		return newError(IllegalArgument, "Cannot split shard [%d]: it is being merged into shard [%d]", e.Shard, m.Target)
	}
	parent := t.roots[root][idx].Span
	spans, err := t.childSpans(e, parent)
	if err != nil {
		return err
	}
	ids := t.allocateChildIDs(len(spans))
	children := make([]Leaf, len(spans))
	for i := range spans {
		children[i] = Leaf{Shard: ids[i], Span: spans[i]}
	}
	rec := SplitRecord{Parent: e.Shard, Root: ShardID(root), Children: children, InProgress: true}
	i, _ := slices.BinarySearchFunc(t.splits, e.Shard, func(s SplitRecord, p ShardID) int { return cmpShard(s.Parent, p) })
	t.splits = slices.Insert(t.splits, i, rec)
	return nil
}

// minChildWidth is the narrowest child a split may create: one partition in
// ModePartition, more than 1000 hashes in ModeOpenSearch.
func (t *Table) minChildWidth() uint64 {
	if t.mode == ModeOpenSearch {
		return minHashRangeWidth + 1
	}
	return 1
}

// childSpans divides the parent's span: at explicit points, or into Ways
// equal widths with the remainder to the last child (OpenSearch's rule).
func (t *Table) childSpans(e Edit, parent Span) ([]Span, error) {
	if len(e.Points) > 0 {
		return t.spansAtPoints(e, parent)
	}
	if e.Ways == 0 {
		return nil, newError(Arithmetic, "/ by zero")
	}
	if t.mode == ModePartition && e.Ways == 1 {
		return nil, newError(IllegalArgument, "Cannot split shard [%d] into [1] shard: a split needs at least 2 children", e.Shard)
	}
	if e.Ways < 0 || parent.Width()/uint64(e.Ways) < t.minChildWidth() {
		return nil, newError(IllegalArgument, "Cannot split shard [%d] further.", e.Shard)
	}
	width := parent.Width() / uint64(e.Ways)
	spans := make([]Span, e.Ways)
	for i := range spans {
		spans[i] = Span{Start: parent.Start + uint64(i)*width, End: parent.Start + uint64(i+1)*width}
	}
	spans[len(spans)-1].End = parent.End
	return spans, nil
}

// spansAtPoints cuts the parent's span at explicit ascending points.
func (t *Table) spansAtPoints(e Edit, parent Span) ([]Span, error) {
	spans := make([]Span, 0, len(e.Points)+1)
	start := parent.Start
	for _, p := range e.Points {
		k := uint64(p)
		if k <= start || k >= parent.End {
			return nil, newError(IllegalArgument,
				"split point [%d] of shard [%d] must lie inside its range [%d, %d] and above the previous point",
				t.mode.Display(k), e.Shard, t.mode.Display(parent.Start), t.mode.Display(parent.End-1))
		}
		spans = append(spans, Span{Start: start, End: k})
		start = k
	}
	spans = append(spans, Span{Start: start, End: parent.End})
	// Split points are this prototype's extension (OpenSearch splits only
	// into equal ranges), held to the equal split's width rule. The answer
	// names the narrow child: "Cannot split shard [n] further." would say
	// the parent is too narrow for any split, which it need not be.
	for _, s := range spans {
		if s.Width() < t.minChildWidth() {
			return nil, newError(IllegalArgument,
				"Split points of shard [%d] leave the child range from %d to %d too narrow: a child must be wider than %d",
				e.Shard, t.mode.Display(s.Start), t.mode.Display(s.End)-1, t.minChildWidth()-1)
		}
	}
	return spans, nil
}

// allocateChildIDs reproduces OpenSearch's child id rule: the lowest holes
// between consumed ids first, then ids above the highest committed id,
// skipping ids reserved by in-progress splits.
//
// consumed = every unsplit root id, every split parent, every child of a
// recorded split, every source and target of a recorded merge. A hole is
// an id strictly between two neighbouring consumed ids. A merge target is
// allocated by the same rule, so a cancelled merge's target is a hole and a
// merged source is never reused.
func (t *Table) allocateChildIDs(n int) []ShardID {
	var consumed []ShardID
	for r, leaves := range t.roots {
		if len(leaves) == 1 && leaves[0].Shard == ShardID(r) {
			consumed = append(consumed, ShardID(r))
		}
	}
	reserved := map[ShardID]bool{}
	for _, s := range t.splits {
		consumed = append(consumed, s.Parent)
		for _, c := range s.Children {
			consumed = append(consumed, c.Shard)
			if s.InProgress {
				reserved[c.Shard] = true
			}
		}
	}
	for _, m := range t.merges {
		consumed = append(consumed, m.Target)
		for _, src := range m.Sources {
			consumed = append(consumed, src.Shard)
		}
		if m.InProgress {
			reserved[m.Target] = true
		}
	}
	slices.Sort(consumed)
	consumed = slices.Compact(consumed)
	// Only the lowest n holes can be used. Listing every hole would cost as
	// much as the widest gap between consumed ids, which a table decoded
	// from disk may make as wide as the id space.
	holes := make([]ShardID, 0, n)
	for i := 1; i < len(consumed) && len(holes) < n; i++ {
		for h := consumed[i-1] + 1; h < consumed[i] && len(holes) < n; h++ {
			holes = append(holes, h)
		}
	}
	ids := make([]ShardID, n)
	next := t.maxShard
	for i := range ids {
		if len(holes) > 0 {
			ids[i], holes = holes[0], holes[1:]
			next = max(next, ids[i])
		} else {
			next++
			for reserved[next] {
				next++
			}
			ids[i] = next
		}
		reserved[ids[i]] = true
	}
	return ids
}

// commitSplit reproduces updateSplitMetadataForChildShards. OpenSearch
// checks the reserved ids only with Java assertions on; we always check.
func (t *Table) commitSplit(parent ShardID, childIDs []ShardID) error {
	root, idx, ok := t.findLeaf(parent)
	if !ok {
		return newError(IllegalArgument, "Shard ID doesn't exist in the current list of shard ranges")
	}
	i, found := slices.BinarySearchFunc(t.splits, parent, func(s SplitRecord, p ShardID) int { return cmpShard(s.Parent, p) })
	if !found || !t.splits[i].InProgress {
		return newError(Assertion, "split of shard [%d] is not in progress", parent)
	}
	rec := &t.splits[i]
	if len(childIDs) != len(rec.Children) {
		return newError(Assertion, "split of shard [%d] reserved %d children, commit names %d", parent, len(rec.Children), len(childIDs))
	}
	for _, c := range rec.Children {
		if !slices.Contains(childIDs, c.Shard) {
			return newError(Assertion, "split of shard [%d] reserved child [%d], commit names %v", parent, c.Shard, childIDs)
		}
	}
	leaves := t.roots[root]
	leaves = slices.Replace(leaves, idx, idx+1, rec.Children...)
	t.roots[root] = leaves
	for _, c := range rec.Children {
		t.maxShard = max(t.maxShard, c.Shard)
	}
	rec.InProgress = false
	return nil
}

// cancelSplit reproduces cancelSplit: the reservation is forgotten and the
// table routes exactly as before the split began.
func (t *Table) cancelSplit(parent ShardID) error {
	i, found := slices.BinarySearchFunc(t.splits, parent, func(s SplitRecord, p ShardID) int { return cmpShard(s.Parent, p) })
	if !found || !t.splits[i].InProgress {
		return newError(Assertion, "split of shard [%d] is not in progress", parent)
	}
	t.splits = slices.Delete(t.splits, i, i+1)
	return nil
}

// formatIDs prints ids as OpenSearch prints a list: [1, 2, 3].
func formatIDs(ids []ShardID) string {
	var b []byte
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%d", id)
	}
	return string(append(b, ']'))
}

// beginMerge reserves a target for adjacent leaves of one root. Every
// refusal is an IllegalArgumentException naming the shards, and leaves the
// table as it was (Apply returns the input's clone only on success).
func (t *Table) beginMerge(sources []ShardID) error {
	ids := formatIDs(sources)
	if len(sources) < 2 {
		return newError(IllegalArgument, "Cannot merge shards %s: a merge needs at least 2 shards", ids)
	}
	root := -1
	idxs := make([]int, 0, len(sources))
	for i, id := range sources {
		if slices.Contains(sources[:i], id) {
			return newError(IllegalArgument, "Cannot merge shards %s: shard [%d] is named twice", ids, id)
		}
		r, idx, ok := t.findLeaf(id)
		if !ok {
			return newError(IllegalArgument, "Cannot merge shards %s: shard [%d] doesn't exist in the current list of shard ranges", ids, id)
		}
		if root >= 0 && r != root {
			return newError(IllegalArgument, "Cannot merge shards %s: shard [%d] belongs to root [%d], shard [%d] to root [%d]",
				ids, sources[0], root, id, r)
		}
		root = r
		idxs = append(idxs, idx)
	}
	for _, id := range sources {
		if sp, ok := t.Split(id); ok && sp.InProgress {
			return newError(IllegalArgument, "Cannot merge shards %s: split of shard [%d] is already in progress", ids, id)
		}
		if m, ok := t.MergeOf(id); ok {
			return newError(IllegalArgument, "Cannot merge shards %s: shard [%d] is already being merged into shard [%d]", ids, id, m.Target)
		}
	}
	slices.Sort(idxs)
	for i := 1; i < len(idxs); i++ {
		if idxs[i] != idxs[i-1]+1 {
			return newError(IllegalArgument, "Cannot merge shards %s: shard ranges are not adjacent", ids)
		}
	}
	leaves := t.roots[root][idxs[0] : idxs[len(idxs)-1]+1]
	rec := MergeRecord{Target: t.allocateChildIDs(1)[0], Root: ShardID(root), Sources: slices.Clone(leaves), InProgress: true}
	i, _ := slices.BinarySearchFunc(t.merges, rec.Target, func(m MergeRecord, id ShardID) int { return cmpShard(m.Target, id) })
	t.merges = slices.Insert(t.merges, i, rec)
	return nil
}

// commitMerge replaces the sources by the target in their root's leaves.
// If sources is not empty it must name exactly the reserved sources.
func (t *Table) commitMerge(target ShardID, sources []ShardID) error {
	i, found := slices.BinarySearchFunc(t.merges, target, func(m MergeRecord, id ShardID) int { return cmpShard(m.Target, id) })
	if !found || !t.merges[i].InProgress {
		return newError(Assertion, "merge into shard [%d] is not in progress", target)
	}
	rec := &t.merges[i]
	if len(sources) > 0 {
		got := slices.Sorted(slices.Values(sources))
		want := slices.Sorted(slices.Values(rec.SourceIDs()))
		if !slices.Equal(got, want) {
			return newError(Assertion, "merge into shard [%d] reserved sources %s, commit names %s", target, formatIDs(want), formatIDs(sources))
		}
	}
	_, idx, ok := t.findLeaf(rec.Sources[0].Shard)
	if !ok {
		return newError(Assertion, "merge into shard [%d]: source [%d] is not active", target, rec.Sources[0].Shard)
	}
	t.roots[rec.Root] = slices.Replace(t.roots[rec.Root], idx, idx+len(rec.Sources), Leaf{Shard: target, Span: rec.Span()})
	t.maxShard = max(t.maxShard, target)
	rec.InProgress = false
	return nil
}

// cancelMerge forgets an in-progress merge: the table routes exactly as
// before it began.
func (t *Table) cancelMerge(target ShardID) error {
	i, found := slices.BinarySearchFunc(t.merges, target, func(m MergeRecord, id ShardID) int { return cmpShard(m.Target, id) })
	if !found || !t.merges[i].InProgress {
		return newError(Assertion, "merge into shard [%d] is not in progress", target)
	}
	t.merges = slices.Delete(t.merges, i, i+1)
	return nil
}
