package service

import (
	"testing"
)

// TestAliasesAndBlocks covers alias resolution for writes and reads, the
// read and metadata blocks, null clearing a setting, wildcards, and that a
// failed request changes nothing.
func TestAliasesAndBlocks(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	for _, n := range []string{"a-1", "a-2", "b"} {
		if _, err := s.CreateIndex(CreateRequest{Name: n, Settings: FlatSettings{SettingReplicas: str("0")}}); err != nil {
			t.Fatal(err)
		}
	}
	yes := true
	if err := s.UpdateAliases([]AliasAction{
		{Add: true, Indices: []string{"a-*"}, Aliases: []string{"all-a"}},
		{Add: true, Indices: []string{"a-2"}, Aliases: []string{"w"}, Meta: AliasMeta{IsWriteIndex: &yes}},
		{Add: true, Indices: []string{"a-1"}, Aliases: []string{"w"}},
		{Add: true, Indices: []string{"b"}, Aliases: []string{"routed"}, Meta: AliasMeta{IndexRouting: "r1", SearchRouting: "r1"}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		target  string
		wantErr string // error type, "" for success
		index   string
	}{
		{"alias with a write index", "w", "", "a-2"},
		{"alias over two indices without one", "all-a", TypeIllegalArgument, ""},
		{"alias with index routing", "routed", "", "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.IndexDoc(tc.target, "x", "", []byte(`{}`), WriteOptions{})
			if got := errType(err); (tc.wantErr == "" && err != nil) || (tc.wantErr != "" && got != tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			if err == nil && res.Index != tc.index {
				t.Fatalf("wrote to %s, want %s", res.Index, tc.index)
			}
		})
	}
	if d, found, err := s.GetDoc("b", "x", "r1"); err != nil || !found || d.Routing != "r1" {
		t.Fatalf("the alias's index_routing was not applied: %+v %v %v", d, found, err)
	}
	// An atomic update that fails part-way changes nothing.
	if err := s.UpdateAliases([]AliasAction{
		{Add: true, Indices: []string{"b"}, Aliases: []string{"new"}},
		{Indices: []string{"b"}, Aliases: []string{"missing"}},
	}); errType(err) != "aliases_not_found_exception" {
		t.Fatalf("remove of a missing alias: %v", err)
	}
	if names, _ := s.Aliases("b", []string{"new"}, IndicesOptions{}); len(names["b"]) != 0 {
		t.Fatalf("a failed alias update added %v", names)
	}
	// Read block: gets and searches refused; null clears it.
	if err := s.PutSettings("b", FlatSettings{SettingBlockRead: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetDoc("b", "x", "r1"); errType(err) != TypeClusterBlock {
		t.Fatalf("get under a read block: %v", err)
	}
	if _, err := s.Search(SearchRequest{Indices: "b"}); errType(err) != TypeClusterBlock {
		t.Fatalf("search under a read block: %v", err)
	}
	if err := s.PutSettings("b", FlatSettings{SettingBlockRead: nil}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.Meta("b"); m.Settings[SettingBlockRead] != "" {
		t.Fatalf("null left %q", m.Settings[SettingBlockRead])
	}
	// Metadata block: settings refused (blocks themselves may change).
	if err := s.PutSettings("b", FlatSettings{SettingBlockMetadata: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSettings("b", FlatSettings{SettingReplicas: str("1")}, IndicesOptions{}); errType(err) != TypeClusterBlock {
		t.Fatalf("settings under a metadata block: %v", err)
	}
	if _, err := s.GetSettings("b"); errType(err) != TypeClusterBlock {
		t.Fatalf("get settings under a metadata block: %v", err)
	}
	if err := s.DeleteIndex("b", IndicesOptions{}); errType(err) != TypeClusterBlock {
		t.Fatalf("delete under a metadata block: %v", err)
	}
	if err := s.PutSettings("b", FlatSettings{SettingBlockMetadata: str("false")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wildcards.
	names, err := s.Resolve("a-*,b", IndicesOptions{})
	if err != nil || len(names) != 3 {
		t.Fatalf("resolve: %v %v", names, err)
	}
	if _, err := s.Resolve("nope", IndicesOptions{}); errType(err) != TypeIndexNotFound {
		t.Fatalf("resolve of a missing index: %v", err)
	}
	if err := s.DeleteIndex("a-*", IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	if names := s.Names(); len(names) != 1 || names[0] != "b" {
		t.Fatalf("after deleting a-*: %v", names)
	}
	if targets := s.AliasNames(); len(targets) != 1 || targets[0] != "routed" {
		t.Fatalf("aliases of deleted indices remain: %v", targets)
	}
}

// TestMaxResultWindow: index.max_result_window bounds from + size, and a
// larger setting allows more than the default 10000.
func TestMaxResultWindow(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "big", Settings: FlatSettings{"index.max_result_window": str("20000")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateIndex(CreateRequest{Name: "small"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		index      string
		from, size int
		ok         bool
	}{
		{"big", 0, 15000, true}, {"big", 10000, 10000, true}, {"big", 10001, 10000, false},
		{"small", 0, 10000, true}, {"small", 1, 10000, false}, {"big,small", 0, 15000, false},
	} {
		_, err := s.Search(SearchRequest{Indices: tc.index, From: tc.from, Size: tc.size})
		if (err == nil) != tc.ok || (err != nil && errType(err) != TypeIllegalArgument) {
			t.Errorf("%s from %d size %d: %v", tc.index, tc.from, tc.size, err)
		}
	}
}
