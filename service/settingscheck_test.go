package service

import (
	"strings"
	"testing"
)

// CreateIndex and PutSettings called from Go stored any setting name and
// value: only the REST layer's ParseSettings checked them (the resize
// review found Resize the same, 445c255). An unknown name or a bad value is
// refused with OpenSearch's message, whoever calls.
func TestCreateAndPutSettingsCheckTheirSettings(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	for _, tc := range []struct {
		name string
		set  FlatSettings
		want string
	}{
		{"unknown", FlatSettings{"index.bogus": str("1")}, "index.bogus"},
		{"negative replicas", FlatSettings{SettingReplicas: str("-1")}, "-1"},
		{"shards not a number", FlatSettings{SettingShards: str("abc")}, "abc"},
	} {
		if _, err := s.CreateIndex(CreateRequest{Name: "a", Settings: tc.set}); err == nil || !strings.Contains(err.Error(), tc.want) {
			m, _ := s.Meta("a")
			t.Errorf("create with %s setting: %v (index %+v), want an error naming %q", tc.name, err, m, tc.want)
			_ = s.DeleteIndex("a", IndicesOptions{})
		}
	}
	if _, err := s.CreateIndex(CreateRequest{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	for _, set := range []FlatSettings{{"index.bogus": str("1")}, {SettingReplicas: str("-1")}} {
		if err := s.PutSettings("b", set, IndicesOptions{}); err == nil {
			m, _ := s.Meta("b")
			t.Errorf("put settings %v: accepted; settings now %v", set, m.Settings)
		}
	}
}
