package routing

// Property tests of the routing table against naive models (the quorum
// quick_test pattern of etcd-raft), with pgregory.net/rapid.

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// genSettings draws index settings whose routing factor is at least 2.
func genSettings(t *rapid.T) Settings {
	shards := rapid.IntRange(1, 16).Draw(t, "shards")
	factor := rapid.SampledFrom([]int{2, 3, 4, 6, 8, 16, 64, 128}).Draw(t, "factor")
	return Settings{Shards: shards, RoutingShards: shards * factor, PartitionSize: 1}
}

// TestPropUnsplitAgreesWithFormula: on an unsplit table every partition of
// every root routes to partition / factor, in both modes, and every hash to
// its root in opensearch mode.
func TestPropUnsplitAgreesWithFormula(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genSettings(t)
		for _, mode := range []Mode{ModePartition, ModeOpenSearch} {
			tab, err := NewTable(mode, s)
			if err != nil {
				t.Fatal(err)
			}
			for slot := range s.RoutingShards {
				p := Placement{Partition: uint32(slot), Root: ShardID(slot / s.Factor()), Sum: int32(slot)}
				if got, want := tab.Lookup(p), ShardID(slot/s.Factor()); got != want {
					t.Fatalf("%s: Lookup(slot %d) = %d, want %d", mode, slot, got, want)
				}
			}
			id := rapid.StringN(1, 40, -1).Draw(t, "id")
			p, got := tab.Route(id, "")
			if got != p.Root || p.Root != ShardID(uint32(floorMod(Hash(id), int32(s.RoutingShards)))/uint32(s.Factor())) {
				t.Fatalf("%s: Route(%q) = %d, placement %+v", mode, id, got, p)
			}
		}
	})
}

// TestPropMidpointSplitEqualsNewIndexSplit: splitting every root in
// partition mode at its factor midpoint places every document exactly where
// new-index _split x2 would. The ids differ: child k (k = 0, 1, ascending
// range) of root r is target shard 2r+k of the new index.
func TestPropMidpointSplitEqualsNewIndexSplit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genSettings(t)
		if s.Factor()%2 != 0 {
			s.RoutingShards *= 2
		}
		if p := rapid.SampledFrom([]int{1, 1, 2, 3}).Draw(t, "partition"); p < s.RoutingShards {
			s.PartitionSize = p
		}
		tab, err := NewTable(ModePartition, s)
		if err != nil {
			t.Fatal(err)
		}
		for r := range s.Shards {
			tab = mustSplitCommit(t, tab, Edit{Kind: BeginSplit, Shard: ShardID(r), Ways: 2})
		}
		target := Settings{Shards: 2 * s.Shards, RoutingShards: s.RoutingShards, PartitionSize: s.PartitionSize}
		if _, err := SelectSplitShard(0, s, target.Shards); err != nil {
			t.Fatalf("new-index split x2 of %+v is invalid: %v", s, err)
		}
		// renaming: child id -> new-index target shard.
		rename := map[ShardID]ShardID{}
		for r := range s.Shards {
			for k, l := range tab.Leaves(ShardID(r)) {
				rename[l.Shard] = ShardID(2*r + k)
			}
		}
		for range 50 {
			id := rapid.StringN(1, 30, -1).Draw(t, "id")
			routing := rapid.SampledFrom([]string{"", "", "tenant-1", "tenant-7"}).Draw(t, "routing")
			_, got := tab.Route(id, routing)
			want := target.Place(id, routing).Root
			if rename[got] != want {
				t.Fatalf("Route(%q, %q) = shard %d (new-index %d), _split x2 puts it on %d", id, routing, got, rename[got], want)
			}
		}
	})
}

func mustSplitCommit(t *rapid.T, tab *Table, e Edit) *Table {
	next, err := Apply(tab, e)
	if err != nil {
		t.Fatalf("%s: %v", e, err)
	}
	sp, _ := next.Split(e.Shard)
	next, err = Apply(next, Edit{Kind: CommitSplit, Shard: e.Shard, Children: childIDs(sp)})
	if err != nil {
		t.Fatalf("commit %d: %v", e.Shard, err)
	}
	return next
}

func childIDs(sp SplitRecord) []ShardID {
	ids := make([]ShardID, len(sp.Children))
	for i, c := range sp.Children {
		ids[i] = c.Shard
	}
	return ids
}

// model is the naive routing model: for each root, the owner of each
// sampled key, updated by hand on commit.
type model struct {
	keys   [][]uint64  // per root, the keys checked
	owners [][]ShardID // per root, the owner of each key
}

func newModel(tab *Table, t *rapid.T) *model {
	m := &model{}
	for r := range tab.Settings().Shards {
		span := tab.RootSpan(ShardID(r))
		var keys []uint64
		if span.Width() <= 4096 {
			for k := span.Start; k < span.End; k++ {
				keys = append(keys, k)
			}
		} else {
			keys = append(keys, span.Start, span.End-1)
			for range 200 {
				keys = append(keys, rapid.Uint64Range(span.Start, span.End-1).Draw(t, "key"))
			}
		}
		owners := make([]ShardID, len(keys))
		for i := range owners {
			owners[i] = ShardID(r)
		}
		m.keys = append(m.keys, keys)
		m.owners = append(m.owners, owners)
	}
	return m
}

func (m *model) commit(sp SplitRecord) {
	for i, k := range m.keys[sp.Root] {
		for _, c := range sp.Children {
			if c.Span.Start <= k && k < c.Span.End {
				m.owners[sp.Root][i] = c.Shard
			}
		}
	}
}

func (m *model) commitMerge(mr MergeRecord) {
	span := mr.Span()
	for i, k := range m.keys[mr.Root] {
		if span.Start <= k && k < span.End {
			m.owners[mr.Root][i] = mr.Target
		}
	}
}

func (m *model) check(t *rapid.T, tab *Table) {
	for r, keys := range m.keys {
		for i, k := range keys {
			leaves := tab.Leaves(ShardID(r))
			if got := leaves[searchLeaves(leaves, k)].Shard; got != m.owners[r][i] {
				t.Fatalf("v%d root %d key %d: table says %d, model %d", tab.Version(), r, k, got, m.owners[r][i])
			}
		}
	}
}

// TestPropRandomEdits drives random splits and merges, commits, cancels
// and bad commits, and after each checks Validate, the naive model, the encodings,
// and OpenSearch's id properties (PROP-01 of the split-metadata vectors).
func TestPropRandomEdits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]Mode{ModePartition, ModeOpenSearch}).Draw(t, "mode")
		tab, err := NewTable(mode, genSettings(t))
		if err != nil {
			t.Fatal(err)
		}
		m := newModel(tab, t)
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for range steps {
			tab = randomEdit(t, tab, m)
			if err := tab.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			m.check(t, tab)
			checkRoundTrips(t, tab)
		}
	})
}

func randomEdit(t *rapid.T, tab *Table, m *model) *Table {
	inProgress := tab.InProgress()
	kind := rapid.IntRange(0, 6).Draw(t, "kind")
	if kind >= 4 {
		return randomMergeEdit(t, tab, m, kind)
	}
	if len(inProgress) == 0 {
		kind = 0
	}
	switch kind {
	case 0:
		return randomBegin(t, tab)
	case 1:
		parent := rapid.SampledFrom(inProgress).Draw(t, "commit")
		sp, _ := tab.Split(parent)
		next, err := Apply(tab, Edit{Kind: CommitSplit, Shard: parent, Children: childIDs(sp)})
		if err != nil {
			t.Fatalf("commit %d: %v", parent, err)
		}
		want := slices.DeleteFunc(tab.ActiveShards(), func(id ShardID) bool { return id == parent })
		want = append(want, childIDs(sp)...)
		slices.Sort(want)
		if got := next.ActiveShards(); !slices.Equal(got, want) {
			t.Fatalf("active after commit = %v, want %v", got, want)
		}
		m.commit(sp)
		return next
	case 2:
		parent := rapid.SampledFrom(inProgress).Draw(t, "cancel")
		next, err := Apply(tab, Edit{Kind: CancelSplit, Shard: parent})
		if err != nil {
			t.Fatalf("cancel %d: %v", parent, err)
		}
		if slices.Contains(next.InProgress(), parent) || !slices.Equal(next.ActiveShards(), tab.ActiveShards()) {
			t.Fatalf("cancel %d: in progress %v, active %v", parent, next.InProgress(), next.ActiveShards())
		}
		return next
	default:
		parent := rapid.SampledFrom(inProgress).Draw(t, "bad-commit")
		sp, _ := tab.Split(parent)
		wrong := append(childIDs(sp)[1:], tab.MaxShardID()+1000)
		if _, err := Apply(tab, Edit{Kind: CommitSplit, Shard: parent, Children: wrong}); ExceptionOf(err) != Assertion {
			t.Fatalf("commit of %d with ids %v = %v, want AssertionError", parent, wrong, err)
		}
		return tab
	}
}

// randomMergeEdit begins a merge of a random run of adjacent leaves (kind
// 4), or commits (5) or cancels (6) an in-progress merge, checking what
// each does to the active shards, the reserved id and the model.
func randomMergeEdit(t *rapid.T, tab *Table, m *model, kind int) *Table {
	merging := tab.MergesInProgress()
	if len(merging) == 0 {
		kind = 4
	}
	switch kind {
	case 4:
		root := ShardID(rapid.IntRange(0, tab.Settings().Shards-1).Draw(t, "merge-root"))
		leaves := tab.Leaves(root)
		if len(leaves) < 2 {
			return tab
		}
		i := rapid.IntRange(0, len(leaves)-2).Draw(t, "merge-first")
		n := rapid.IntRange(2, min(4, len(leaves)-i)).Draw(t, "merge-n")
		var sources []ShardID
		for _, l := range leaves[i : i+n] {
			sources = append(sources, l.Shard)
		}
		rapid.Permutation(sources).Draw(t, "merge-order")
		next, err := Apply(tab, Edit{Kind: BeginMerge, Sources: sources})
		if err != nil {
			// A source already splitting or merging: an allowed refusal.
			if ExceptionOf(err) != IllegalArgument {
				t.Fatalf("begin-merge %v: %v", sources, err)
			}
			return tab
		}
		if !slices.Equal(next.ActiveShards(), tab.ActiveShards()) {
			t.Fatalf("begin-merge changed the active shards: %v -> %v", tab.ActiveShards(), next.ActiveShards())
		}
		mr, ok := next.MergeOf(sources[0])
		if !ok {
			t.Fatalf("begin-merge %v: no merge record", sources)
		}
		if usedIDs(tab)[mr.Target] {
			t.Fatalf("merge target %d reuses an id the table records", mr.Target)
		}
		if back, err := Apply(next, Edit{Kind: CancelMerge, Shard: mr.Target}); err != nil || !back.SameLayout(tab) {
			t.Fatalf("cancel after begin-merge does not restore the table: %v", err)
		}
		// A second merge of any of the sources is refused, naming them.
		if _, err := Apply(next, Edit{Kind: BeginMerge, Sources: sources}); ExceptionOf(err) != IllegalArgument {
			t.Fatalf("second begin-merge %v = %v, want IllegalArgumentException", sources, err)
		}
		return next
	case 5:
		target := rapid.SampledFrom(merging).Draw(t, "commit-merge")
		mr, _ := tab.Merge(target)
		next, err := Apply(tab, Edit{Kind: CommitMerge, Shard: target, Sources: mr.SourceIDs()})
		if err != nil {
			t.Fatalf("commit-merge %d: %v", target, err)
		}
		want := slices.DeleteFunc(tab.ActiveShards(), func(id ShardID) bool { return slices.Contains(mr.SourceIDs(), id) })
		want = append(want, target)
		slices.Sort(want)
		if got := next.ActiveShards(); !slices.Equal(got, want) {
			t.Fatalf("active after commit-merge = %v, want %v", got, want)
		}
		m.commitMerge(mr)
		return next
	default:
		target := rapid.SampledFrom(merging).Draw(t, "cancel-merge")
		next, err := Apply(tab, Edit{Kind: CancelMerge, Shard: target})
		if err != nil {
			t.Fatalf("cancel-merge %d: %v", target, err)
		}
		if !slices.Equal(next.ActiveShards(), tab.ActiveShards()) {
			t.Fatalf("cancel-merge %d changed the active shards", target)
		}
		return next
	}
}

// usedIDs returns every id a table records: roots, split parents and
// children, merge sources and targets.
func usedIDs(tab *Table) map[ShardID]bool {
	used := map[ShardID]bool{}
	for r := range tab.Settings().Shards {
		used[ShardID(r)] = true
	}
	for _, sp := range tab.Splits() {
		used[sp.Parent] = true
		for _, c := range sp.Children {
			used[c.Shard] = true
		}
	}
	for _, m := range tab.Merges() {
		used[m.Target] = true
		for _, src := range m.Sources {
			used[src.Shard] = true
		}
	}
	return used
}

func spansEqual(a, b SplitRecord) bool {
	return slices.EqualFunc(a.Children, b.Children, func(x, y Leaf) bool { return x.Span == y.Span })
}

func randomBegin(t *rapid.T, tab *Table) *Table {
	active := tab.ActiveShards()
	parent := rapid.SampledFrom(active).Draw(t, "split")
	e := Edit{Kind: BeginSplit, Shard: parent, Ways: rapid.IntRange(2, 5).Draw(t, "ways")}
	if o, _ := tab.Shard(parent); rapid.Bool().Draw(t, "points") && o.Span.Width() > 2 {
		p := rapid.Uint64Range(o.Span.Start+1, o.Span.End-1).Draw(t, "point")
		e = Edit{Kind: BeginSplit, Shard: parent, Points: []Key{Key(p)}}
	}
	next, err := Apply(tab, e)
	if err != nil {
		// Too narrow or already split: allowed refusals, table unchanged.
		if ExceptionOf(err) != IllegalArgument {
			t.Fatalf("%s: %v", e, err)
		}
		return tab
	}
	sp, _ := next.Split(parent)
	if !slices.Equal(next.ActiveShards(), active) {
		t.Fatalf("begin-split changed the active shards: %v -> %v", active, next.ActiveShards())
	}
	for _, id := range childIDs(sp) {
		if slices.Contains(active, id) || slices.Contains(tab.InProgress(), id) || id == parent {
			t.Fatalf("child id %d of %d collides with an active shard or in-progress parent", id, parent)
		}
	}
	if next.Version() != tab.Version()+1 {
		t.Fatalf("version %d after %d", next.Version(), tab.Version())
	}
	// Cancel restores exactly the pre-split table, and a re-split then
	// reserves the same ids.
	back, err := Apply(next, Edit{Kind: CancelSplit, Shard: parent})
	if err != nil || !back.SameLayout(tab) {
		t.Fatalf("cancel after begin does not restore the table: %v", err)
	}
	if again, err := Apply(back, e); err != nil || !again.SameLayout(next) {
		t.Fatalf("re-split after cancel differs from the first split: %v", err)
	}
	return next
}

func checkRoundTrips(t *rapid.T, tab *Table) {
	dec, err := Decode(tab.Encode())
	if err != nil || !dec.SameLayout(tab) || dec.Version() != tab.Version() {
		t.Fatalf("Decode(Encode) = %v", err)
	}
	if len(tab.Merges()) > 0 {
		return // OpenSearch's split metadata cannot express a merge (DESIGN.md)
	}
	if back, err := ParseXContent(tab.Mode(), tab.Settings(), tab.Version(), tab.MarshalXContent()); err != nil || !back.SameLayout(tab) {
		t.Fatalf("xcontent round trip: %v\n%s", err, tab.MarshalXContent())
	}
	if back, err := UnmarshalStream(tab.Mode(), tab.Settings(), tab.Version(), tab.MarshalStream()); err != nil || !back.SameLayout(tab) {
		t.Fatalf("stream round trip: %v", err)
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	tab, _ := NewTable(ModePartition, Settings{Shards: 4, RoutingShards: 64, PartitionSize: 1})
	tab, _ = Apply(tab, Edit{Kind: BeginSplit, Shard: 1, Ways: 2})
	enc := tab.Encode()
	for cut := range len(enc) {
		if _, err := Decode(enc[:cut]); err == nil {
			t.Fatalf("Decode of %d of %d bytes succeeded", cut, len(enc))
		}
	}
	for i := range enc {
		bad := slices.Clone(enc)
		bad[i] ^= 0x40
		if _, err := Decode(bad); err == nil {
			t.Fatalf("Decode with byte %d flipped succeeded", i)
		}
	}
	if _, err := Decode(enc); err != nil {
		t.Fatalf("Decode(intact) = %v", err)
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts re-encodes to
// the same bytes and validates.
func FuzzDecode(f *testing.F) {
	tab, _ := NewTable(ModeOpenSearch, Settings{Shards: 2, RoutingShards: 1024, PartitionSize: 1})
	f.Add(tab.Encode())
	tab, _ = Apply(tab, Edit{Kind: BeginSplit, Shard: 0, Ways: 3})
	f.Add(tab.Encode())
	f.Add([]byte("SSRT"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(data)
		if err != nil {
			return
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("Decode accepted an invalid table: %v", err)
		}
		if re := got.Encode(); string(re) != string(data) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// TestSplitPropertyPROP02 replays the fork's testGenerateSearchShardIdSplit
// (PROP-02): 8 shards, R 1024, shard 5 split into 2 (in progress); for ids
// DOC_0..DOC_1999, routing without the in-progress flag is unchanged, and
// with it every document of shard 5 goes to one of the two children.
func TestSplitPropertyPROP02(t *testing.T) {
	tab, _ := NewTable(ModeOpenSearch, Settings{Shards: 8, RoutingShards: 1024, PartitionSize: 1})
	split, err := Apply(tab, Edit{Kind: BeginSplit, Shard: 5, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := split.Split(5)
	if got := fmt.Sprint(rangeTriples(ModeOpenSearch.rangesOf(sp.Children))); got != "[[8 -2147483648 -1] [9 0 2147483647]]" {
		t.Fatalf("children %s", got)
	}
	perChild := map[ShardID]int{}
	on5 := 0
	for i := range 2000 {
		id := fmt.Sprintf("DOC_%d", i)
		p, before := tab.Route(id, "")
		if after := split.Lookup(p); after != before {
			t.Fatalf("%s: in-progress split changed routing %d -> %d", id, before, after)
		}
		if before == 5 {
			on5++
			perChild[split.LookupInProgress(p)]++
		}
	}
	if on5 != 270 || perChild[8] != 126 || perChild[9] != 144 {
		t.Errorf("docs on shard 5 = %d split %v, want 270 split 8:126 9:144", on5, perChild)
	}
}
