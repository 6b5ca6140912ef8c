package node_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Close racing a search in flight: a scan that resolved its shards before
// Close must not run on a closed Pebble store (use after close) and Close
// must not fail on the scan's snapshot. Either the scan completes, or it
// fails with an error saying the node (or shard) closed; Close returns nil.
func TestReviewNodeCloseDuringSearch(t *testing.T) {
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
func TestReviewNodeCloseAnswersWritesWaitingForAPendingTable(t *testing.T) {
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
func TestReviewNodeReadsAfterCloseAnswerErrClosed(t *testing.T) {
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
