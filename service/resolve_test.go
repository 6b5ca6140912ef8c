package service

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// An index expression resolves with the options of the request that names
// it, as OpenSearch's IndexNameExpressionResolver: an update of settings
// (UpdateSettingsRequest: allow_no_indices false) and alias actions
// (IndicesAliasesRequest: allow_no_indices false, ignore_aliases true)
// refuse a wildcard that matches nothing, and alias actions refuse an
// alias where a concrete index belongs, instead of acknowledging a change
// to nothing, or to the alias's indices.
func TestResolveOptionsOfTheRequest(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	if err := s.PutSettings("_all", FlatSettings{SettingReplicas: str("0")}, IndicesOptions{}); err == nil {
		t.Errorf("PUT /_all/_settings with no index was acknowledged")
	} else if diff := cmp.Diff(want404("no such index [null] and no indices exist", ""), summary(err)); diff != "" {
		t.Errorf("PUT /_all/_settings with no index (-want +got):\n%s", diff)
	}
	for _, n := range []string{"a-1", "a-2"} {
		if _, err := s.CreateIndex(CreateRequest{Name: n, Settings: FlatSettings{SettingReplicas: str("0")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.UpdateAliases([]AliasAction{{Add: true, Indices: []string{"a-1"}, Aliases: []string{"al"}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want errSummary
	}{
		{"PUT /nope*/_settings", s.PutSettings("nope*", FlatSettings{SettingReplicas: str("1")}, IndicesOptions{}),
			want404("no such index [nope*]", "nope*")},
		{"PUT /a-*,nope*/_settings", s.PutSettings("a-*,nope*", FlatSettings{SettingReplicas: str("1")}, IndicesOptions{}),
			want404("no such index [nope*]", "nope*")},
		{"add an alias to nope*", s.UpdateAliases([]AliasAction{{Add: true, Indices: []string{"nope*"}, Aliases: []string{"x"}}}),
			want404("no such index [nope*]", "nope*")},
		{"add an alias to the alias al", s.UpdateAliases([]AliasAction{{Add: true, Indices: []string{"al"}, Aliases: []string{"x"}}}),
			errSummary{TypeIllegalArgument, 400, "The provided expression [al] matches an alias, specify the corresponding concrete indices instead.", ""}},
	} {
		if diff := cmp.Diff(tc.want, summary(tc.err)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	// Nothing changed.
	for _, n := range []string{"a-1", "a-2"} {
		m, _ := s.Meta(n)
		if got := m.Settings[SettingReplicas]; got != "0" {
			t.Errorf("%s: number_of_replicas %q after the refused updates, want 0", n, got)
		}
		if _, ok := m.Aliases["x"]; ok {
			t.Errorf("%s has the alias x after the refused actions", n)
		}
	}
	// A search still resolves a wildcard that matches nothing to no index.
	if names, err := s.Resolve("nope*", IndicesOptions{}); err != nil || len(names) != 0 {
		t.Errorf("Resolve(nope*) = %v, %v; want no index and no error", names, err)
	}
}

type errSummary struct {
	Type   string
	Status int
	Reason string
	Index  string
}

func summary(err error) errSummary {
	if err == nil {
		return errSummary{}
	}
	e := AsError(err)
	return errSummary{e.Type, e.Status, e.Reason, e.Index}
}

func want404(reason, index string) errSummary {
	return errSummary{TypeIndexNotFound, 404, reason, index}
}
