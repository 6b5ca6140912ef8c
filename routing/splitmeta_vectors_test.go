package routing

// Replays split_metadata.json: OpenSearch's SplitShardsMetadata,
// ShardRange and MetadataInPlaceSplitShardService tests (PR #20859,
// #20979), against Table in ModeOpenSearch.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

type smStep struct {
	Op                string          `json:"op"`
	Shard             ShardID         `json:"shard"`
	Children          int             `json:"children"`
	ChildIDs          []ShardID       `json:"child_ids"`
	DerivedRanges     [][3]int64      `json:"derived_child_ranges"`
	Root              int             `json:"root"`
	Hash              int32           `json:"hash"`
	IncludeInProgress bool            `json:"include_in_progress"`
	Expect            json.RawMessage `json:"expect"`
	IDs               []ShardID       `json:"ids"`
	Value             json.RawMessage `json:"value"`
	Parent            ShardID         `json:"parent"`
	Count             *int            `json:"count"`
	Err               *expectedError  `json:"expect_error"`
}

type smCase struct {
	ID       string   `json:"id"`
	Kind     string   `json:"kind"`
	NumRoots int      `json:"num_root_shards"`
	Steps    []smStep `json:"steps"`
}

type smFile struct {
	Sequences []smCase `json:"metadata_sequences"`
	Validate  []struct {
		ID     string         `json:"id"`
		Shard  int32          `json:"shard"`
		Ranges [][3]int32     `json:"ranges"`
		Err    *expectedError `json:"expect_error"`
	} `json:"validate_ranges"`
	ShardRange []struct {
		ID      string          `json:"id"`
		Op      string          `json:"op"`
		Range   *[3]int32       `json:"range"`
		Arg     json.RawMessage `json:"arg"`
		Expect  json.RawMessage `json:"expect"`
		WireHex string          `json:"derived_wire_hex"`
	} `json:"shard_range"`
	Equality []struct {
		ID    string `json:"id"`
		A     smCase `json:"a"`
		B     smCase `json:"b"`
		Equal bool   `json:"expect_equal"`
	} `json:"equality"`
	Serde []struct {
		smCase
		Format    string `json:"format"`
		StreamHex string `json:"derived_stream_hex"`
		XContent  string `json:"derived_xcontent"`
	} `json:"serde"`
	Service []struct {
		ID    string `json:"id"`
		State struct {
			Index         string   `json:"index"`
			NodeVersions  []string `json:"node_versions"`
			Shards        int      `json:"number_of_shards"`
			VirtualShards int      `json:"number_of_virtual_shards"`
			PrimaryState  string   `json:"primary_state"`
		} `json:"state"`
		Prior    []svcRequest `json:"prior_requests"`
		Requests []svcRequest `json:"requests"`
		Expect   struct {
			ChildCounts     map[string]int `json:"child_counts"`
			InProgress      []ShardID      `json:"in_progress_contains"`
			NotInProgress   []ShardID      `json:"in_progress_not_contains"`
			NumberOfShards  *int           `json:"index_number_of_shards"`
			UnionChildIDs   *int           `json:"union_child_ids_size"`
			RerouteContains []string       `json:"reroute_reason_contains"`
			Err             *expectedError `json:"error"`
		} `json:"expect"`
	} `json:"service"`
}

type svcRequest struct {
	Index     string  `json:"index"`
	Shard     ShardID `json:"shard"`
	SplitInto int     `json:"split_into"`
	Commit    bool    `json:"commit"`
}

// osTable returns an unsplit ModeOpenSearch table with n roots. The split
// metadata does not depend on the routing shards; use the create default.
func osTable(t *testing.T, n int) *Table {
	t.Helper()
	if n == 0 {
		// OpenSearch's tests build metadata with no roots, which no index
		// can have; the zero table answers their accessor checks.
		return &Table{version: 1, mode: ModeOpenSearch}
	}
	tab, err := NewTable(ModeOpenSearch, Settings{Shards: n, RoutingShards: DefaultRoutingShards(n), PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// replay runs a case's steps; it returns the number of checks made.
func replay(t *testing.T, c smCase) (*Table, int) {
	t.Helper()
	tab := osTable(t, c.NumRoots)
	checks := 0
	for i, s := range c.Steps {
		where := fmt.Sprintf("%s step %d (%s)", c.ID, i, s.Op)
		next, n, err := replayStep(tab, s)
		checks += n
		if err != nil {
			t.Errorf("%s: %v", where, err)
		}
		if next != nil {
			tab = next
		}
	}
	return tab, checks
}

// replayStep applies or checks one step. It returns the new table (nil if
// unchanged), the number of checks made, and the first mismatch.
func replayStep(tab *Table, s smStep) (*Table, int, error) {
	var edit *Edit
	switch s.Op {
	case "split":
		edit = &Edit{Kind: BeginSplit, Shard: s.Shard, Ways: s.Children}
	case "commit":
		edit = &Edit{Kind: CommitSplit, Shard: s.Shard, Children: s.ChildIDs}
	case "cancel":
		edit = &Edit{Kind: CancelSplit, Shard: s.Shard}
	}
	if edit != nil {
		next, err := Apply(tab, *edit)
		if s.Err != nil {
			return nil, 1, s.Err.check(err)
		}
		if err != nil {
			return nil, 1, fmt.Errorf("unexpected error %v", err)
		}
		if s.Op == "split" && s.DerivedRanges != nil {
			sp, _ := next.Split(s.Shard)
			if got := fmt.Sprint(rangeTriples(ModeOpenSearch.rangesOf(sp.Children))); got != fmt.Sprint(s.DerivedRanges) {
				return next, 2, fmt.Errorf("child ranges %s, want %v", got, s.DerivedRanges)
			}
			return next, 2, nil
		}
		return next, 1, nil
	}
	if s.Op == "rebuild" {
		dec, err := Decode(tab.Encode())
		if err != nil || !dec.SameLayout(tab) {
			return nil, 1, fmt.Errorf("rebuild: %v", err)
		}
		return dec, 1, nil
	}
	return nil, 1, checkStep(tab, s)
}

func rangeTriples(rs []ShardRange) [][3]int64 {
	out := make([][3]int64, len(rs))
	for i, r := range rs {
		out[i] = [3]int64{int64(r.ShardID), int64(r.Start), int64(r.End)}
	}
	return out
}

// checkStep evaluates a check_* or lookup step.
func checkStep(tab *Table, s smStep) error {
	var got, want any
	switch s.Op {
	case "lookup":
		if s.Root < 0 || s.Root >= len(tab.roots) {
			// OpenSearch throws ArrayIndexOutOfBoundsException.
			if s.Err != nil && s.Err.Class == IndexOutOfBounds.String() {
				return nil
			}
			return fmt.Errorf("root %d out of range, want %s", s.Root, s.Expect)
		}
		p := Placement{Sum: s.Hash, Root: ShardID(s.Root)}
		if s.IncludeInProgress {
			got = tab.LookupInProgress(p)
		} else {
			got = tab.Lookup(p)
		}
		want = string(s.Expect)
	case "check_root_shards":
		got, want = seq(len(tab.roots)), s.IDs
	case "check_active_shard_ids":
		got, want = tab.ActiveShards(), s.IDs
	case "check_number_of_root_shards":
		got, want = len(tab.roots), string(s.Value)
	case "check_number_of_shards":
		got, want = len(tab.ActiveShards()), string(s.Value)
	case "check_in_progress_split_shard_ids":
		got, want = tab.InProgress(), s.IDs
	case "check_split_in_progress":
		got, want = slices.Contains(tab.InProgress(), s.Shard), string(s.Value)
	case "check_is_split_parent":
		got, want = tab.IsSplitParent(s.Shard), string(s.Value)
	case "check_children_of_parent":
		sp, ok := tab.Split(s.Parent)
		got = "null"
		if ok {
			got = len(sp.Children)
		}
		want = "null"
		if s.Count != nil {
			want = *s.Count
		}
	default:
		return checkChildren(tab, s)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) && !(fmt.Sprint(got) == "[]" && fmt.Sprint(want) == "[]") {
		return fmt.Errorf("got %v, want %v", got, want)
	}
	return nil
}

// checkChildren evaluates the check_children_* properties of a parent.
func checkChildren(tab *Table, s smStep) error {
	sp, ok := tab.Split(s.Parent)
	if !ok {
		return fmt.Errorf("parent %d has no children", s.Parent)
	}
	switch s.Op {
	case "check_children_contiguous", "check_children_span_parent_range":
		for i := 1; i < len(sp.Children); i++ {
			if sp.Children[i].Span.Start != sp.Children[i-1].Span.End {
				return fmt.Errorf("children %v not contiguous", sp.Children)
			}
		}
		if s.Op == "check_children_span_parent_range" {
			owner := parentSpan(tab, s.Parent)
			if got := (Span{sp.Children[0].Span.Start, sp.Children[len(sp.Children)-1].Span.End}); got != owner {
				return fmt.Errorf("children span %s, parent range %s", got, owner)
			}
		}
	case "check_children_ids_within":
		for _, c := range sp.Children {
			if !slices.Contains(s.IDs, c.Shard) {
				return fmt.Errorf("child %d not within %v", c.Shard, s.IDs)
			}
		}
	default:
		return fmt.Errorf("unknown op %q", s.Op)
	}
	return nil
}

// parentSpan returns the span a (possibly committed) parent owned.
func parentSpan(tab *Table, parent ShardID) Span {
	if o, ok := tab.Shard(parent); ok {
		return o.Span
	}
	for _, sp := range tab.splits {
		for _, c := range sp.Children {
			if c.Shard == parent {
				return c.Span
			}
		}
	}
	return tab.RootSpan(parent)
}

func seq(n int) []ShardID {
	out := make([]ShardID, n)
	for i := range out {
		out[i] = ShardID(i)
	}
	return out
}

func TestVectorsSplitMetadataSequences(t *testing.T) {
	f := loadVectors[smFile](t, "split_metadata.json")
	checks := map[string]int{}
	for _, c := range f.Sequences {
		_, n := replay(t, c)
		checks[c.Kind] += n
	}
	t.Logf("split_metadata.json metadata_sequences: %d cases, checks by kind %v", len(f.Sequences), checks)
}

func TestVectorsSplitMetadataValidate(t *testing.T) {
	f := loadVectors[smFile](t, "split_metadata.json")
	for _, c := range f.Validate {
		ranges := make([]ShardRange, len(c.Ranges))
		for i, r := range c.Ranges {
			ranges[i] = ShardRange{r[0], r[1], r[2]}
		}
		if e := c.Err.check(ValidateShardRanges(c.Shard, ranges)); e != nil {
			t.Errorf("%s: %v", c.ID, e)
		}
	}
	t.Logf("split_metadata.json validate_ranges: %d checked", len(f.Validate))
}

func TestVectorsShardRange(t *testing.T) {
	f := loadVectors[smFile](t, "split_metadata.json")
	for _, c := range f.ShardRange {
		var r ShardRange
		if c.Range != nil {
			r = ShardRange{c.Range[0], c.Range[1], c.Range[2]}
		}
		var got any
		switch c.Op {
		case "compare_to_sign", "equals":
			var a [3]int32
			if err := json.Unmarshal(c.Arg, &a); err != nil {
				t.Fatal(err)
			}
			o := ShardRange{a[0], a[1], a[2]}
			if c.Op == "equals" {
				got = r == o
			} else {
				got = r.CompareTo(o)
			}
		case "contains":
			var h int32
			_ = json.Unmarshal(c.Arg, &h)
			got = r.Contains(h)
		case "java_hash_code":
			got = r.JavaHashCode()
		case "to_string":
			got, _ = json.Marshal(r.String())
		case "to_xcontent":
			js, _ := r.MarshalJSON()
			got, _ = json.Marshal(string(js))
		case "parse":
			var doc string
			_ = json.Unmarshal(c.Arg, &doc)
			var p ShardRange
			if err := json.Unmarshal([]byte(doc), &p); err != nil {
				t.Errorf("%s: %v", c.ID, err)
			}
			got = []int32{p.ShardID, p.Start, p.End}
		case "wire_round_trip":
			wire := r.AppendWire(nil)
			rd := &streamReader{b: wire}
			back := ShardRange{ShardID: rd.vint(), Start: int32(rd.u32()), End: int32(rd.u32())}
			if hex.EncodeToString(wire) != c.WireHex || rd.err != nil {
				t.Errorf("%s: wire %x, want %s (%v)", c.ID, wire, c.WireHex, rd.err)
			}
			got = []int32{back.ShardID, back.Start, back.End}
		default:
			t.Fatalf("%s: unknown op %q", c.ID, c.Op)
		}
		if g := compactJSON(t, got); g != compactJSON(t, c.Expect) {
			t.Errorf("%s %s: got %s, want %s", c.ID, c.Op, g, c.Expect)
		}
	}
	t.Logf("split_metadata.json shard_range: %d checked", len(f.ShardRange))
}

func compactJSON(t *testing.T, v any) string {
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		b = x
	case []byte:
		b = x
	default:
		b, _ = json.Marshal(v)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("json %s: %v", b, err)
	}
	c, _ := json.Marshal(out)
	return string(c)
}

func TestVectorsSplitMetadataEquality(t *testing.T) {
	f := loadVectors[smFile](t, "split_metadata.json")
	for _, c := range f.Equality {
		c.A.ID, c.B.ID = c.ID+"/a", c.ID+"/b"
		a, _ := replay(t, c.A)
		b, _ := replay(t, c.B)
		if got := a.SameLayout(b); got != c.Equal {
			t.Errorf("%s: SameLayout = %v, want %v", c.ID, got, c.Equal)
		}
	}
	t.Logf("split_metadata.json equality: %d checked", len(f.Equality))
}

func TestVectorsSplitMetadataSerde(t *testing.T) {
	f := loadVectors[smFile](t, "split_metadata.json")
	for _, c := range f.Serde {
		tab, _ := replay(t, c.smCase)
		var back *Table
		var err error
		switch c.Format {
		case "stream":
			wire := tab.MarshalStream()
			if got := hex.EncodeToString(wire); got != c.StreamHex {
				t.Errorf("%s: stream %s, want %s", c.ID, got, c.StreamHex)
			}
			back, err = UnmarshalStream(tab.mode, tab.settings, tab.version, wire)
		case "xcontent":
			doc := tab.MarshalXContent()
			if string(doc) != c.XContent {
				t.Errorf("%s: xcontent %s, want %s", c.ID, doc, c.XContent)
			}
			back, err = ParseXContent(tab.mode, tab.settings, tab.version, doc)
		case "diff_from_fresh":
			fresh := osTable(t, c.NumRoots)
			back, err = ApplyDiff(fresh, tab.Diff(fresh))
			if len(fresh.Diff(fresh)) != 0 {
				t.Errorf("%s: diff of equal tables is not empty", c.ID)
			}
		}
		if err != nil || !back.SameLayout(tab) {
			t.Errorf("%s: %s round trip: %v", c.ID, c.Format, err)
		}
	}
	t.Logf("split_metadata.json serde: %d checked", len(f.Serde))
}

func TestVectorsSplitService(t *testing.T) {
	f := loadVectors[smFile](t, "split_metadata.json")
	for _, c := range f.Service {
		tab := osTable(t, c.State.Shards)
		cs := ClusterState{Index: c.State.Index, VirtualShards: c.State.VirtualShards, NodeVersions: c.State.NodeVersions,
			PrimaryStates: map[ShardID]string{}}
		for _, r := range c.Requests {
			cs.PrimaryStates[r.Shard] = c.State.PrimaryState
		}
		for _, p := range c.Prior {
			next, err := BeginInPlaceSplit(ClusterState{Index: cs.Index, VirtualShards: -1}, tab, SplitRequest{p.Index, p.Shard, p.SplitInto})
			if err != nil {
				t.Fatalf("%s prior: %v", c.ID, err)
			}
			if p.Commit {
				sp, _ := next.Split(p.Shard)
				ids := make([]ShardID, len(sp.Children))
				for i, ch := range sp.Children {
					ids[i] = ch.Shard
				}
				if next, err = Apply(next, Edit{Kind: CommitSplit, Shard: p.Shard, Children: ids}); err != nil {
					t.Fatalf("%s prior commit: %v", c.ID, err)
				}
			}
			tab = next
		}
		var err error
		var reasons []string
		for _, r := range c.Requests {
			req := SplitRequest{r.Index, r.Shard, r.SplitInto}
			var next *Table
			if next, err = BeginInPlaceSplit(cs, tab, req); err != nil {
				break
			}
			tab = next
			reasons = append(reasons, req.Reason())
		}
		if e := c.Expect.Err; e != nil {
			if msg := e.check(err); msg != nil {
				t.Errorf("%s: %v", c.ID, msg)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: unexpected error %v", c.ID, err)
			continue
		}
		if msg := checkService(tab, reasons, c.Expect.ChildCounts, c.Expect.InProgress, c.Expect.NotInProgress,
			c.Expect.NumberOfShards, c.Expect.UnionChildIDs, c.Expect.RerouteContains); msg != "" {
			t.Errorf("%s: %s", c.ID, msg)
		}
	}
	t.Logf("split_metadata.json service: %d checked", len(f.Service))
}

func checkService(tab *Table, reasons []string, counts map[string]int, in, notIn []ShardID, shards, union *int, reroute []string) string {
	for p, n := range counts {
		var id ShardID
		fmt.Sscan(p, &id)
		if sp, ok := tab.Split(id); !ok || len(sp.Children) != n {
			return fmt.Sprintf("children of %s: %v, want %d", p, sp.Children, n)
		}
	}
	for _, id := range in {
		if !slices.Contains(tab.InProgress(), id) {
			return fmt.Sprintf("%d not in progress", id)
		}
	}
	for _, id := range notIn {
		if slices.Contains(tab.InProgress(), id) {
			return fmt.Sprintf("%d in progress", id)
		}
	}
	if shards != nil && tab.Settings().Shards != *shards {
		return fmt.Sprintf("number_of_shards %d, want %d", tab.Settings().Shards, *shards)
	}
	if union != nil {
		n := 0
		for _, sp := range tab.Splits() {
			n += len(sp.Children)
		}
		if n != *union {
			return fmt.Sprintf("%d child ids, want %d", n, *union)
		}
	}
	for _, s := range reroute {
		if !strings.Contains(strings.Join(reasons, "\n"), s) {
			return fmt.Sprintf("reroute reasons %q lack %q", reasons, s)
		}
	}
	return ""
}
