package service

import (
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

// Resize takes the target's settings as FlatSettings, which the REST layer
// checks (ParseSettings) but a Go caller of the service need not have: a
// bad number was read as 0 (strconv.Atoi's error dropped), so a shrink to
// "abc" shards shrank to one, and an unknown setting or a bad value was
// stored in the target's metadata. The service must check the names and
// values itself, with ParseSettings' messages, before anything is built.
func TestReviewS22ResizeValidatesTheRequestSettings(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "src", Settings: FlatSettings{SettingShards: str("4"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSettings("src", FlatSettings{SettingBlockWrite: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		op     routing.ResizeOp
		set    FlatSettings
		reason string
	}{
		{"shrink to abc shards", routing.Shrink, FlatSettings{SettingShards: str("abc")},
			"Failed to parse value [abc] for setting [index.number_of_shards]"},
		{"clone with an unknown setting", routing.Clone, FlatSettings{"index.bogus": str("1")},
			"unknown setting [index.bogus] please check that any required plugins are installed, or check the breaking changes documentation for removed settings"},
		{"clone with -1 replicas", routing.Clone, FlatSettings{SettingReplicas: str("-1")},
			"Failed to parse value [-1] for setting [index.number_of_replicas] must be >= 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.Resize(ResizeRequest{Op: tc.op, Source: "src", Target: "t", Settings: tc.set})
			if err == nil {
				m, _ := s.Meta("t")
				_ = s.DeleteIndex("t", IndicesOptions{})
				t.Fatalf("the resize succeeded: target settings %v; want illegal_argument_exception %q", m.Settings, tc.reason)
			}
			if e := AsError(err); e.Type != TypeIllegalArgument || e.Reason != tc.reason {
				t.Fatalf("got %s %q, want %s %q", e.Type, e.Reason, TypeIllegalArgument, tc.reason)
			}
		})
	}
}

// A resize target is always in partition mode (its keys are linked from a
// partition-mode source). A request asking for another mode was obeyed in
// silence: the target was made in partition mode. It must be refused,
// naming the value, as OpenSearch refuses the settings a resize cannot
// honour (index.number_of_routing_shards, routing_partition_size).
func TestReviewS22ResizeRefusesAnotherMode(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "src", Settings: FlatSettings{SettingShards: str("2"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSettings("src", FlatSettings{SettingBlockWrite: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Resize(ResizeRequest{Op: routing.Clone, Source: "src", Target: "t", Settings: FlatSettings{SettingMode: str("opensearch")}})
	if err == nil {
		m, _ := s.Meta("t")
		t.Fatalf("a clone asking for index.shardsplit.mode opensearch succeeded with mode %s", m.Settings[SettingMode])
	}
	const reason = "cannot provide index.shardsplit.mode [opensearch] on resize: a new-index resize makes a partition-mode index"
	if e := AsError(err); e.Type != TypeIllegalArgument || e.Reason != reason {
		t.Fatalf("got %s %q, want %s %q", e.Type, e.Reason, TypeIllegalArgument, reason)
	}
	// Asking for the mode it gets is no error.
	if _, _, err := s.Resize(ResizeRequest{Op: routing.Clone, Source: "src", Target: "t", Settings: FlatSettings{SettingMode: str("partition")}}); err != nil {
		t.Fatalf("a clone asking for partition mode: %v", err)
	}
}
