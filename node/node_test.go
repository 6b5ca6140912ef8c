package node_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// pendingSplit opens a node with two shards, builds the children of shard 0
// and publishes their CommitSplit without making it durable.
func pendingSplit(t *testing.T) (*node.Node, *storage.Engine, *node.PendingTable, routing.Version) {
	t.Helper()
	n, eng := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	t.Cleanup(func() { _ = n.Close() })
	reserved, p := publishSplit(t, n)
	if n.Table() != p.Table() {
		t.Fatalf("Publish did not publish: node serves v%d, pending v%d", n.Table().Version(), p.Table().Version())
	}
	return n, eng, p, reserved.Version()
}

// publishSplit reserves shard 0's two-way split, makes its children and
// publishes the split, not yet durable; it returns the reserved table and
// the pending one.
func publishSplit(t *testing.T, n *node.Node) (*routing.Table, *node.PendingTable) {
	t.Helper()
	reserved, err := n.Apply(routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, ids := addChildren(t, n, reserved)
	p, err := n.Publish(routing.Edit{Kind: routing.CommitSplit, Shard: 0, Children: ids})
	if err != nil {
		t.Fatal(err)
	}
	return reserved, p
}

// idOn returns an id that table t routes to a shard pred accepts.
func idOn(t *testing.T, tab *routing.Table, pred func(routing.ShardID) bool) string {
	t.Helper()
	for i := range 10_000 {
		id := fmt.Sprintf("doc-%d", i)
		if _, s := tab.Route(id, ""); pred(s) {
			return id
		}
	}
	t.Fatal("no id found")
	return ""
}

func persistedVersion(t *testing.T, eng *storage.Engine) routing.Version {
	t.Helper()
	tab, err := node.LoadTable(eng)
	if err != nil || tab == nil {
		t.Fatalf("load table: %v, %v", tab, err)
	}
	return tab.Version()
}

// A write that only the published-but-not-durable table admits is applied
// but not acknowledged until the table is durable; a write the durable table
// admits too is not delayed.
func TestWriteWaitsForDurableTable(t *testing.T) {
	n, eng, p, durable := pendingSplit(t)
	r := node.NewRouter(n, p.Table(), node.RouterConfig{})

	toChild := idOn(t, p.Table(), func(s routing.ShardID) bool { return s != 1 })
	acked := make(chan error, 1)
	go func() { _, err := r.Index(toChild, "", []byte("v1")); acked <- err }()
	// Wait until the write is applied (the child's store has it: a routed
	// get waits for the table's commit too), then give it time to be
	// acknowledged if nothing held it back.
	pl, shard := p.Table().Route(toChild, "")
	child, ok := n.ShardStore(shard)
	if !ok {
		t.Fatalf("no store for child %d", shard)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, found, err := child.GetAny(p.Table().Keyspace(pl.Root), p.Table().KeyOf(pl), toChild); err != nil {
			t.Fatal(err)
		} else if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the write to the child was never applied")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-acked:
		t.Fatalf("write to a child acknowledged before the table was durable (err %v)", err)
	default:
	}

	toOther := idOn(t, p.Table(), func(s routing.ShardID) bool { return s == 1 })
	if _, err := r.Index(toOther, "", []byte("v1")); err != nil {
		t.Fatalf("write to an unaffected shard: %v", err)
	}
	if v := persistedVersion(t, eng); v != durable {
		t.Fatalf("table persisted before Commit: v%d on disk, want v%d", v, durable)
	}

	synced := false
	if err := p.Commit(func() error { synced = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if !synced {
		t.Fatal("Commit did not run its before step")
	}
	select {
	case err := <-acked:
		if err != nil {
			t.Fatalf("write to a child after commit: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("write to a child not acknowledged after the commit")
	}
	if v := persistedVersion(t, eng); v != p.Table().Version() {
		t.Fatalf("after Commit v%d on disk, want v%d", v, p.Table().Version())
	}
	if err := p.Commit(nil); err == nil {
		t.Fatal("a second Commit was accepted")
	}
}

// A table that cannot be made durable fails the node: the waiting write and
// every later request get ErrFailed, and the disk keeps the old table.
func TestFailedCommitFailsTheNode(t *testing.T) {
	n, eng, p, durable := pendingSplit(t)
	r := node.NewRouter(n, p.Table(), node.RouterConfig{})
	toChild := idOn(t, p.Table(), func(s routing.ShardID) bool { return s != 1 })
	acked := make(chan error, 1)
	go func() { _, err := r.Index(toChild, "", []byte("v1")); acked <- err }()

	injected := errors.New("injected: no space left on device")
	err := p.Commit(func() error { return injected })
	if !errors.Is(err, node.ErrFailed) || !errors.Is(err, injected) {
		t.Fatalf("Commit: got %v, want ErrFailed wrapping the cause", err)
	}
	select {
	case err := <-acked:
		if !errors.Is(err, node.ErrFailed) {
			t.Fatalf("waiting write: got %v, want ErrFailed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiting write never answered")
	}
	toOther := idOn(t, p.Table(), func(s routing.ShardID) bool { return s == 1 })
	if _, err := r.Index(toOther, "", []byte("v1")); !errors.Is(err, node.ErrFailed) {
		t.Fatalf("write after failure: got %v, want ErrFailed", err)
	}
	if _, _, err := r.Get(toOther, ""); !errors.Is(err, node.ErrFailed) {
		t.Fatalf("get after failure: got %v, want ErrFailed", err)
	}
	if _, err := n.Apply(routing.Edit{Kind: routing.CancelSplit, Shard: 0}); !errors.Is(err, node.ErrFailed) {
		t.Fatalf("apply after failure: got %v, want ErrFailed", err)
	}
	if v := persistedVersion(t, eng); v != durable {
		t.Fatalf("v%d on disk after a failed commit, want v%d", v, durable)
	}
}

// openNode opens a node of layout on fs serving a new two-shard index
// (partition mode, 256 routing shards).
func openNode(t *testing.T, fs vfs.FS, layout storage.Layout) (*node.Node, *storage.Engine) {
	t.Helper()
	return openNodeOn(t, storage.Options{FS: fs, Layout: layout}, twoShards(t, 256))
}

// reopenNode opens a node on the data directory a node on fs left, its
// table read from the directory, as a restarted process does.
func reopenNode(t *testing.T, fs vfs.FS) (*node.Node, *storage.Engine) {
	t.Helper()
	return openNodeOn(t, storage.Options{FS: fs}, nil)
}

// twoShards returns a new two-shard table in partition mode.
func twoShards(t *testing.T, routingShards int) *routing.Table {
	t.Helper()
	tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: routingShards, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// openNodeOn opens an engine on opts (Dir /data and a 1 MiB cache unless
// set; FS a new in-memory one unless set) and a node on it serving tab
// (nil: the table in the directory). The caller closes the node.
func openNodeOn(t *testing.T, opts storage.Options, tab *routing.Table) (*node.Node, *storage.Engine) {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = "/data"
	}
	if opts.FS == nil {
		opts.FS = vfs.NewMem()
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 1 << 20
	}
	eng, err := storage.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Config{Engine: eng, Table: tab})
	if err != nil {
		_ = eng.Close()
		t.Fatal(err)
	}
	return n, eng
}

// addChildren makes and adds the children of shard 0's split, which the
// table reserved holds, with the parent's log held, and returns the parent
// and the children's ids.
func addChildren(t *testing.T, n *node.Node, reserved *routing.Table) (*storage.Shard, []routing.ShardID) {
	t.Helper()
	parent, ok := n.ShardStore(0)
	if !ok {
		t.Fatal("no store for shard 0")
	}
	parent.HoldLog()
	rec, _ := reserved.Split(0)
	var ids []routing.ShardID
	for _, c := range rec.Children {
		child, _, err := n.Engine().CreateChild(parent, c.Shard, c.Span)
		if err != nil {
			t.Fatal(err)
		}
		n.AddShard(child)
		ids = append(ids, c.Shard)
	}
	return parent, ids
}

// splitCommitted splits shard 0 of n and commits the split durably,
// without retiring the parent.
func splitCommitted(t *testing.T, n *node.Node) {
	t.Helper()
	reserved, err := n.Apply(routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	parent, ids := addChildren(t, n, reserved)
	if _, err := n.Apply(routing.Edit{Kind: routing.CommitSplit, Shard: 0, Children: ids}); err != nil {
		t.Fatal(err)
	}
	if err := parent.ReleaseLog(); err != nil {
		t.Fatal(err)
	}
}

// A Retire whose wait for readers timed out must not, when retried, destroy
// the store under the readers still holding it: the retry waits for them
// too, and the reader finishes its scan with every document.
func TestRetireRetryWaitsForReaders(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		t.Run(layout.String(), func(t *testing.T) {
			n, _ := openNode(t, vfs.NewMem(), layout)
			defer n.Close()
			r := node.NewRouter(n, n.Table(), node.RouterConfig{})
			const docs = 200
			for i := range docs {
				if _, err := r.Index(fmt.Sprintf("doc-%d", i), "", []byte("v")); err != nil {
					t.Fatal(err)
				}
			}

			started, release := make(chan struct{}), make(chan struct{})
			type result struct {
				n   int
				err error
			}
			searched := make(chan result, 1)
			go func() {
				seen := 0
				_, err := n.Search(func(shard routing.ShardID, _ storage.Doc) error {
					if seen == 0 {
						if shard != 0 {
							return fmt.Errorf("first document from shard %d, want 0", shard)
						}
						close(started)
						<-release
					}
					seen++
					return nil
				})
				searched <- result{seen, err}
			}()
			<-started

			splitCommitted(t, n)
			// Many attempts (a cleanup retried while the reader stays) wait
			// with one goroutine, not one each.
			before := runtime.NumGoroutine()
			for attempt := range 50 {
				err := n.Retire(0, time.Millisecond)
				if _, open := n.Engine().Shard(0); !open || !errors.Is(err, node.ErrReadersRemain) {
					close(release)
					t.Fatalf("Retire attempt %d while a reader holds shard 0 = %v, shard open %v; want ErrReadersRemain, open",
						attempt+1, err, open)
				}
			}
			if grown := runtime.NumGoroutine() - before; grown > 5 {
				t.Errorf("50 Retire attempts while a reader holds the shard left %d more goroutines", grown)
			}
			close(release)
			res := <-searched
			if res.err != nil || res.n != docs {
				t.Fatalf("Search under a retiring shard = %d documents, %v; want %d, nil", res.n, res.err, docs)
			}
			if err := n.Retire(0, 5*time.Second); err != nil {
				t.Fatalf("Retire after the reader finished: %v", err)
			}
			if _, ok := n.Engine().Shard(0); ok {
				t.Fatal("shard 0 still open in the engine after Retire")
			}
		})
	}
}

// A get in flight holds its shard as a search does: a Retire while the get
// is between its ownership check and its read waits for it (and times out
// with ErrReadersRemain), and the get, released, reads its document from
// the store the retire did not destroy under it.
func TestRetireWaitsForAGetInFlight(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		t.Run(layout.String(), func(t *testing.T) {
			var park atomic.Bool
			started, release := make(chan struct{}), make(chan struct{})
			hook := func(routing.ShardID) {
				if park.CompareAndSwap(true, false) {
					close(started)
					<-release
				}
			}
			tab := twoShards(t, 256)
			n, _ := openNodeOn(t, storage.Options{Layout: layout, BeforeGet: hook}, tab)
			defer n.Close()
			r := node.NewRouter(n, tab, node.RouterConfig{})
			id := idOn(t, tab, func(s routing.ShardID) bool { return s == 0 })
			if _, err := r.Index(id, "", []byte("v1")); err != nil {
				t.Fatal(err)
			}

			type result struct {
				doc   storage.Doc
				found bool
				err   error
			}
			got := make(chan result, 1)
			park.Store(true)
			go func() {
				d, found, err := r.Get(id, "")
				got <- result{d, found, err}
			}()
			<-started

			splitCommitted(t, n)
			err := n.Retire(0, 10*time.Millisecond)
			if _, open := n.Engine().Shard(0); !open || !errors.Is(err, node.ErrReadersRemain) {
				close(release)
				<-got
				t.Fatalf("Retire while a get holds shard 0 = %v, shard open %v; want ErrReadersRemain, open", err, open)
			}
			close(release)
			res := <-got
			if res.err != nil || !res.found || string(res.doc.Source) != "v1" {
				t.Fatalf("Get across a retire = %q, found %v, %v; want \"v1\", true, nil", res.doc.Source, res.found, res.err)
			}
			if err := n.Retire(0, 5*time.Second); err != nil {
				t.Fatalf("Retire after the get finished: %v", err)
			}
			if _, ok := n.Engine().Shard(0); ok {
				t.Fatal("shard 0 still open in the engine after Retire")
			}
		})
	}
}

// Close is idempotent: the second call returns nil instead of panicking on
// the engine's released caches, and requests after it fail with ErrClosed.
func TestCloseTwice(t *testing.T) {
	n, eng := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("second Close #%d panicked: %v", i+1, r)
				}
			}()
			if err := n.Close(); err != nil {
				t.Errorf("second Close #%d = %v, want nil", i+1, err)
			}
			if err := eng.Close(); err != nil {
				t.Errorf("engine Close after node Close #%d = %v, want nil", i+1, err)
			}
		}()
	}
	if _, _, err := n.Get(node.GetRequest{Shard: 0}); !errors.Is(err, node.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
	if _, err := eng.OpenShard(5, 0, nil); err == nil {
		t.Error("OpenShard on a closed engine succeeded")
	}
}

// Retire's wait runs on the node's clock: with a manual clock it gives up
// exactly when the clock passes the wait, not on the wall clock.
func TestRetireWaitsOnTheNodeClock(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	tab := twoShards(t, 256)
	n, _ := openNodeOn(t, storage.Options{Clock: clk}, tab)
	defer n.Close()
	if _, err := node.NewRouter(n, tab, node.RouterConfig{Clock: clk}).Index(idOn(t, tab, func(s routing.ShardID) bool { return s == 0 }), "", []byte("v")); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	searched := make(chan error, 1)
	go func() {
		_, err := n.Search(func(routing.ShardID, storage.Doc) error {
			close(started)
			<-release
			return nil
		})
		searched <- err
	}()
	<-started
	splitCommitted(t, n)
	base := clk.Waiters() // the engine's own tickers
	retired := make(chan error, 1)
	go func() { retired <- n.Retire(0, time.Minute) }()
	clk.BlockUntil(base + 1)
	clk.Advance(59 * time.Second)
	select {
	case err := <-retired:
		t.Fatalf("Retire returned %v before its wait passed on the node's clock", err)
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(time.Second)
	if err := <-retired; !errors.Is(err, node.ErrReadersRemain) {
		t.Fatalf("Retire = %v, want ErrReadersRemain", err)
	}
	close(release)
	if err := <-searched; err != nil {
		t.Fatal(err)
	}
}

// A write block whose drain fails (a shard's apply lock not taken in time)
// is not in force: SetWriteBlock said it failed, so its caller will not
// lift it, and writes must not keep failing with it. OpenSearch removes the
// temporary block when the shards' verification fails.
func TestAFailedWriteBlockIsLifted(t *testing.T) {
	n, _ := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	defer n.Close()
	f, err := n.Fence(1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	blocked := errors.New("index write (api)")
	err = n.SetWriteBlock(blocked, 20*time.Millisecond)
	f.Release()
	if !errors.Is(err, storage.ErrLockTimeout) {
		t.Fatalf("SetWriteBlock with shard 1 fenced = %v, want ErrLockTimeout", err)
	}
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	id := idOn(t, n.Table(), func(s routing.ShardID) bool { return s == 0 })
	if _, err := r.Index(id, "", []byte("v")); err != nil {
		t.Fatalf("write after a write block that failed = %v, want it applied", err)
	}
}

// Close racing a search in flight: a scan that resolved its shards before
// Close must not run on a closed Pebble store (use after close) and Close
// must not fail on the scan's snapshot. Either the scan completes, or it
// fails with an error saying the node (or shard) closed; Close returns nil.
func TestCloseDuringASearchFinishesOrFailsClosed(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		t.Run(layout.String(), func(t *testing.T) {
			n, _ := openNode(t, vfs.NewMem(), layout)
			r := node.NewRouter(n, n.Table(), node.RouterConfig{})
			const docs = 200
			for i := range docs {
				if _, err := r.Index(fmt.Sprintf("doc-%d", i), "", []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			started, release := make(chan struct{}), make(chan struct{})
			type result struct {
				n     int
				err   error
				panic any
			}
			searched := make(chan result, 1)
			go func() {
				seen := 0
				defer func() {
					if p := recover(); p != nil {
						searched <- result{seen, nil, p}
					}
				}()
				_, err := n.Search(func(routing.ShardID, storage.Doc) error {
					if seen == 0 {
						close(started)
						<-release
					}
					seen++
					return nil
				})
				searched <- result{seen, err, nil}
			}()
			<-started
			closed := make(chan error, 1)
			go func() { closed <- n.Close() }()
			var closeErr error
			select {
			case closeErr = <-closed:
			case <-time.After(100 * time.Millisecond):
				// Close waits for the scan: that is allowed.
			}
			close(release)
			res := <-searched
			if closeErr == nil {
				closeErr = <-closed
			}
			if res.panic != nil {
				t.Fatalf("Search racing Close panicked: %v", res.panic)
			}
			if closeErr != nil {
				t.Errorf("Close while a search is in flight = %v, want nil", closeErr)
			}
			if res.err != nil && !errors.Is(res.err, node.ErrClosed) && !errors.Is(res.err, storage.ErrShardClosed) {
				t.Errorf("Search racing Close = %d docs, %v; want all %d or a closed error", res.n, res.err, docs)
			}
			if res.err == nil && res.n != docs {
				t.Errorf("Search racing Close = %d docs and no error, want %d", res.n, docs)
			}
		})
	}
}

// Close while a published table is not yet durable: a write that only the
// pending table admits waits for its commit, which will now never come (the
// engine is closed). Close must answer it (not acknowledged: ErrClosed)
// instead of leaving it blocked forever.
func TestCloseAnswersWritesWaitingForAPendingTable(t *testing.T) {
	n, _, p, _ := pendingSplit(t)
	r := node.NewRouter(n, p.Table(), node.RouterConfig{})
	toChild := idOn(t, p.Table(), func(s routing.ShardID) bool { return s != 1 })
	acked := make(chan error, 1)
	go func() { _, err := r.Index(toChild, "", []byte("v1")); acked <- err }()
	pl, shard := p.Table().Route(toChild, "")
	child, _ := n.ShardStore(shard)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, found, err := child.GetAny(p.Table().Keyspace(pl.Root), p.Table().KeyOf(pl), toChild); err != nil {
			t.Fatal(err)
		} else if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the write to the child was never applied")
		}
		time.Sleep(time.Millisecond)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-acked:
		if !errors.Is(err, node.ErrClosed) {
			t.Fatalf("write waiting for the pending table after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a write waiting for the pending table was never answered after Close")
	}
	if err := p.Commit(nil); err == nil {
		t.Error("the pending table committed on a closed node")
	}
}

// Every request after Close, and a read racing it, answers ErrClosed:
// callers branch on it (the service maps it to index_not_found "closed or
// deleted during the request", the alias writer re-resolves), and the
// storage's ErrShardClosed is not the node's contract.
func TestReadsAfterCloseAnswerErrClosed(t *testing.T) {
	n, _ := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	if _, err := r.Index("doc-1", "", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// A search that resolved its shards before the close and reads after it.
	started, release := make(chan struct{}), make(chan struct{})
	searched := make(chan error, 1)
	go func() {
		first := true
		_, err := n.Search(func(routing.ShardID, storage.Doc) error {
			if first {
				first = false
				close(started)
				<-release
			}
			return nil
		})
		searched <- err
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	time.Sleep(20 * time.Millisecond)
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := <-searched; err != nil && !errors.Is(err, node.ErrClosed) {
		t.Errorf("Search racing Close = %v, want nil or ErrClosed", err)
	}
	if _, err := n.Search(func(routing.ShardID, storage.Doc) error { return nil }); !errors.Is(err, node.ErrClosed) {
		t.Errorf("Search after Close = %v, want ErrClosed", err)
	}
	if _, err := n.SearchAt(1, func(routing.ShardID, storage.Doc) error { return nil }); !errors.Is(err, node.ErrClosed) {
		t.Errorf("SearchAt after Close = %v, want ErrClosed", err)
	}
	if _, err := n.CheckPlacement(nil); !errors.Is(err, node.ErrClosed) {
		t.Errorf("CheckPlacement after Close = %v, want ErrClosed", err)
	}
	if _, _, err := r.Get("doc-1", ""); !errors.Is(err, node.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
}

// Open without an engine is bad input: an error saying so, not a nil
// pointer dereference.
func TestOpenWithoutEngineIsAnError(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("node.Open(Config{}) panicked: %v", r)
		}
	}()
	if n, err := node.Open(node.Config{}); err == nil {
		t.Fatalf("node.Open(Config{}) = %v, nil; want an error", n)
	}
}

// Retire destroys a shard's store. While the table that stopped naming it
// is published but not durable, the durable table (the one a failed commit
// and recovery go back to) still names it the owner: retiring it then would
// destroy the only authoritative copy of its documents. Retire must refuse
// until the table is durable.
func TestRetireRefusesAShardTheDurableTableNames(t *testing.T) {
	n, eng, p, _ := pendingSplit(t)
	err := n.Retire(0, time.Second)
	if err == nil {
		t.Errorf("Retire of the split parent while its table is not durable succeeded")
	}
	if _, open := eng.Shard(0); !open {
		t.Fatalf("the parent's store was destroyed before the table that retires it was durable")
	}
	if err := p.Commit(func() error { return errors.New("injected: fsync failed") }); err == nil {
		t.Fatal("commit succeeded")
	}
	// The node failed; recovery goes back to the durable table, in which
	// shard 0 owns its documents: its store must still be there.
}

// writeToAChild indexes a document (routed to a child of shard 0's split,
// whose table tab is published but not durable) through r, and returns its
// id once the child's store holds it, with the channel its acknowledgement
// (or failure) arrives on: the write waits for the commit (INV-9).
func writeToAChild(t *testing.T, n *node.Node, r *node.Router, tab *routing.Table, source string) (string, <-chan error) {
	t.Helper()
	id := idOn(t, tab, func(s routing.ShardID) bool { return s != 1 })
	pl, shard := tab.Route(id, "")
	acked := make(chan error, 1)
	go func() { _, err := r.Index(id, "", []byte(source)); acked <- err }()
	// Read the child's store directly, not through the node.
	child, _ := n.ShardStore(shard)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, found, err := child.GetAny(tab.Keyspace(pl.Root), tab.KeyOf(pl), id); err != nil {
			t.Fatal(err)
		} else if found {
			return id, acked
		}
		if time.Now().After(deadline) {
			t.Fatal("the write to the child was never applied")
		}
	}
}
