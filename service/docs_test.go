package service

import (
	"fmt"
	"strings"
	"testing"
)

// TestGetThroughAliasUsesIndexRouting: a get through an alias resolves the
// alias's index_routing, as OpenSearch's single-shard get does
// (Metadata.resolveIndexRouting), not its search_routing: a document written
// through the alias is found through it.
func TestGetThroughAliasUsesIndexRouting(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "logs", Settings: FlatSettings{SettingShards: str("4"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	tab, err := s.Table("logs")
	if err != nil {
		t.Fatal(err)
	}
	// A search routing whose shard differs from the index routing's.
	_, want := tab.Route("d1", "a")
	search := ""
	for i := range 100 {
		if _, sh := tab.Route("d1", fmt.Sprintf("b%d", i)); sh != want {
			search = fmt.Sprintf("b%d", i)
			break
		}
	}
	if search == "" {
		t.Fatal("no routing value on another shard")
	}
	if err := s.UpdateAliases([]AliasAction{{Add: true, Indices: []string{"logs"}, Aliases: []string{"w"},
		Meta: AliasMeta{IndexRouting: "a", SearchRouting: search}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IndexDoc("w", "d1", "", []byte(`{}`), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	d, found, err := s.GetDoc("w", "d1", "")
	if err != nil || !found || d.Routing != "a" {
		t.Fatalf("get d1 through alias w (index_routing a, search_routing %s): found %v routing %q err %v", search, found, d.Routing, err)
	}
}

// TestIDRefusalsSayWhy: an id that is not UTF-8 is refused for that reason,
// not as "too long"; 512 bytes (multi-byte characters included) is allowed
// and 513 is too long.
func TestIDRefusalsSayWhy(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "logs"}); err != nil {
		t.Fatal(err)
	}
	is512 := strings.Repeat("é", 256) // 512 bytes, 256 characters
	for _, tc := range []struct {
		name, id, reason string
	}{
		{"512 bytes", is512, ""},
		{"513 bytes", is512 + "a", "Validation Failed: 1: id [" + is512 + "a] is too long, must be no longer than 512 bytes but was: 513;"},
		{"not utf-8", "\xff", `Validation Failed: 1: id ["\xff"] is not valid UTF-8;`},
		{"empty", "", "Validation Failed: 1: id is missing;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.IndexDoc("logs", tc.id, "", []byte(`{}`), WriteOptions{})
			got := ""
			if err != nil {
				got = AsError(err).Reason
			}
			if got != tc.reason {
				t.Fatalf("reason %q, want %q", got, tc.reason)
			}
		})
	}
}
