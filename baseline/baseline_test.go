package baseline

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

func loadJSON(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

type wantError struct {
	Type          string `json:"type"`
	Message       string `json:"message"`
	MessagePrefix string `json:"message_prefix"`
}

func (w *wantError) check(err error) error {
	var e *routing.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("error %v, want %s %q", err, w.Type, w.Message+w.MessagePrefix)
	}
	if e.Exception.String() != w.Type || (w.Message != "" && e.Message != w.Message) ||
		(w.MessagePrefix != "" && !strings.HasPrefix(e.Message, w.MessagePrefix)) {
		return fmt.Errorf("%s %q, want %s %q", e.Exception, e.Message, w.Type, w.Message+w.MessagePrefix)
	}
	return nil
}

func newCluster(t *testing.T) *Cluster {
	t.Helper()
	c := NewCluster(Config{Dir: t.TempDir(), Durability: storage.DurabilityAsync, Logger: zaptest.NewLogger(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sourceNode opens a node of a new index "source" of shards shards in /src
// on fs, outside any cluster (for Prepare and Build, which take a node),
// and indexes docs documents doc-0, doc-1, … of source value through it.
// The node is closed when the test ends.
func sourceNode(t *testing.T, fs vfs.FS, shards, docs int, value []byte) *node.Node {
	t.Helper()
	eng, err := storage.Open(storage.Options{Dir: "/src", FS: fs, CacheBytes: 1 << 20, Layout: storage.LayoutPerShard})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := routing.NewSettings("source", shards, 0, 1)
	tab, _ := routing.NewTable(routing.ModePartition, s)
	n, err := node.Open(node.Config{Engine: eng, Table: tab})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	r := node.NewRouter(n, tab, node.RouterConfig{})
	for i := range docs {
		if _, err := r.Index(fmt.Sprintf("doc-%d", i), "", value); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// TestResizeValidationVectors replays resize_validation.json through
// Cluster.Resize: real source (and target) indices with the vector's shard
// counts and write block.
func TestResizeValidationVectors(t *testing.T) {
	var f struct {
		Vectors []struct {
			Op             string         `json:"operation"`
			SourceExists   *bool          `json:"source_exists"`
			TargetExists   bool           `json:"target_exists"`
			SourceName     string         `json:"source_name"`
			TargetName     string         `json:"target_name"`
			SourceShards   int            `json:"source_number_of_shards"`
			SourceRouting  int            `json:"source_routing_num_shards"`
			WriteBlocked   *bool          `json:"source_write_blocked"`
			TargetShards   *int           `json:"target_number_of_shards"`
			AllOnOneNode   *bool          `json:"all_source_shards_started_on_one_node"`
			Layer          string         `json:"layer"`
			MaxShardSize   *int64         `json:"max_shard_size"`
			PerShardDocs   []int64        `json:"per_source_shard_docs"`
			SoftDeletes    *bool          `json:"source_soft_deletes"`
			TargetSettings map[string]any `json:"target_settings"`
			Err            *wantError     `json:"expected_error"`
		} `json:"vectors"`
	}
	loadJSON(t, "resize_validation.json", &f)
	for i, v := range f.Vectors {
		t.Run(fmt.Sprintf("%d-%s", i, v.Op), func(t *testing.T) {
			c := newCluster(t)
			src, tgt := v.SourceName, v.TargetName
			if src == "" {
				src, tgt = "source", "target"
			}
			if v.SourceExists == nil || *v.SourceExists {
				r := v.SourceRouting
				if r == 0 {
					r = v.SourceShards
				}
				if _, err := c.CreateIndex(src, routing.Settings{Shards: v.SourceShards, RoutingShards: r, PartitionSize: 1}); err != nil {
					t.Fatal(err)
				}
				if v.WriteBlocked == nil || *v.WriteBlocked {
					if err := c.SetWriteBlock(src, true); err != nil {
						t.Fatal(err)
					}
				}
			}
			if v.TargetExists {
				if _, err := c.CreateIndex(tgt, routing.Settings{Shards: 1, RoutingShards: 1, PartitionSize: 1}); err != nil {
					t.Fatal(err)
				}
			}
			op, _ := routing.ParseResizeOp(v.Op)
			req := ResizeRequest{Op: op, Source: src, Target: tgt, Cleanup: CleanupRange, MaxShardSize: v.MaxShardSize,
				SourceShardDocs: v.PerShardDocs, SourceSoftDeletes: v.SoftDeletes}
			if v.Layer == "" {
				req.AllShardsOnOneNode = v.AllOnOneNode
			}
			if v.TargetShards != nil {
				req.TargetShards = *v.TargetShards
			}
			if n, ok := v.TargetSettings["index.number_of_routing_shards"].(float64); ok {
				req.TargetRoutingShards = int(n)
			}
			if b, ok := v.TargetSettings["index.soft_deletes.enabled"].(bool); ok {
				req.TargetSoftDeletes = &b
			}
			_, _, err := c.Resize(req)
			if v.Err != nil {
				if e := v.Err.check(err); e != nil {
					t.Error(e)
				}
			} else if err != nil {
				t.Errorf("unexpected error: %v", err)
			}
		})
	}
	t.Logf("resize_validation.json: %d vectors through Cluster.Resize", len(f.Vectors))
}

// TestSelectionVectors replays the selection vectors through the function
// Resize uses to pick each target shard's sources.
func TestSelectionVectors(t *testing.T) {
	type vec struct {
		T             int        `json:"target_shard_id"`
		Source        int        `json:"source_number_of_shards"`
		RoutingShards int        `json:"source_routing_num_shards"`
		Target        int        `json:"target_number_of_shards"`
		Want          *int       `json:"expected_source_shard"`
		WantShards    []int      `json:"expected_source_shards"`
		Err           *wantError `json:"expected_error"`
	}
	n := 0
	for file, op := range map[string]routing.ResizeOp{"split_select.json": routing.Split, "shrink_select.json": routing.Shrink, "clone_select.json": routing.Clone} {
		var f struct {
			Vectors []vec `json:"vectors"`
		}
		loadJSON(t, file, &f)
		for _, v := range f.Vectors {
			n++
			r := v.RoutingShards
			if r == 0 {
				r = v.Source
			}
			got, err := selectSources(op, v.T, routing.Settings{Shards: v.Source, RoutingShards: r, PartitionSize: 1}, v.Target)
			switch {
			case v.Err != nil:
				if e := v.Err.check(err); e != nil {
					t.Errorf("%s %+v: %v", file, v, e)
				}
			case err != nil:
				t.Errorf("%s %+v: %v", file, v, err)
			default:
				want := v.WantShards
				if v.Want != nil {
					want = []int{*v.Want}
				} else if want == nil {
					want = []int{v.T} // clone
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s %+v: sources %v, want %v", file, v, got, want)
				}
			}
		}
	}
	t.Logf("%d selection vectors through selectSources", n)
}

// TestShrinkTargetShardsVectors: a shrink without number_of_shards picks its
// target shard count from max_shard_size.
func TestShrinkTargetShardsVectors(t *testing.T) {
	var f struct {
		Vectors []struct {
			Max    *int64 `json:"max_shard_size_bytes"`
			Store  *int64 `json:"primaries_store_bytes"`
			Source int    `json:"source_number_of_shards"`
			Want   int    `json:"expected_target_shards"`
		} `json:"vectors"`
	}
	loadJSON(t, "shrink_target_shards.json", &f)
	for i, v := range f.Vectors {
		c := newCluster(t)
		if _, err := c.CreateIndex("src", routing.Settings{Shards: v.Source, RoutingShards: v.Source, PartitionSize: 1}); err != nil {
			t.Fatal(err)
		}
		_ = c.SetWriteBlock("src", true)
		store := v.Store
		if store == nil {
			zero := int64(0)
			store = &zero
		}
		_, rep, err := c.Resize(ResizeRequest{Op: routing.Shrink, Source: "src", Target: "dst", MaxShardSize: v.Max, SourceStoreBytes: store})
		if err != nil || rep.Target.Shards != v.Want {
			t.Errorf("vector %d: target shards %d (%v), want %d", i, rep.Target.Shards, err, v.Want)
		}
	}
	t.Logf("shrink_target_shards.json: %d vectors through Cluster.Resize", len(f.Vectors))
}

// loadIndex creates an index with docs documents (ids doc-N, a third with
// custom routing) and returns them.
func loadIndex(t *testing.T, c *Cluster, name string, s routing.Settings, docs int) map[string]string {
	t.Helper()
	if _, err := c.CreateIndex(name, s); err != nil {
		t.Fatal(err)
	}
	if err := c.PutAlias("alias", name); err != nil {
		t.Fatal(err)
	}
	w := c.NewAliasWriter("alias")
	model := map[string]string{}
	for i := range docs {
		id, r := fmt.Sprintf("doc-%d", i), ""
		if i%3 == 0 {
			r = fmt.Sprintf("tenant-%d", i%7)
		}
		if _, err := w.Write(id, r, []byte("v-"+id), false); err != nil {
			t.Fatal(err)
		}
		model[id] = r
	}
	return model
}

// checkIndex verifies every document is at the shard the formula names for
// the index, once, and readable through the alias.
func checkIndex(t *testing.T, c *Cluster, name string, model map[string]string) {
	t.Helper()
	ix, _ := c.Index(name)
	tab := ix.Node.Table()
	seen := map[string]bool{}
	_, err := ix.Node.Search(func(shard routing.ShardID, d storage.Doc) error {
		if seen[d.ID] {
			t.Errorf("%s: %s found twice", name, d.ID)
		}
		seen[d.ID] = true
		p := tab.Settings().Place(d.ID, d.Routing)
		if p.Root != shard {
			t.Errorf("%s: %s on shard %d, formula says %d", name, d.ID, shard, p.Root)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(model) {
		t.Errorf("%s holds %d documents, want %d", name, len(seen), len(model))
	}
	for id, r := range model {
		d, found, err := node_get(c, "alias", id, r)
		if err != nil || !found || string(d.Source) != "v-"+id {
			t.Errorf("get %s through the alias: %v %v %q", id, found, err, d.Source)
		}
	}
}

func node_get(c *Cluster, alias, id, r string) (storage.Doc, bool, error) {
	ix, err := c.Resolve(alias)
	if err != nil {
		return storage.Doc{}, false, err
	}
	w := c.NewAliasWriter(alias)
	return w.router(ix).Get(id, r)
}

func TestResizeEndToEnd(t *testing.T) {
	tests := []struct {
		name    string
		shards  int
		op      routing.ResizeOp
		target  int
		cleanup Cleanup
	}{
		{"split x2 per-doc", 4, routing.Split, 8, CleanupPerDoc},
		{"split x2 range", 4, routing.Split, 8, CleanupRange},
		{"split x4 per-doc", 2, routing.Split, 8, CleanupPerDoc},
		{"split x4 range", 2, routing.Split, 8, CleanupRange},
		{"shrink to 1", 4, routing.Shrink, 1, CleanupRange},
		{"clone", 4, routing.Clone, 4, CleanupRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			s, _ := routing.NewSettings("source", tt.shards, 0, 1)
			model := loadIndex(t, c, "source", s, 3000)
			rep, err := c.Procedure("alias", ResizeRequest{Op: tt.op, Source: "source", Target: "target",
				TargetShards: tt.target, Cleanup: tt.cleanup}, true)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Verified != len(model) {
				t.Errorf("procedure verified %d documents, want %d", rep.Verified, len(model))
			}
			if tt.op == routing.Split && tt.cleanup == CleanupPerDoc && rep.Resize.Deleted == 0 {
				t.Errorf("per-doc cleanup deleted nothing")
			}
			checkIndex(t, c, "target", model)
		})
	}
}

// TestWritersRetryThroughTheBlock: writers keep writing through the alias
// during a split procedure; every acknowledged write is in the target.
func TestWritersRetryThroughTheBlock(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("source", 2, 0, 1)
	model := loadIndex(t, c, "source", s, 500)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var retries int
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			aw := c.NewAliasWriter("alias")
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				n, err := aw.Write(id, "", []byte("v-"+id), false)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				model[id], retries = "", retries+n
				mu.Unlock()
			}
		}()
	}
	rep, err := c.Procedure("alias", ResizeRequest{Op: routing.Split, Source: "source", Target: "target", TargetShards: 4, Cleanup: CleanupPerDoc}, false)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if retries == 0 {
		t.Errorf("no writer saw the write block")
	}
	checkIndex(t, c, "target", model)
	steps := []string{}
	for _, s := range rep.Steps {
		steps = append(steps, s.Name)
	}
	if !slices.Equal(steps, []string{"write-block", "resize", "wait-consistent", "swap-alias"}) {
		t.Errorf("steps %v", steps)
	}
	t.Logf("blocked %v, %d retries, %d documents", rep.Blocked, retries, len(model))
}

func TestBlockErrorShape(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("x", 1, 0, 1)
	if _, err := c.CreateIndex("x", s); err != nil {
		t.Fatal(err)
	}
	_ = c.PutAlias("alias", "x")
	_ = c.SetWriteBlock("x", true)
	ix, _ := c.Resolve("alias")
	_, err := c.NewAliasWriter("alias").router(ix).Index("a", "", []byte("v"))
	var be *BlockError
	if !errors.As(err, &be) || be.Type() != "cluster_block_exception" ||
		err.Error() != "index [x] blocked by: [FORBIDDEN/8/index write (api)];" {
		t.Fatalf("write to a blocked index = %v", err)
	}
}
