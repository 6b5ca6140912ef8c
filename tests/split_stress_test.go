package tests

// Concurrent stress and linearizability of the online split: writers with
// their own routers (some kept on stale tables) index, update and delete
// while a shard splits and one of its children splits again; afterwards
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

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
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

// ownerOf returns the shard that owns id in a table.
func ownerOf(t *routing.Table, id, routingValue string) routing.ShardID {
	_, s := t.Route(id, routingValue)
	return s
}

// idState is the model of one id: its last acknowledged write.
type idState struct {
	routing string
	value   string // "" = deleted or never written
	acked   bool
}

// writer drives one goroutine's writes; it owns its ids.
type writer struct {
	id     int
	stale  bool // keeps going back to the first table
	model  map[string]*idState
	acks   int
	errs   []error
	router *node.Router
}

func (w *writer) run(c *cluster, stop *atomic.Bool, rng *rand.Rand) {
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%d-doc%d", w.id, i)
		w.model[ids[i]] = &idState{}
		if i%5 == 0 {
			w.model[ids[i]].routing = fmt.Sprintf("tenant-%d", i%3) // custom routing
		}
	}
	for k := 0; !stop.Load(); k++ {
		if w.stale && k%10 == 0 {
			// Deliberately stale: forget everything learned since v1.
			w.router = node.NewRouter(c.node, c.first, node.RouterConfig{MaxRetries: 16})
		}
		id := ids[rng.IntN(len(ids))]
		st := w.model[id]
		var err error
		if rng.IntN(4) == 0 {
			_, err = w.router.Delete(id, st.routing)
			if err == nil {
				st.value, st.acked = "", true
			}
		} else {
			v := fmt.Sprintf("w%d-v%d", w.id, k)
			_, err = w.router.Index(id, st.routing, []byte(v))
			if err == nil {
				st.value, st.acked = v, true
			}
		}
		if err != nil {
			w.errs = append(w.errs, err)
			return
		}
		w.acks++
	}
}

// splitAndNest splits shard 0 into two, then splits the first child again.
func splitAndNest(t *testing.T, c *cluster) []splitter.Report {
	d := splitter.NewDriver(c.node, splitter.Config{Logger: zaptest.NewLogger(t)})
	var reports []splitter.Report
	for _, parent := range []routing.ShardID{0, 0xffffffff} {
		if parent == 0xffffffff { // the first child of the first split
			parent = reports[0].SortedChildren()[0]
		}
		time.Sleep(30 * time.Millisecond)
		r, err := d.Run(splitter.Plan{Parent: parent, Ways: 2})
		if err != nil || r.Phase != splitter.PhaseDone {
			t.Fatalf("split of %d: %v (phase %s, %v)", parent, err, r.Phase, r.Err)
		}
		reports = append(reports, r)
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
	for i := range writers {
		w := &writer{id: i, stale: i%3 == 0, model: map[string]*idState{}}
		w.router = node.NewRouter(c.node, c.first, node.RouterConfig{MaxRetries: 16})
		writers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(c, &stop, rand.New(rand.NewPCG(uint64(i), 42)))
		}()
	}
	reports := splitAndNest(t, c)
	time.Sleep(30 * time.Millisecond)
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
	// Every document, exactly once, at the shard the final table names.
	seen := map[string]routing.ShardID{}
	_, err := c.node.Search(func(shard routing.ShardID, d storage.Doc) error {
		if prev, dup := seen[d.ID]; dup {
			t.Errorf("document %s found on shards %d and %d", d.ID, prev, shard)
		}
		seen[d.ID] = shard
		if want := ownerOf(final, d.ID, d.Routing); want != shard {
			t.Errorf("document %s on shard %d, final table says %d", d.ID, shard, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, w := range writers {
		for id, st := range w.model {
			if !st.acked {
				continue
			}
			checked++
			r := node.NewRouter(c.node, final, node.RouterConfig{})
			d, found, err := r.Get(id, st.routing)
			switch {
			case err != nil:
				t.Errorf("get %s: %v", id, err)
			case st.value == "" && found:
				t.Errorf("%s: deleted, but found %q", id, d.Source)
			case st.value != "" && (!found || string(d.Source) != st.value):
				t.Errorf("%s: want %q, found=%v %q", id, st.value, found, d.Source)
			}
		}
	}
	// No store holds a key outside its final span: nothing was applied by a
	// shard that did not own the key.
	for _, id := range final.ActiveShards() {
		s, _ := c.node.ShardStore(id)
		o, _ := final.Shard(id)
		for _, foreign := range complement(final.RootSpan(o.Root), o.Span) {
			if n, _ := s.CountKeys(foreign); n != 0 && layout == storage.LayoutPerShard {
				t.Errorf("shard %d holds %d keys outside its span", id, n)
			}
		}
	}
	if retries == 0 {
		t.Errorf("no stale-routing rejection happened; the fence was not exercised")
	}
	t.Logf("%d acked writes, %d ids checked, %d fence rejections (router retries), stalls %v / %v, table v%d, %d shards",
		acks, checked, retries, reports[0].Stall, reports[1].Stall, final.Version(), len(final.ActiveShards()))
}

// complement returns the parts of outer not covered by inner.
func complement(outer, inner routing.Span) []routing.Span {
	var out []routing.Span
	if inner.Start > outer.Start {
		out = append(out, routing.Span{Start: outer.Start, End: inner.Start})
	}
	if inner.End < outer.End {
		out = append(out, routing.Span{Start: inner.End, End: outer.End})
	}
	return out
}

// registerInput is a porcupine register operation on one key.
type registerInput struct {
	key   string
	write bool
	value string
}

// TestSplitLinearizable records per-key register operations (index and get)
// from concurrent clients across a split and a nested split, and checks the
// history with porcupine.
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
			var history []porcupine.Operation
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
						in := registerInput{key: keys[rng.IntN(len(keys))]}
						call := time.Since(start).Nanoseconds()
						var out string
						var err error
						if rng.IntN(2) == 0 {
							in.write, in.value = true, fmt.Sprintf("c%d-%d", client, i)
							_, err = r.Index(in.key, "", []byte(in.value))
						} else {
							var d storage.Doc
							var found bool
							d, found, err = r.Get(in.key, "")
							if found {
								out = string(d.Source)
							}
						}
						ret := time.Since(start).Nanoseconds()
						if err != nil {
							t.Errorf("client %d: %v", client, err)
							return
						}
						mu.Lock()
						history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
						mu.Unlock()
					}
				}()
			}
			splitAndNest(t, c)
			time.Sleep(20 * time.Millisecond)
			stop.Store(true)
			wg.Wait()
			res := porcupine.CheckOperationsTimeout(registerModel, history, 60*time.Second)
			if res != porcupine.Ok {
				t.Fatalf("history of %d operations is not linearizable: %v", len(history), res)
			}
			t.Logf("%d operations on %d keys across 2 splits: linearizable", len(history), len(keys))
		})
	}
}

var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(registerInput).key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(registerInput)
		if in.write {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(registerInput)
		if in.write {
			return fmt.Sprintf("put(%s, %s)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %q", in.key, output)
	},
}
