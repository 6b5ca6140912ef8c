package service

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/splitter"
)

// CreateIndex and PutSettings check the setting names and values they are
// given, not only the REST layer's ParseSettings: an unknown name or a bad
// value is refused with OpenSearch's message, whoever calls.
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
		{"unknown replica split strategy", FlatSettings{"index.shardsplit.replica_split": str("copy-all")}, "copy-all"},
	} {
		if _, err := s.CreateIndex(CreateRequest{Name: "a", Settings: tc.set}); err == nil || !strings.Contains(err.Error(), tc.want) {
			m, _ := s.Meta("a")
			t.Errorf("create with %s setting: %v (index %+v), want an error naming %q", tc.name, err, m, tc.want)
			_ = s.DeleteIndex("a", IndicesOptions{})
		}
	}
	if _, err := s.CreateIndex(CreateRequest{Name: "b", Settings: FlatSettings{"index.shardsplit.replica_split": str("local")}}); err != nil {
		t.Fatal(err)
	}
	for _, set := range []FlatSettings{{"index.bogus": str("1")}, {SettingReplicas: str("-1")}} {
		if err := s.PutSettings("b", set, IndicesOptions{}); err == nil {
			m, _ := s.Meta("b")
			t.Errorf("put settings %v: accepted; settings now %v", set, m.Settings)
		}
	}
}

// TestWriteBlockDuringASplitTakesEffect: a write block set while an
// in-place split hands off takes effect and is acknowledged. The block
// drains every shard of the table it read; a shard the split retires
// meanwhile must not fail the drain ("no shard 1", "shard closed"), which
// would answer PUT _settings with a 500 and lift the block again. Here
// shard 0's apply lock is held (as an in-flight write would) while the
// split of shard 1 publishes and retires its parent.
func TestWriteBlockDuringASplitTakesEffect(t *testing.T) {
	atFence := make(chan struct{})
	release := make(chan struct{})
	s, err := Open(Config{Dir: t.TempDir(), SplitHook: func(index string, phase splitter.Phase, next splitter.Intent) {
		if next.Kind == splitter.IntentFence {
			close(atFence)
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateIndex(CreateRequest{Name: "b", Settings: FlatSettings{SettingShards: str("2"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := s.IndexDoc("b", fmt.Sprintf("d%d", i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	task, err := s.StartSplit(SplitRequest{Index: "b", Shard: 1, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	<-atFence
	ix, _ := s.index("b")
	held := make(chan struct{})
	unhold := make(chan struct{})
	go func() {
		_, _ = ix.node.HoldApplyLock(0, 30*time.Second, func() error {
			close(held)
			<-unhold
			return nil
		})
	}()
	<-held
	blocked := make(chan error, 1)
	go func() { blocked <- s.PutSettings("b", FlatSettings{SettingBlockWrite: str("true")}, IndicesOptions{}) }()
	time.Sleep(200 * time.Millisecond) // the block waits for shard 0
	close(release)
	select {
	case <-task.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the split did not end")
	}
	if e := task.Status().Err; e != nil {
		t.Fatalf("split: %v", e)
	}
	close(unhold)
	select {
	case err := <-blocked:
		if err != nil {
			t.Fatalf("write block during the split: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the write block never returned")
	}
	tab, _ := s.Table("b")
	if _, ok := tab.Shard(1); ok {
		t.Fatalf("shard 1 still active after its split: %v", tab.ActiveShards())
	}
	_, err = s.IndexDoc("b", "after", "", []byte(`{}`), WriteOptions{})
	var be *BlockError
	if !errors.As(err, &be) {
		t.Fatalf("a write after the block: %v, want the block", err)
	}
}
