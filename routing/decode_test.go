package routing

// Tests of Decode behind the checksum: tables whose bytes are intact (the
// CRC-32C matches) but whose structure is wrong. Encode does not validate,
// so mutating a decoded table and encoding it again is how a test writes
// such bytes with a correct checksum.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"runtime"
	"slices"
	"testing"
)

// mustApply applies edits in order and fails the test on any error.
func mustApply(t testing.TB, tab *Table, edits ...Edit) *Table {
	t.Helper()
	for _, e := range edits {
		next, err := Apply(tab, e)
		if err != nil {
			t.Fatalf("Apply(%s) = %v", e, err)
		}
		tab = next
	}
	return tab
}

// nestedInProgress returns a table of two roots whose root 0 was split into
// shards 2 and 3, with shard 3's split into 4 and 5 in progress: the
// in-progress parent is the second leaf of root 0, while root 1 has one leaf.
func nestedInProgress(t testing.TB, mode Mode) *Table {
	t.Helper()
	tab, err := NewTable(mode, Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return mustApply(t, tab,
		Edit{Kind: BeginSplit, Shard: 0, Ways: 2},
		Edit{Kind: CommitSplit, Shard: 0, Children: []ShardID{2, 3}},
		Edit{Kind: BeginSplit, Shard: 3, Ways: 2},
	)
}

// rootInProgress returns a table of two unsplit roots with a split of root
// 0 into shards 2 and 3 in progress.
func rootInProgress(t testing.TB, mode Mode) *Table {
	t.Helper()
	tab, err := NewTable(mode, Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return mustApply(t, tab, Edit{Kind: BeginSplit, Shard: 0, Ways: 2})
}

// TestDecodeChecksumValidCorruption: a table with a correct checksum but a
// broken structure decodes to an error wrapping ErrCorruptTable, never to a
// panic and never to a table.
func TestDecodeChecksumValidCorruption(t *testing.T) {
	for _, mode := range []Mode{ModePartition, ModeOpenSearch} {
		for _, tc := range []struct {
			name   string
			mutate func(t *Table)
			base   func(testing.TB, Mode) *Table // nestedInProgress if nil
		}{
			// Bug 7: the in-progress split of shard 3 (leaf 1 of root 0)
			// names root 1, which has a single leaf.
			{"in-progress split names wrong root", func(t *Table) { t.splits[1].Root = 1 }, nil},
			// In opensearch mode every root has the same span, so without a
			// root check this one decoded, and the children's documents
			// would have been keyed under root 1.
			{"in-progress split of a root names the other root", func(t *Table) { t.splits[0].Root = 1 }, rootInProgress},
			{"in-progress split names root out of range", func(t *Table) { t.splits[1].Root = 7 }, nil},
			{"committed split names wrong root", func(t *Table) { t.splits[0].Root = 1 }, nil},
			{"in-progress parent missing", func(t *Table) { t.splits[1].Parent = 9 }, nil},
			{"in-progress child is a root id", func(t *Table) { t.splits[1].Children[0].Shard = 1 }, nil},
			{"in-progress child is a committed child", func(t *Table) { t.splits[1].Children[0].Shard = 2 }, nil},
			{"in-progress children twice", func(t *Table) { t.splits[1].Children[1].Shard = 4 }, nil},
			{"in-progress child above int32", func(t *Table) { t.splits[1].Children[1].Shard = 1 << 31 }, nil},
			{"committed child missing from leaves", func(t *Table) { t.splits[0].Children[0].Shard = 6 }, nil},
			{"committed split of an unsplit root", func(t *Table) { t.splits[0].Parent = 1 }, nil},
			{"committed split forgotten", func(t *Table) { t.splits = t.splits[1:] }, nil},
			{"leaf not a child of any split", func(t *Table) { t.roots[0][0].Shard = 7; t.maxShard = 7 }, nil},
			{"root leaf is another root", func(t *Table) { t.roots[1][0].Shard = 0 }, nil},
			{"child span past the key space", func(t *Table) {
				t.splits[1].Children[1].Span.End = 1<<64 - 1
			}, nil},
			{"child span inverted", func(t *Table) {
				c := t.splits[1].Children
				c[0].Span.End, c[1].Span.Start = c[0].Span.Start, c[0].Span.Start
			}, nil},
			{"max shard id below a committed id", func(t *Table) { t.maxShard = 2 }, nil},
			{"max shard id above the committed ids", func(t *Table) { t.maxShard = 9 }, nil},
			{"max shard id beyond int32", func(t *Table) { t.maxShard = 1<<32 - 1 }, nil},
			{"routing shards beyond int32", func(t *Table) {
				t.settings.RoutingShards = 1 << 31
			}, nil},
			{"split records out of order", func(t *Table) { t.splits[0], t.splits[1] = t.splits[1], t.splits[0] }, nil},
		} {
			t.Run(mode.String()+"/"+tc.name, func(t *testing.T) {
				base := nestedInProgress
				if tc.base != nil {
					base = tc.base
				}
				tab := base(t, mode).clone()
				tc.mutate(tab)
				got, err := Decode(tab.Encode())
				if !errors.Is(err, ErrCorruptTable) {
					t.Fatalf("Decode = %v, %v; want an error wrapping ErrCorruptTable", got, err)
				}
			})
		}
	}
}

// TestRoutingShardsFitJavaInt: index.number_of_routing_shards is a Java int,
// and Place computes floorMod in int32. A table whose R does not fit must be
// refused when it is made and when it is decoded; before it was, Lookup on
// such a table indexed a root that does not exist.
func TestRoutingShardsFitJavaInt(t *testing.T) {
	for _, r := range []int{1 << 31, 1<<32 - 2} {
		s := Settings{Shards: 2, RoutingShards: r, PartitionSize: 1}
		if _, err := NewTable(ModePartition, s); err == nil {
			t.Errorf("NewTable(R=%d) succeeded", r)
		}
		// A table that is consistent apart from R, written by hand.
		tab := &Table{version: 1, mode: ModePartition, settings: s, maxShard: 1}
		tab.roots = make([][]Leaf, s.Shards)
		for i := range tab.roots {
			tab.roots[i] = []Leaf{{Shard: ShardID(i), Span: tab.RootSpan(ShardID(i))}}
		}
		got, err := Decode(tab.Encode())
		if err == nil {
			for _, id := range []string{"a", "b", "c", "d"} {
				got.Route(id, "") // panicked: the root index was out of range
			}
		}
		if !errors.Is(err, ErrCorruptTable) {
			t.Fatalf("Decode(R=%d) = %v; want an error wrapping ErrCorruptTable", r, err)
		}
	}
}

// TestAllocateChildIDsIgnoresFarHoles: a valid table may reserve child ids
// far above the rest (a decoded table need not come from this process's
// edits), and the gap below them is all holes. Beginning another split uses
// the lowest holes and must not list the whole gap: listing every hole
// would take 4 bytes each, 16 Mi of them here.
func TestAllocateChildIDsIgnoresFarHoles(t *testing.T) {
	const far = 1 << 24
	tab, err := NewTable(ModeOpenSearch, Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	tab = mustApply(t, tab, Edit{Kind: BeginSplit, Shard: 0, Ways: 2})
	tab = tab.clone()
	tab.splits[0].Children[0].Shard, tab.splits[0].Children[1].Shard = far, far+1
	tab, err = Decode(tab.Encode())
	if err != nil {
		t.Fatalf("Decode = %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	next, err := Apply(tab, Edit{Kind: BeginSplit, Shard: 1, Ways: 2})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("Apply = %v", err)
	}
	if sp, _ := next.Split(1); sp.Children[0].Shard != 2 || sp.Children[1].Shard != 3 {
		t.Errorf("children %v, want the lowest holes 2 and 3", sp.Children)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("Apply allocated %d bytes, want < 1 MiB", n)
	}
}

// withChecksum frames a table body (the bytes between the format version
// and the checksum) as an encoding: magic, format version, body, CRC-32C.
func withChecksum(body []byte) []byte {
	b := append([]byte(tableMagic), 0, tableFormatVersion)
	b = append(b, body...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// bodyOf is the inverse of withChecksum for an encoding made by Encode.
func bodyOf(enc []byte) []byte { return enc[6 : len(enc)-4] }

// fuzzSeedTables are the tables FuzzDecodeStructure starts from: both modes,
// unsplit, in progress, committed, nested, with holes after a cancel.
func fuzzSeedTables(t testing.TB) []*Table {
	var out []*Table
	for _, mode := range []Mode{ModePartition, ModeOpenSearch} {
		s := Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1}
		tab, err := NewTable(mode, s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tab, nestedInProgress(t, mode))
		out = append(out, mustApply(t, tab,
			Edit{Kind: BeginSplit, Shard: 1, Ways: 3},
			Edit{Kind: BeginSplit, Shard: 0, Ways: 2},
			Edit{Kind: CancelSplit, Shard: 1},
			Edit{Kind: CommitSplit, Shard: 0, Children: []ShardID{5, 6}},
		))
		// Merges: a committed merge of split children, then a split of the
		// target and an in-progress merge of its children.
		merged := mustApply(t, tab,
			Edit{Kind: BeginSplit, Shard: 0, Ways: 3},
			Edit{Kind: CommitSplit, Shard: 0, Children: []ShardID{2, 3, 4}},
			Edit{Kind: BeginMerge, Sources: []ShardID{3, 4}},
			Edit{Kind: CommitMerge, Shard: 5},
			Edit{Kind: BeginSplit, Shard: 5, Ways: 2},
			Edit{Kind: CommitSplit, Shard: 5, Children: []ShardID{6, 7}},
			Edit{Kind: BeginMerge, Sources: []ShardID{2, 6}},
		)
		out = append(out, merged)
	}
	return out
}

// FuzzDecodeStructure fuzzes the decoder behind the checksum: the input is
// a table body whose checksum is computed before decoding, so every
// mutation reaches decodeBody and Validate. Whatever decodes must validate,
// re-encode to the same bytes, round-trip through OpenSearch's two
// encodings, and route without panicking. edits is then read as a short
// list of edits; Apply must return an error or a valid table, never panic.
func FuzzDecodeStructure(f *testing.F) {
	for i, tab := range fuzzSeedTables(f) {
		body := bodyOf(tab.Encode())
		if _, err := Decode(withChecksum(body)); err != nil {
			f.Fatalf("seed %d does not decode: %v", i, err)
		}
		f.Add(body, []byte{byte(i), 0, 1, 2})
	}
	f.Fuzz(func(t *testing.T, body, edits []byte) {
		data := withChecksum(body)
		tab, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrCorruptTable) {
				t.Fatalf("Decode error %v does not wrap ErrCorruptTable", err)
			}
			return
		}
		checkDecoded(t, tab, data)
		for len(edits) >= 3 {
			e := fuzzEdit(tab, edits[:3])
			edits = edits[3:]
			next, err := Apply(tab, e)
			if err != nil {
				continue
			}
			checkDecoded(t, next, next.Encode())
			tab = next
		}
	})
}

// fuzzEdit reads three bytes as an edit of tab: the kind, the shard (an
// active shard, an in-progress parent or any small id) and the ways (for a
// merge: how many leaves from the shard on, or the shard is the target).
func fuzzEdit(tab *Table, b []byte) Edit {
	e := Edit{Kind: EditKind(b[0]%7 + 1), Ways: int(b[2] % 5)}
	active := tab.ActiveShards()
	e.Shard = ShardID(b[1])
	if int(b[1]) < 2*len(active) {
		e.Shard = active[int(b[1])%len(active)]
	}
	switch e.Kind {
	case CommitSplit:
		if sp, ok := tab.Split(e.Shard); ok {
			e.Children = childIDs(sp)
		}
	case BeginMerge:
		// e.Ways leaves from e.Shard on, within its root (or past its end).
		e.Sources = []ShardID{e.Shard}
		if r, i, ok := tab.findLeaf(e.Shard); ok {
			leaves := tab.Leaves(ShardID(r))
			for j := 1; j < e.Ways && i+j < len(leaves); j++ {
				e.Sources = append(e.Sources, leaves[i+j].Shard)
			}
		}
	case CommitMerge, CancelMerge:
		if m, ok := tab.MergeOf(e.Shard); ok {
			e.Shard = m.Target
		}
	}
	return e
}

// checkDecoded checks a table that Decode accepted (or Apply returned):
// it validates, its encoding is data and decodes to the same table, its
// OpenSearch encodings round-trip, and every lookup lands on a shard the
// table knows.
func checkDecoded(t *testing.T, tab *Table, data []byte) {
	t.Helper()
	if err := tab.Validate(); err != nil {
		t.Fatalf("accepted an invalid table: %v", err)
	}
	if re := tab.Encode(); !bytes.Equal(re, data) {
		t.Fatalf("re-encoding differs:\n%x\n%x", re, data)
	}
	dec, err := Decode(data)
	if err != nil || !dec.SameLayout(tab) || dec.Version() != tab.Version() {
		t.Fatalf("Decode(Encode) = %v", err)
	}
	// OpenSearch's split metadata cannot express a merge (DESIGN.md).
	if len(tab.Merges()) == 0 {
		if back, err := ParseXContent(tab.Mode(), tab.Settings(), tab.Version(), tab.MarshalXContent()); err != nil || !back.SameLayout(tab) {
			t.Fatalf("xcontent round trip: %v\n%s", err, tab.MarshalXContent())
		}
		if back, err := UnmarshalStream(tab.Mode(), tab.Settings(), tab.Version(), tab.MarshalStream()); err != nil || !back.SameLayout(tab) {
			t.Fatalf("stream round trip: %v", err)
		}
	}
	for _, id := range []string{"0", "1", "a", "zz", "DOC_7"} {
		p, got := tab.Route(id, "")
		if o, ok := tab.Shard(got); !ok || !o.Active || o.Root != p.Root {
			t.Fatalf("Route(%q) = %d, which the table places at %+v, %v", id, got, o, ok)
		}
		if got := tab.LookupInProgress(p); !slices.Contains(tab.ActiveShards(), got) {
			if _, ok := tab.Shard(got); !ok {
				t.Fatalf("LookupInProgress(%q) = %d, a shard the table does not know", id, got)
			}
		}
	}
}

// FuzzUnmarshalStream: OpenSearch's stream form is the other decoder of
// tables from bytes. It must not panic, and what it accepts must validate
// and survive another trip through the stream form.
func FuzzUnmarshalStream(f *testing.F) {
	for _, tab := range fuzzSeedTables(f) {
		f.Add(uint8(tab.Mode()), tab.MarshalStream())
	}
	s := Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1}
	f.Fuzz(func(t *testing.T, mode uint8, data []byte) {
		m := Mode(mode%2 + 1)
		tab, err := UnmarshalStream(m, s, 1, data)
		if err != nil {
			return
		}
		if err := tab.Validate(); err != nil {
			t.Fatalf("accepted an invalid table: %v", err)
		}
		back, err := UnmarshalStream(m, s, 1, tab.MarshalStream())
		if err != nil || !back.SameLayout(tab) {
			t.Fatalf("stream round trip: %v", err)
		}
	})
}

// TestDecodeFormat1: tables written before merges existed (format 1, by
// the code of commit abed041, saved in testdata) still decode, validate,
// route as they did, and re-encode in the current format to a table with
// the same layout.
func TestDecodeFormat1(t *testing.T) {
	for _, mode := range []Mode{ModePartition, ModeOpenSearch} {
		t.Run(mode.String(), func(t *testing.T) {
			data, err := os.ReadFile("testdata/table-format1-" + mode.String() + ".bin")
			if err != nil {
				t.Fatal(err)
			}
			if f := binary.BigEndian.Uint16(data[4:]); f != 1 {
				t.Fatalf("testdata is format %d, want 1", f)
			}
			got, err := Decode(data)
			if err != nil {
				t.Fatalf("Decode(format 1) = %v", err)
			}
			// The edits that made the file (see the commit that added it).
			tab, err := NewTable(mode, Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			want := mustApply(t, tab,
				Edit{Kind: BeginSplit, Shard: 1, Ways: 3},
				Edit{Kind: BeginSplit, Shard: 0, Ways: 2},
				Edit{Kind: CancelSplit, Shard: 1},
				Edit{Kind: CommitSplit, Shard: 0, Children: []ShardID{5, 6}},
				Edit{Kind: BeginSplit, Shard: 5, Ways: 2},
				Edit{Kind: CommitSplit, Shard: 5, Children: []ShardID{2, 3}},
				Edit{Kind: BeginSplit, Shard: 1, Ways: 2},
			)
			if !got.SameLayout(want) || got.Version() != want.Version() {
				t.Fatalf("format 1 decodes to\n%s\nwant\n%s", formatTable(got), formatTable(want))
			}
			re := got.Encode()
			if f := binary.BigEndian.Uint16(re[4:]); f != tableFormatVersion {
				t.Fatalf("Encode wrote format %d, want %d", f, tableFormatVersion)
			}
			if back, err := Decode(re); err != nil || !back.SameLayout(got) {
				t.Fatalf("re-encoded format 1 table: %v", err)
			}
			// A format-1 file followed by a merge section is not format 1.
			bad := append(slices.Clone(data[:len(data)-4]), 0, 0, 0, 0)
			bad = binary.BigEndian.AppendUint32(bad, crc32.Checksum(bad, castagnoli))
			if _, err := Decode(bad); !errors.Is(err, ErrCorruptTable) {
				t.Fatalf("format 1 with trailing merge count: %v, want ErrCorruptTable", err)
			}
		})
	}
}
