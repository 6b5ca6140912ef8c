package service

import (
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

// TestAliasNamedLikeAnIndex: no create, resize or alias action may leave an
// alias with an index's name (OpenSearch refuses it: a name must resolve to
// one thing), the new index's own name included.
func TestAliasNamedLikeAnIndex(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	for _, n := range []string{"other", "src"} {
		if _, err := s.CreateIndex(CreateRequest{Name: n, Settings: FlatSettings{SettingReplicas: str("0")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSettings("src", FlatSettings{SettingBlockWrite: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"create, alias of an existing index's name", func() error {
			_, err := s.CreateIndex(CreateRequest{Name: "a1", Aliases: map[string]AliasMeta{"other": {}}})
			return err
		}},
		{"create, alias of its own name", func() error {
			_, err := s.CreateIndex(CreateRequest{Name: "a2", Aliases: map[string]AliasMeta{"a2": {}}})
			return err
		}},
		{"clone, alias of an existing index's name", func() error {
			_, _, err := s.Resize(ResizeRequest{Op: routing.Clone, Source: "src", Target: "c1", Aliases: map[string]AliasMeta{"other": {}}})
			return err
		}},
		{"clone, alias of its own name", func() error {
			_, _, err := s.Resize(ResizeRequest{Op: routing.Clone, Source: "src", Target: "c2", Aliases: map[string]AliasMeta{"c2": {}}})
			return err
		}},
		{"alias action", func() error {
			return s.UpdateAliases([]AliasAction{{Add: true, Indices: []string{"src"}, Aliases: []string{"other"}}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); errType(err) != "invalid_alias_name_exception" {
				t.Fatalf("got %v, want invalid_alias_name_exception", err)
			}
		})
	}
	for _, n := range s.Names() {
		for _, a := range s.AliasNames() {
			if a == n {
				t.Errorf("alias %s names an index", a)
			}
		}
	}
}

// TestAliasIndexRoutingRules: through an alias with index_routing, a
// request's own routing must agree with it (OpenSearch rejects the
// operation otherwise, rather than storing the document where reads through
// the alias do not look), and the index_routing must be one value.
func TestAliasIndexRoutingRules(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "logs", Settings: FlatSettings{SettingShards: str("4"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateAliases([]AliasAction{
		{Add: true, Indices: []string{"logs"}, Aliases: []string{"w"}, Meta: AliasMeta{IndexRouting: "a"}},
		{Add: true, Indices: []string{"logs"}, Aliases: []string{"multi"}, Meta: AliasMeta{IndexRouting: "a,b"}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, target, routing, reason string
	}{
		{"same routing", "w", "a", ""},
		{"no routing", "w", "", ""},
		{"other routing", "w", "b", "Alias [w] has index routing associated with it [a], and was provided with routing value [b], rejecting operation"},
		{"several values", "multi", "", "index/alias [multi] provided with routing value [a,b] that resolved to several routing values, rejecting operation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason := func(err error) string {
				if err == nil {
					return ""
				}
				return AsError(err).Reason
			}
			_, err := s.IndexDoc(tc.target, "d1", tc.routing, []byte(`{}`), WriteOptions{})
			if got := reason(err); got != tc.reason {
				t.Fatalf("index: %q, want %q", got, tc.reason)
			}
			_, _, err = s.GetDoc(tc.target, "d1", tc.routing)
			if got := reason(err); got != tc.reason {
				t.Fatalf("get: %q, want %q", got, tc.reason)
			}
			_, err = s.DeleteDoc(tc.target, "d1", tc.routing)
			if got := reason(err); got != tc.reason {
				t.Fatalf("delete: %q, want %q", got, tc.reason)
			}
		})
	}
}

// TestAliasActionsHonourMetadataBlocks: alias actions (remove_index too)
// on an index with a read_only or metadata block are refused with
// cluster_block_exception, as OpenSearch's TransportIndicesAliasesAction
// checks METADATA_WRITE: remove_index must not delete a blocked index that
// DELETE /{index} refuses.
func TestAliasActionsHonourMetadataBlocks(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	for _, n := range []string{"ro", "meta"} {
		if _, err := s.CreateIndex(CreateRequest{Name: n, Aliases: map[string]AliasMeta{"old-" + n: {}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSettings("ro", FlatSettings{SettingBlockReadOnly: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSettings("meta", FlatSettings{SettingBlockMetadata: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ro", "meta"} {
		for _, tc := range []struct {
			name string
			a    AliasAction
		}{
			{"add", AliasAction{Add: true, Indices: []string{n}, Aliases: []string{"new"}}},
			{"remove", AliasAction{Indices: []string{n}, Aliases: []string{"old-" + n}}},
			{"remove_index", AliasAction{RemoveIndex: true, Indices: []string{n}}},
		} {
			t.Run(n+"/"+tc.name, func(t *testing.T) {
				if err := s.UpdateAliases([]AliasAction{tc.a}); errType(err) != TypeClusterBlock {
					t.Fatalf("got %v, want %s", err, TypeClusterBlock)
				}
			})
		}
	}
	if got := s.Names(); len(got) != 2 {
		t.Fatalf("indices left: %v", got)
	}
	if err := s.DeleteIndex("meta", IndicesOptions{}); errType(err) != TypeClusterBlock {
		t.Fatalf("DELETE of a metadata-blocked index: %v", err)
	}
}
