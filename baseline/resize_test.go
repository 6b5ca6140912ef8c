package baseline

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
)

// Cluster.Resize must refuse what Prepare refuses: a source whose shards
// were split in place has no original shard to link for the split-off
// keys (the parent's store, if not yet retired, lacks every write made to
// the children after the handoff). The refusal is Prepare's
// illegal_argument_exception.
func TestResizeRefusesASourceSplitInPlace(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("source", 2, 0, 1)
	model := loadIndex(t, c, "source", s, 300)
	ix, _ := c.Index("source")
	n := ix.Node
	reserved, err := n.Apply(routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	parent, err := n.Store(0)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := reserved.Split(0)
	var ids []routing.ShardID
	for _, ch := range rec.Children {
		child, _, err := n.Engine().CreateChild(parent, ch.Shard, ch.Span)
		if err != nil {
			t.Fatal(err)
		}
		n.AddShard(child)
		ids = append(ids, ch.Shard)
	}
	if _, err := n.Apply(routing.Edit{Kind: routing.CommitSplit, Shard: 0, Children: ids}); err != nil {
		t.Fatal(err)
	}
	// Writes after the in-place split land on the children.
	w := c.NewAliasWriter("alias")
	for i := range 100 {
		id := fmt.Sprintf("after-%d", i)
		if _, err := w.Write(id, "", []byte("v-"+id), false); err != nil {
			t.Fatal(err)
		}
		model[id] = ""
	}
	if err := c.SetWriteBlock("source", true); err != nil {
		t.Fatal(err)
	}
	req := ResizeRequest{Op: routing.Split, Source: "source", Target: "target", TargetShards: 4, Cleanup: CleanupPerDoc}
	_, prepErr := Prepare(req, &Source{Node: n, WriteBlocked: true}, false)
	_, _, err = c.Resize(req)
	var re *routing.Error
	if !errors.As(err, &re) || re.Exception != routing.IllegalArgument || prepErr == nil || err.Error() != prepErr.Error() {
		t.Errorf("Cluster.Resize of a source split in place = %v; want Prepare's refusal %v", err, prepErr)
	}
	if err == nil {
		if err := c.PutAlias("alias", "target"); err != nil {
			t.Fatal(err)
		}
		checkIndex(t, c, "target", model)
	}
}

// A split of a one-shard index may set the target's
// number_of_routing_shards; the target's settings are then validated as
// OpenSearch's IndexMetadata.Builder.build validates any index's, naming
// the target: a routing_partition_size (copied from the source) that is not
// below the target's routing shards, or routing shards that are no multiple
// of the target's shards, is refused by Prepare with OpenSearch's message,
// before anything is built; Cluster.Resize refuses it the same way.
func TestPrepareValidatesTheTargetSettings(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		partition, shards, explicit int
		want                        string
	}{
		{"partition size not below the target's routing shards", 100, 2, 64,
			"routing partition size [100] should be a positive number less than the number of shards [64] for [target]"},
		{"routing shards no multiple of the target's shards", 1, 2, 3,
			"the number of source shards [2] must be a factor of [3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			s, err := routing.NewSettings("source", 1, 0, tc.partition)
			if err != nil {
				t.Fatal(err)
			}
			loadIndex(t, c, "source", s, 50)
			if err := c.SetWriteBlock("source", true); err != nil {
				t.Fatal(err)
			}
			src, _ := c.Index("source")
			req := ResizeRequest{Op: routing.Split, Source: "source", Target: "target", TargetShards: tc.shards,
				TargetRoutingShards: tc.explicit, Cleanup: CleanupRange}
			got, err := Prepare(req, &Source{Node: src.Node, WriteBlocked: true}, false)
			var re *routing.Error
			if !errors.As(err, &re) || re.Exception != routing.IllegalArgument || re.Message != tc.want {
				t.Errorf("Prepare = %+v, %v; want illegal_argument_exception %q", got, err, tc.want)
			}
			_, _, err = c.Resize(req)
			if !errors.As(err, &re) || re.Message != tc.want {
				t.Errorf("Cluster.Resize = %v; want %q", err, tc.want)
			}
		})
	}
}

// statFailFS fails Stat once armed (a compaction deleting a
// file between the directory listing and its stat, or an I/O error).
type statFailFS struct {
	vfs.FS
	armed atomic.Bool
}

var errStat = errors.New("injected: stat failed")

func (f *statFailFS) Stat(name string) (vfs.FileInfo, error) {
	if f.armed.Load() {
		return nil, errStat
	}
	return f.FS.Stat(name)
}

// A shrink with max_shard_size sizes its target from the source's store
// size. If that size cannot be measured, the target's shard count cannot
// be computed: Prepare must fail saying why, not size the target from
// whatever part of the store it managed to measure.
func TestPrepareReportsAnUnmeasurableSource(t *testing.T) {
	fs := &statFailFS{FS: vfs.NewMem()}
	n := sourceNode(t, fs, 4, 2000, []byte(strings.Repeat("v", 200)))
	max := int64(1)
	req := ResizeRequest{Op: routing.Shrink, Source: "source", Target: "target", MaxShardSize: &max}
	src := &Source{Node: n, WriteBlocked: true}
	want, err := Prepare(req, src, false)
	if err != nil {
		t.Fatalf("Prepare with a measurable source: %v", err)
	}
	fs.armed.Store(true)
	got, err := Prepare(req, src, false)
	if err == nil {
		t.Fatalf("Prepare with the source's store size unmeasurable = %d shards (measured: %d), nil; want an error", got.Shards, want.Shards)
	}
	if !errors.Is(err, errStat) {
		t.Errorf("Prepare's error %v does not carry the measuring error", err)
	}
}

// A split of a one-shard index may change number_of_routing_shards
// (OpenSearch derives the target's from the target's shard count, or takes
// an explicit one): every document must still be on the shard the target's
// formula names, once, and readable by its id and routing. Also with
// routing_partition_size > 1 and custom routing.
func TestSplitOfAOneShardIndexKeepsEveryDocumentReachable(t *testing.T) {
	tests := []struct {
		name                   string
		partition              int
		targetShards, explicit int
		cleanup                Cleanup
	}{
		{"1->3 default routing shards, range", 1, 3, 0, CleanupRange},
		{"1->3 default routing shards, per-doc", 1, 3, 0, CleanupPerDoc},
		{"1->2 explicit 64 routing shards", 1, 2, 64, CleanupRange},
		{"1->4 default, partition 1", 1, 4, 0, CleanupRange},
		{"1->3 default, partition 4, per-doc", 4, 3, 0, CleanupPerDoc},
		{"1->3 default, partition 4, range", 4, 3, 0, CleanupRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			s, err := routing.NewSettings("source", 1, 0, tt.partition)
			if err != nil {
				t.Fatal(err)
			}
			model := loadIndex(t, c, "source", s, 600)
			_, err = c.Procedure("alias", ResizeRequest{Op: routing.Split, Source: "source", Target: "target",
				TargetShards: tt.targetShards, TargetRoutingShards: tt.explicit, Cleanup: tt.cleanup}, false)
			if err != nil {
				t.Fatalf("procedure: %v", err)
			}
			ix, _ := c.Index("target")
			t.Logf("source routing shards %d, target %+v", s.RoutingShards, ix.Settings())
			checkIndex(t, c, "target", model)
		})
	}
}

// Splitting and shrinking an index with routing_partition_size > 1 keeps
// every document reachable by (id, routing).
func TestResizeOfAPartitionedIndexKeepsEveryDocumentReachable(t *testing.T) {
	for _, tt := range []struct {
		name    string
		op      routing.ResizeOp
		shards  int
		target  int
		cleanup Cleanup
	}{
		{"split 2->4 per-doc", routing.Split, 2, 4, CleanupPerDoc},
		{"split 2->4 range", routing.Split, 2, 4, CleanupRange},
		{"shrink 4->2", routing.Shrink, 4, 2, CleanupRange},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			s, err := routing.NewSettings("source", tt.shards, 0, 2)
			if err != nil {
				t.Fatal(err)
			}
			model := loadIndex(t, c, "source", s, 600)
			_, err = c.Procedure("alias", ResizeRequest{Op: tt.op, Source: "source", Target: "target",
				TargetShards: tt.target, Cleanup: tt.cleanup, TargetPartitionSize: 0}, false)
			if err != nil {
				t.Fatalf("procedure: %v", err)
			}
			checkIndex(t, c, "target", model)
		})
	}
}

// A clone of a one-shard index created with explicit routing shards gets
// the default routing shards of one shard (TargetRoutingShards): its keys
// change too.
func TestCloneOfAOneShardIndexWithExplicitRoutingShards(t *testing.T) {
	c := newCluster(t)
	s, err := routing.NewSettings("source", 1, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	model := loadIndex(t, c, "source", s, 400)
	if _, err := c.Procedure("alias", ResizeRequest{Op: routing.Clone, Source: "source", Target: "target", Cleanup: CleanupRange}, false); err != nil {
		t.Fatalf("procedure: %v", err)
	}
	ix, _ := c.Index("target")
	t.Logf("source %+v, target %+v", s, ix.Settings())
	checkIndex(t, c, "target", model)
}

// A resize's target is the index once Build returns: the service persists
// its metadata next and acknowledges the resize, and the user may delete
// the source. So Build must return a durable target whatever the engine's
// durability: a shrink's copied sources and a one-shard split's rewritten
// documents are written with the engine's (async) durability, and unless
// Build syncs them a power loss after the resize loses them from the
// target.
func TestResizeBuildIsDurable(t *testing.T) {
	for _, tc := range []struct {
		name                string
		op                  routing.ResizeOp
		sourceShards, to    int
		targetRoutingShards int
	}{
		{"shrink 4 -> 1 (copied sources)", routing.Shrink, 4, 1, 0},
		{"split 1 -> 2, routing shards changed (rewritten)", routing.Split, 1, 2, 64},
		{"split 2 -> 4 (linked and trimmed)", routing.Split, 2, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := crashfs.New()
			fs := disk.FS(nil)
			const docs = 500
			n := sourceNode(t, fs, tc.sourceShards, docs, []byte("v"))
			req := ResizeRequest{Op: tc.op, Source: "source", Target: "target", TargetShards: tc.to,
				TargetRoutingShards: tc.targetRoutingShards, Cleanup: CleanupRange}
			target, err := Prepare(req, &Source{Node: n, WriteBlocked: true}, false)
			if err != nil {
				t.Fatal(err)
			}
			// Async durability whose interval never comes within the test.
			dstOpts := storage.Options{Dir: "/dst", FS: fs, CacheBytes: 1 << 20, Durability: storage.DurabilityAsync, SyncEvery: time.Hour}
			dstEng, err := storage.Open(dstOpts)
			if err != nil {
				t.Fatal(err)
			}
			defer dstEng.Close()
			var rep ResizeReport
			ttab, err := Build(req, n, dstEng, target, &rep)
			if err != nil {
				t.Fatal(err)
			}

			crashed := disk.Crash(0, 0) // a power loss once Build has returned
			dstOpts.FS = crashed.FS(nil)
			after, err := storage.Open(dstOpts)
			if err != nil {
				t.Fatal(err)
			}
			defer after.Close()
			total := 0
			for id := range ttab.Settings().Shards {
				sid := routing.ShardID(id)
				sh, err := after.OpenShard(sid, ttab.Keyspace(sid), []routing.Span{ttab.RootSpan(sid)})
				if err != nil {
					t.Fatal(err)
				}
				if err := sh.Scan(func(storage.Doc) error { total++; return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if total != docs {
				t.Errorf("after a power loss once Build returned, the target holds %d of the source's %d documents", total, docs)
			}
		})
	}
}

// pausedBackend holds a write between the client's alias resolution and
// its arrival at the node: a request in flight (a network delay).
type pausedBackend struct {
	n               *node.Node
	arrived, resume chan struct{}
}

func (b *pausedBackend) Write(r node.WriteRequest) (uint64, error) {
	close(b.arrived)
	<-b.resume
	return b.n.Write(r)
}

func (b *pausedBackend) Get(r node.GetRequest) (storage.Doc, bool, error) { return b.n.Get(r) }

// A write that resolved the alias to the source before the procedure's
// alias swap and reaches the source after it must not be acknowledged by
// the source: the alias now names the target, which would never hold it
// (an acknowledged write lost through the alias). It must be refused by
// the source's block and retried through the alias, landing in the target.
func TestAWriteInFlightAcrossTheAliasSwapLandsInTheTarget(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("source", 2, 0, 1)
	model := loadIndex(t, c, "source", s, 200)
	src, _ := c.Index("source")
	w := c.NewAliasWriter("alias")
	b := &pausedBackend{n: src.Node, arrived: make(chan struct{}), resume: make(chan struct{})}
	w.routers.Store(src, node.NewRouter(b, src.Node.Table(), node.RouterConfig{}))
	written := make(chan error, 1)
	go func() {
		_, err := w.Write("late", "", []byte("v-late"), false)
		written <- err
	}()
	<-b.arrived // resolved to the source, not yet at its node
	if _, err := c.Procedure("alias", ResizeRequest{Op: routing.Split, Source: "source", Target: "target",
		TargetShards: 4, Cleanup: CleanupRange}, false); err != nil {
		t.Fatal(err)
	}
	close(b.resume)
	if err := <-written; err != nil {
		t.Fatalf("write in flight across the swap: %v", err)
	}
	model["late"] = ""
	d, found, err := node_get(c, "alias", "late", "")
	if err != nil || !found || string(d.Source) != "v-late" {
		t.Errorf("the acknowledged write is not readable through the alias after the swap: found %v, %v, %q", found, err, d.Source)
	}
	checkIndex(t, c, "target", model)
}
