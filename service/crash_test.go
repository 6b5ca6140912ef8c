package service

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/storage/crashfs"
)

// metadataCrash is the disk as a crash at one durable operation left it,
// with the number of metadata changes acknowledged before it.
type metadataCrash struct {
	disk  *crashfs.Disk
	acked int
	op    string // the operation the crash came before
}

// The service's metadata file is written on the data directory's
// filesystem, so a crash can land anywhere in its write: at every durable
// operation on the metadata or on an index directory while indices are
// created, changed, aliased and deleted, the disk is cloned as a power loss
// would leave it, and every clone must open with the metadata of the last
// change acknowledged before it, or of the one in flight (never a mix, never
// none), and no index directory the metadata does not name.
func TestMetadataSurvivesACrashAtEveryDurableOperation(t *testing.T) {
	disk := crashfs.New()
	var (
		mu      sync.Mutex
		crashes []metadataCrash
		armed   atomic.Bool
		acked   atomic.Int64
	)
	indices := filepath.Join("/data", "indices")
	fs := errorfs.Wrap(disk.FS(nil), errorfs.InjectorFunc(func(op errorfs.Op) error {
		meta := strings.HasPrefix(op.Path, filepath.Join("/data", stateDir))
		indexDir := filepath.Dir(op.Path) == indices
		if !armed.Load() || !crashfs.IsDurableOp(op.Kind) || !meta && !indexDir {
			return nil
		}
		c := metadataCrash{disk: disk.Crash(0, 0), acked: int(acked.Load()), op: fmt.Sprintf("%v %s", op.Kind, op.Path)}
		mu.Lock()
		crashes = append(crashes, c)
		mu.Unlock()
		return nil
	}))

	armed.Store(true)
	s, err := Open(Config{Dir: "/data", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	states := []string{describeMetadata(t, s)}
	changes := []func() error{
		func() error {
			_, err := s.CreateIndex(CreateRequest{Name: "a", Settings: FlatSettings{SettingShards: str("2")}})
			return err
		},
		func() error { return s.PutSettings("a", FlatSettings{SettingReplicas: str("0")}, IndicesOptions{}) },
		func() error {
			return s.UpdateAliases([]AliasAction{{Add: true, Indices: []string{"a"}, Aliases: []string{"logs"}}})
		},
		func() error {
			_, err := s.CreateIndex(CreateRequest{Name: "b"})
			return err
		},
		func() error { return s.DeleteIndex("a", IndicesOptions{}) },
	}
	for i, change := range changes {
		if err := change(); err != nil {
			t.Fatalf("change %d: %v", i+1, err)
		}
		acked.Add(1)
		states = append(states, describeMetadata(t, s))
	}
	armed.Store(false)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	onMetadata := 0
	for _, c := range crashes {
		if strings.Contains(c.op, stateFile) {
			onMetadata++
		}
		r, err := Open(Config{Dir: "/data", FS: c.disk.FS(nil)})
		if err != nil {
			t.Errorf("crash before %q (after %d changes): open: %v", c.op, c.acked, err)
			continue
		}
		got := describeMetadata(t, r)
		if want := states[c.acked:min(c.acked+2, len(states))]; !slices.Contains(want, got) {
			t.Errorf("crash before %q (after %d changes): metadata %s, want one of %q", c.op, c.acked, got, want)
		}
		// A crash before the first metadata was durable opens a new data
		// directory; any later one keeps its cluster.
		if c.acked > 0 && r.ClusterUUID() != s.ClusterUUID() {
			t.Errorf("crash before %q (after %d changes): cluster %s, was %s", c.op, c.acked, r.ClusterUUID(), s.ClusterUUID())
		}
		dirs, err := c.disk.FS(nil).List(indices)
		if err != nil {
			t.Fatal(err)
		}
		var uuids []string
		for _, name := range r.Names() {
			m, _ := r.Meta(name)
			uuids = append(uuids, m.UUID)
		}
		sort.Strings(dirs)
		sort.Strings(uuids)
		if !slices.Equal(dirs, uuids) {
			t.Errorf("crash before %q: index directories %v after the open, the metadata names %v", c.op, dirs, uuids)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if onMetadata == 0 {
		t.Fatalf("none of the %d crash points is on the metadata file %s: the test does not reach it", len(crashes), stateFile)
	}
	t.Logf("%d crash points, %d of them on the metadata file", len(crashes), onMetadata)
}

// describeMetadata prints what the metadata holds: each index with its
// uuid, shard and replica counts and aliases.
func describeMetadata(t *testing.T, s *Service) string {
	t.Helper()
	var parts []string
	for _, name := range s.Names() {
		m, ok := s.Meta(name)
		if !ok {
			t.Fatalf("index %s has no metadata", name)
		}
		aliases := make([]string, 0, len(m.Aliases))
		for a := range m.Aliases {
			aliases = append(aliases, a)
		}
		sort.Strings(aliases)
		parts = append(parts, fmt.Sprintf("%s(%s shards=%s replicas=%s aliases=%v)", name, m.UUID,
			m.Settings[SettingShards], m.Settings[SettingReplicas], aliases))
	}
	sort.Strings(parts)
	return "[" + strings.Join(parts, " ") + "]"
}
