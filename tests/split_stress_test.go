package tests

// Concurrent stress and linearizability of the online split and merge:
// writers with their own routers (some kept on stale tables) index, update
// and delete while a shard splits, one of its children splits again, the
// two grandchildren merge and the result merges with its sibling (so the
// root is one shard again, under a new id); afterwards
// every acknowledged write must be present exactly once, at the shard the
// final table names, with its latest value.

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/tests/simkit"
)

// cluster is a node on an in-memory filesystem.
type cluster struct {
	node  *node.Node
	first *routing.Table
}

func newCluster(t *testing.T, mode routing.Mode, layout storage.Layout) *cluster {
	t.Helper()
	tab, err := routing.NewTable(mode, routing.Settings{Shards: 4, RoutingShards: 256, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := storage.Open(storage.Options{Dir: "/data", FS: vfs.NewMem(), Layout: layout, CacheBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Config{Engine: eng, Table: tab})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{node: n, first: tab}
}

// writer drives one goroutine's writes; it owns its ids.
type writer struct {
	id      int
	stale   bool         // keeps going back to the first table
	model   *model.Model // shared by all writers
	routing map[string]string
	acks    int
	errs    []error
	router  *node.Router
}

func (w *writer) run(c *cluster, stop *atomic.Bool, rng *rand.Rand) {
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%d-doc%d", w.id, i)
		w.routing[ids[i]] = ""
		w.model.Load(ids[i], model.Absent) // checked even if never written
		if i%5 == 0 {
			w.routing[ids[i]] = fmt.Sprintf("tenant-%d", i%3) // custom routing
		}
	}
	for k := 0; !stop.Load(); k++ {
		if w.stale && k%10 == 0 {
			// Deliberately stale: forget everything learned since v1.
			w.router = node.NewRouter(c.node, c.first, node.RouterConfig{MaxRetries: 16})
		}
		id := ids[rng.IntN(len(ids))]
		var mw *model.Write
		var err error
		if rng.IntN(4) == 0 {
			mw = w.model.Attempt(id, model.Absent)
			_, err = w.router.Delete(id, w.routing[id])
		} else {
			v := fmt.Appendf(nil, "w%d-v%d", w.id, k)
			mw = w.model.Attempt(id, model.Doc(v))
			_, err = w.router.Index(id, w.routing[id], v)
		}
		if err != nil {
			w.model.Fail(mw)
			w.errs = append(w.errs, err)
			return
		}
		w.model.Ack(mw)
		w.acks++
	}
}

// splitAndNest splits shard 0 into two, then splits the first child again,
// then merges the two grandchildren, then merges that with the other
// child: root 0 ends as one shard with a new id.
func splitAndNest(t *testing.T, c *cluster) []splitter.Report {
	d := splitter.NewDriver(c.node, splitter.Config{Logger: zaptest.NewLogger(t)})
	var reports []splitter.Report
	for _, parent := range []routing.ShardID{0, 0xffffffff} {
		if parent == 0xffffffff { // the first child of the first split
			parent = reports[0].SortedTargets()[0]
		}
		time.Sleep(30 * time.Millisecond)
		r, err := d.Run(splitter.SplitPlan(parent, 2))
		if err != nil || r.Phase != splitter.PhaseDone {
			t.Fatalf("split of %d: %v (phase %s, %v)", parent, err, r.Phase, r.Err)
		}
		reports = append(reports, r)
	}
	grandchildren := reports[1].SortedTargets()
	other := reports[0].SortedTargets()[1]
	for _, sources := range [][]routing.ShardID{grandchildren, {0xffffffff, other}} {
		if sources[0] == 0xffffffff { // the target of the first merge
			sources[0] = reports[2].Targets[0]
		}
		time.Sleep(30 * time.Millisecond)
		r, err := d.Run(splitter.MergePlan(sources...))
		if err != nil || r.Phase != splitter.PhaseDone {
			t.Fatalf("merge of %v: %v (phase %s, %v)", sources, err, r.Phase, r.Err)
		}
		reports = append(reports, r)
	}
	if leaves := c.node.Table().Leaves(0); len(leaves) != 1 || leaves[0].Shard != reports[3].Targets[0] {
		t.Fatalf("root 0 after the merges: %v, want one leaf %d", leaves, reports[3].Targets[0])
	}
	return reports
}

func TestSplitUnderConcurrentWrites(t *testing.T) {
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
			t.Run(fmt.Sprintf("mode=%s/layout=%s", mode, layout), func(t *testing.T) {
				stressOnce(t, mode, layout)
			})
		}
	}
}

func stressOnce(t *testing.T, mode routing.Mode, layout storage.Layout) {
	c := newCluster(t, mode, layout)
	defer c.node.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	writers := make([]*writer, 10)
	m := model.New(model.Options{})
	for i := range writers {
		w := &writer{id: i, stale: i%3 == 0, model: m, routing: map[string]string{}}
		w.router = node.NewRouter(c.node, c.first, node.RouterConfig{MaxRetries: 16})
		writers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(c, &stop, rand.New(rand.NewPCG(uint64(i), 42)))
		}()
	}
	reports := splitAndNest(t, c)
	// Stop at once: the last merge's catch-up and tail hold the final
	// value of some ids, so a write it failed to carry over shows.
	stop.Store(true)
	wg.Wait()

	final := c.node.Table()
	var retries int64
	acks := 0
	for _, w := range writers {
		for _, err := range w.errs {
			t.Errorf("writer %d: %v", w.id, err)
		}
		retries += w.router.Retries()
		acks += w.acks
	}
	// recovery.Check: the final table is valid with no split in progress, no
	// (per-shard) store holds a key outside its final span — nothing was
	// applied by a shard that did not own the key — and every document is
	// found exactly once, at the shard the final table names.
	found := map[string]model.Value{}
	rep := recovery.Check(c.node, nil, func(_ routing.ShardID, d storage.Doc) { found[d.ID] = model.Doc(d.Source) })
	for _, v := range rep.Violations {
		t.Error(v)
	}
	// Every id in the state of its last acknowledged write (no write is in
	// flight now), and nothing else in the index.
	mr, err := m.Check(m.Latest(), found)
	if err != nil {
		t.Fatal(err)
	}
	if !mr.OK() {
		t.Errorf("model: %d lost, %d unexpected, %d wrong of %d ids", mr.Lost, mr.Unexpected, mr.Wrong, mr.Checked)
	}
	for _, x := range mr.Mismatches {
		t.Errorf("model: %s", x)
	}
	// A routed get through the final table agrees with the scan.
	r := node.NewRouter(c.node, final, node.RouterConfig{})
	for _, w := range writers {
		for id, rv := range w.routing {
			d, ok, err := r.Get(id, rv)
			got := model.Absent
			if ok {
				got = model.Doc(d.Source)
			}
			if err != nil || got != found[id] {
				t.Errorf("get %s: %s (err %v), the scan found %s", id, got, err, found[id])
			}
		}
	}
	if retries == 0 {
		t.Errorf("no stale-routing rejection happened; the fence was not exercised")
	}
	t.Logf("%d acked writes, %d ids checked, %d fence rejections (router retries), stalls split %v / %v merge %v / %v, table v%d, %d shards",
		acks, mr.Checked, retries, reports[0].Stall, reports[1].Stall, reports[2].Stall, reports[3].Stall, final.Version(), len(final.ActiveShards()))
}

// TestSplitLinearizable records per-key register operations (index and get)
// from concurrent clients across a split, a nested split and two merges,
// and checks the history with porcupine.
func TestSplitLinearizable(t *testing.T) {
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		t.Run("mode="+mode.String(), func(t *testing.T) {
			c := newCluster(t, mode, storage.LayoutPerShard)
			defer c.node.Close()
			keys := make([]string, 12)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
			}
			var mu sync.Mutex
			history := simkit.History{Sample: keys}
			var stop atomic.Bool
			var wg sync.WaitGroup
			start := time.Now()
			for client := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := node.NewRouter(c.node, c.first, node.RouterConfig{MaxRetries: 16})
					rng := rand.New(rand.NewPCG(uint64(client), 7))
					for i := 0; !stop.Load(); i++ {
						key := keys[rng.IntN(len(keys))]
						write := rng.IntN(2) == 0
						call := time.Since(start).Nanoseconds()
						var value string
						var err error
						if write {
							value = fmt.Sprintf("c%d-%d", client, i)
							_, err = r.Index(key, "", []byte(value))
						} else {
							var d storage.Doc
							var found bool
							d, found, err = r.Get(key, "")
							if found {
								value = string(d.Source)
							}
						}
						ret := time.Since(start).Nanoseconds()
						if err != nil {
							t.Errorf("client %d: %v", client, err)
							return
						}
						mu.Lock()
						if write {
							history.Write(client, key, value, call, ret)
						} else {
							history.Read(client, key, value, call, ret)
						}
						mu.Unlock()
					}
				}()
			}
			splitAndNest(t, c)
			time.Sleep(20 * time.Millisecond)
			stop.Store(true)
			wg.Wait()
			res := history.Check(60 * time.Second)
			if res != porcupine.Ok {
				t.Fatalf("history of %d operations is not linearizable: %v", len(history.Ops), res)
			}
			t.Logf("%d operations on %d keys across 2 splits and 2 merges: linearizable", len(history.Ops), len(keys))
		})
	}
}
