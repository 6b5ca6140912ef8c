package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

// TestAResizeEndingAfterCloseInstallsNothing: a resize that finishes after
// Close began must not install its target into the closed service. Close
// swaps the index map and waits for the source (the resize holds its
// splitMu); a target whose metadata the resize then persisted and whose
// open node it put in the new map would never be closed (its Pebble stores
// open and locked: reopening the directory in the same process fails).
func TestAResizeEndingAfterCloseInstallsNothing(t *testing.T) {
	for it := range 10 {
		dir := t.TempDir()
		s := openT(t, dir)
		if _, err := s.CreateIndex(CreateRequest{Name: "src", Settings: FlatSettings{SettingShards: str("2"), SettingReplicas: str("0")}}); err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			if _, err := s.IndexDoc("src", fmt.Sprintf("d%d", i), "", []byte(`{}`), WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutSettings("src", FlatSettings{SettingBlockWrite: str("true")}, IndicesOptions{}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := s.Resize(ResizeRequest{Op: routing.Split, Source: "src", Target: "dst", Settings: FlatSettings{SettingShards: str("4")}})
			done <- err
		}()
		time.Sleep(time.Duration(1+it%4) * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		resizeErr := <-done
		s.mu.RLock()
		left := len(s.indices)
		s.mu.RUnlock()
		if left != 0 {
			t.Fatalf("iteration %d: the resize (%v) installed its target after Close: %d open indices left in the closed service", it, resizeErr, left)
		}
		s2, err := Open(Config{Dir: dir})
		if err != nil {
			t.Fatalf("iteration %d: reopen after a close during a resize (%v): %v", it, resizeErr, err)
		}
		if names := s2.Names(); resizeErr != nil && len(names) != 1 {
			t.Errorf("iteration %d: a refused resize left %v", it, names)
		}
		r, err := s2.Search(SearchRequest{Indices: "src", Size: -1})
		if err != nil || r.Total != 200 {
			t.Errorf("iteration %d: src after reopen: %d %v", it, r.Total, err)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Resize takes the target's settings as FlatSettings, which the REST layer
// checks (ParseSettings) but a Go caller of the service need not have: the
// service checks the names and values itself, with ParseSettings'
// messages, before anything is built (a bad number read as 0 would shrink
// to one shard; an unknown setting or a bad value would be stored in the
// target's metadata).
func TestResizeValidatesTheRequestSettings(t *testing.T) {
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
// partition-mode source). A request asking for another mode is refused,
// naming the value, as OpenSearch refuses the settings a resize cannot
// honour (index.number_of_routing_shards, routing_partition_size), not
// obeyed in silence.
func TestResizeRefusesAnotherMode(t *testing.T) {
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
