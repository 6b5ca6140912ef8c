package clusternode

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
	"github.com/shardsplit/shardsplit/transport"
)

// loopbackNode is a node running as in a process: its own loop, an HTTP
// transport on loopback, Pebble copies on the OS filesystem.
type loopbackNode struct {
	name string
	dir  string
	tr   *transport.HTTP
	p    *Process
}

// httpEndpoint adds nothing to the HTTP transport but the method set a
// node needs.
type httpEndpoint struct{ *transport.HTTP }

func startLoopback(t *testing.T, name, dir string, seeds []string, addr string, managers []string) *loopbackNode {
	t.Helper()
	return startLoopbackTicking(t, name, dir, seeds, addr, managers, 20*time.Millisecond)
}

// startLoopbackTicking starts a node whose loop ticks every tick.
func startLoopbackTicking(t *testing.T, name, dir string, seeds []string, addr string, managers []string, tick time.Duration) *loopbackNode {
	t.Helper()
	inbox := Inbox()
	tr, err := transport.NewHTTP(transport.HTTPConfig{Name: name, Listen: addr, Deliver: func(m []transport.Message) { inbox <- m }})
	if err != nil {
		t.Fatal(err)
	}
	n, err := Open(Config{Name: name, DataDir: dir, FS: storage.DefaultFS(), TransportAddr: tr.Addr(), Seeds: seeds,
		InitialManagers: managers, Transport: httpEndpoint{tr}, Stores: Stores{FS: storage.DefaultFS(), CacheBytes: 1 << 20},
		Rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), Logger: zap.NewNop()})
	if err != nil {
		_ = tr.Close()
		t.Fatal(err)
	}
	return &loopbackNode{name: name, dir: dir, tr: tr, p: Run(n, inbox, clock.Real{}, tick)}
}

func (l *loopbackNode) stop(t *testing.T) {
	t.Helper()
	if err := l.p.Stop(); err != nil {
		t.Errorf("stop %s: %v", l.name, err)
	}
	if err := l.tr.Close(); err != nil {
		t.Errorf("close %s's transport: %v", l.name, err)
	}
}

// waitFor polls cond every 20 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within %v", what, d)
}

func TestNodesOverLoopbackFormAClusterAndFailOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nodes on loopback")
	}
	names := []string{"n1", "n2", "n3"}
	// Fixed free ports: each node's address is in every node's seeds.
	addrs := make([]string, 3)
	var nodes []*loopbackNode
	for i := range names {
		tr, err := transport.NewHTTP(transport.HTTPConfig{Name: "probe", Listen: "127.0.0.1:0", Deliver: func([]transport.Message) {}})
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = tr.Addr()
		_ = tr.Close()
	}
	base := t.TempDir()
	for i, name := range names {
		nodes = append(nodes, startLoopback(t, name, filepath.Join(base, name), addrs, addrs[i], names))
	}
	defer func() {
		for _, l := range nodes {
			if l != nil {
				l.stop(t)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitFor(t, 20*time.Second, "a cluster of three", func() bool {
		st, err := nodes[0].p.State()
		return err == nil && len(st.Nodes) == 3
	})
	if err := nodes[1].p.CreateIndex(ctx, "logs", map[string]string{"index.number_of_shards": "2", "index.number_of_replicas": "1"}, nil, 0); err != nil {
		t.Fatal(err)
	}
	green := func(l *loopbackNode) func() bool {
		return func() bool {
			st, err := l.p.State()
			return err == nil && st.Indices["logs"] != nil && st.Health().Indices["logs"].Status == cluster.Green
		}
	}
	waitFor(t, 20*time.Second, "logs green", green(nodes[0]))
	acked := map[string]string{}
	for i := range 30 {
		id, v := fmt.Sprint("d", i), fmt.Sprintf(`{"n":%d}`, i)
		if _, err := nodes[i%3].p.IndexDoc(ctx, "logs", id, "", []byte(v), false); err != nil {
			t.Fatalf("index %s through %s: %v", id, nodes[i%3].name, err)
		}
		acked[id] = v
	}
	st, _ := nodes[0].p.State()
	victim := primaryNode(st.Indices["logs"], 0)
	var vi int
	for i, l := range nodes {
		if l.name == victim {
			vi = i
		}
	}
	nodes[vi].stop(t)
	nodes[vi] = nil
	alive := nodes[(vi+1)%3]
	for i := 30; i < 40; i++ {
		id, v := fmt.Sprint("d", i), fmt.Sprintf(`{"n":%d}`, i)
		_, err := alive.p.IndexDoc(ctx, "logs", id, "", []byte(v), false)
		if errors.Is(err, ErrOutcomeUnknown) {
			// Sent to the stopped primary: the client writes again.
			_, err = alive.p.IndexDoc(ctx, "logs", id, "", []byte(v), false)
		}
		if err != nil {
			t.Fatalf("index %s after %s stopped: %v", id, victim, err)
		}
		acked[id] = v
	}
	for id, v := range acked {
		d, found, err := alive.p.GetDoc(ctx, "logs", id, "")
		if err != nil || !found || string(d.Source) != v {
			t.Fatalf("get %s after the failover = %q, %v, %v; want %s", id, d.Source, found, err, v)
		}
	}
	nodes[vi] = startLoopback(t, victim, filepath.Join(base, victim), addrs, addrs[vi], names)
	waitFor(t, 30*time.Second, "logs green with the node back", green(alive))
}

// BenchmarkReplicatedWrites measures writes through three nodes over
// loopback (one process), each with a replica, from 64 concurrent writers:
// the node machinery's cost without REST.
func BenchmarkReplicatedWrites(b *testing.B) {
	for _, replicas := range []int{0, 1} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			names := []string{"n1", "n2", "n3"}
			addrs := make([]string, 3)
			for i := range names {
				tr, err := transport.NewHTTP(transport.HTTPConfig{Name: "probe", Listen: "127.0.0.1:0", Deliver: func([]transport.Message) {}})
				if err != nil {
					b.Fatal(err)
				}
				addrs[i] = tr.Addr()
				_ = tr.Close()
			}
			base := b.TempDir()
			var nodes []*loopbackNode
			for i, name := range names {
				nodes = append(nodes, startLoopbackB(b, name, filepath.Join(base, name), addrs, addrs[i], names))
			}
			defer func() {
				for _, l := range nodes {
					_ = l.p.Stop()
					_ = l.tr.Close()
				}
			}()
			ctx := context.Background()
			for {
				st, _ := nodes[0].p.State()
				if st != nil && len(st.Nodes) == 3 {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := nodes[0].p.CreateIndex(ctx, "b", map[string]string{"index.number_of_shards": "3",
				"index.number_of_replicas": fmt.Sprint(replicas)}, nil, 0); err != nil {
				b.Fatal(err)
			}
			for {
				st, _ := nodes[0].p.State()
				if st.Indices["b"] != nil && st.Health().Indices["b"].Status == cluster.Green {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			src := []byte(`{"v":"` + strings.Repeat("x", 1000) + `"}`)
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if _, err := nodes[w%3].p.IndexDoc(ctx, "b", fmt.Sprint("d", i), "", src, false); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}

func startLoopbackB(b *testing.B, name, dir string, seeds []string, addr string, managers []string) *loopbackNode {
	inbox := Inbox()
	tr, err := transport.NewHTTP(transport.HTTPConfig{Name: name, Listen: addr, Deliver: func(m []transport.Message) { inbox <- m }})
	if err != nil {
		b.Fatal(err)
	}
	n, err := Open(Config{Name: name, DataDir: dir, FS: storage.DefaultFS(), TransportAddr: tr.Addr(), Seeds: seeds,
		InitialManagers: managers, Transport: httpEndpoint{tr}, Stores: Stores{FS: storage.DefaultFS(), CacheBytes: 8 << 20},
		Rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	return &loopbackNode{name: name, dir: dir, tr: tr, p: Run(n, inbox, clock.Real{}, 20*time.Millisecond)}
}

// TestNodesOverLoopbackSplitAReplicatedShardUnderWrites: three nodes in
// one process over loopback, Pebble copies on disk, a shard with a replica
// split in place while writers write through every node: the split hands
// off, the index ends green, and every acknowledged write reads back.
func TestNodesOverLoopbackSplitAReplicatedShardUnderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nodes on loopback")
	}
	names := []string{"n1", "n2", "n3"}
	addrs := make([]string, 3)
	for i := range names {
		tr, err := transport.NewHTTP(transport.HTTPConfig{Name: "probe", Listen: "127.0.0.1:0", Deliver: func([]transport.Message) {}})
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = tr.Addr()
		_ = tr.Close()
	}
	base := t.TempDir()
	var nodes []*loopbackNode
	for i, name := range names {
		// A process's tick (100 ms): a node answers the cluster manager's
		// checks within a second while it builds a child on a loaded
		// machine.
		nodes = append(nodes, startLoopbackTicking(t, name, filepath.Join(base, name), addrs, addrs[i], names, 100*time.Millisecond))
	}
	defer func() {
		for _, l := range nodes {
			l.stop(t)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitFor(t, 20*time.Second, "a cluster of three", func() bool {
		st, err := nodes[0].p.State()
		return err == nil && len(st.Nodes) == 3
	})
	if err := nodes[1].p.CreateIndex(ctx, "logs", map[string]string{"index.number_of_shards": "1", "index.number_of_replicas": "1",
		"index.number_of_routing_shards": "8"}, nil, 0); err != nil {
		t.Fatal(err)
	}
	state := func() *cluster.State {
		st, _ := nodes[0].p.State()
		return st
	}
	waitFor(t, 20*time.Second, "logs green", func() bool {
		st := state()
		return st != nil && st.Indices["logs"] != nil && st.Health().Indices["logs"].Status == cluster.Green
	})
	var (
		mu    sync.Mutex
		acked = map[string]string{}
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				id, v := fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf(`{"n":%d}`, i)
				if _, err := nodes[(w+i)%3].p.IndexDoc(ctx, "logs", id, "", []byte(v), false); err == nil {
					mu.Lock()
					acked[id] = v
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // writes before the split
	if err := nodes[2].p.SplitShard(ctx, "logs", 0, 2); err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("split: %v", err)
	}
	waitFor(t, 60*time.Second, "the split handed off and green", func() bool {
		st := state()
		im := st.Indices["logs"]
		_, handed := im.Handoffs[0]
		return handed && st.Health().Indices["logs"].Status == cluster.Green
	})
	stop.Store(true)
	wg.Wait()
	if len(acked) < 20 {
		t.Fatalf("only %d writes acknowledged", len(acked))
	}
	for id, v := range acked {
		d, found, err := nodes[0].p.GetDoc(ctx, "logs", id, "")
		if err != nil || !found || string(d.Source) != v {
			t.Fatalf("get %s after the split = %q, %v, %v; want %s", id, d.Source, found, err, v)
		}
	}
	res, err := nodes[1].p.Search(ctx, "logs", nil, 0)
	if err != nil || res.Total < len(acked) || res.Shards != 2 {
		t.Fatalf("search after the split: %d documents on %d shards, %v; want at least %d on 2", res.Total, res.Shards, err, len(acked))
	}
	t.Logf("%d writes acknowledged, %d documents", len(acked), res.Total)
}

// TestALoopKeptBusyByRequestsStillTicks: a tick drives the node's
// heartbeats to the cluster manager; a loop that always has another request
// waiting must still tick once per tick interval of work, or the cluster
// manager stops hearing a node that is busy serving and declares it left.
func TestALoopKeptBusyByRequestsStillTicks(t *testing.T) {
	const interval = 100 * time.Millisecond
	disk := crashfs.New()
	fs := disk.FS(nil)
	n, err := Open(Config{Name: "n1", DataDir: "/data", FS: fs, TransportAddr: "n1", Seeds: []string{"n1"},
		InitialManagers: []string{"n1"}, Transport: endpoint{transport.NewNetwork().Endpoint("n1")},
		Stores: fileStores{fs: fs}, Rand: rand.New(rand.NewPCG(1, 2)), EphemeralID: "n1-life1"})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Unix(0, 0))
	p := Run(n, Inbox(), clk, interval)
	defer func() { _ = p.Stop() }()
	clk.BlockUntil(1) // the loop's ticker
	// The loop holds one call while 200 queue behind it; each takes one
	// tick interval of the clock.
	gate := make(chan struct{})
	p.calls <- func(*Node) { <-gate }
	const work = 200
	for range work {
		p.calls <- func(*Node) { clk.Advance(interval) }
	}
	close(gate)
	var ticks uint64
	if err := p.Do(func(n *Node) { ticks = n.tick }); err != nil {
		t.Fatal(err)
	}
	if ticks < work/2 {
		t.Fatalf("the loop ticked %d times over %d tick intervals of requests; want at least %d", ticks, work, work/2)
	}
}
