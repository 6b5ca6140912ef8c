package experiment

import (
	"sync"

	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// nodeReader serves the read load from whichever node current returns (the
// in-place strategies' one node; the new-index strategy's node behind the
// alias, which changes at the swap), with one router per node.
type nodeReader struct {
	current func() (*node.Node, error)
	mu      sync.Mutex
	routers map[*node.Node]*node.Router
}

func newNodeReader(current func() (*node.Node, error)) *nodeReader {
	return &nodeReader{current: current, routers: map[*node.Node]*node.Router{}}
}

func (r *nodeReader) router(n *node.Node) *node.Router {
	r.mu.Lock()
	defer r.mu.Unlock()
	rt, ok := r.routers[n]
	if !ok {
		rt = node.NewRouter(n, n.Table(), node.RouterConfig{MaxRetries: 16})
		r.routers[n] = rt
	}
	return rt
}

// Get is a routed get. A document whose id is not the one asked for
// would be a foreign document served by the shard the table named.
func (r *nodeReader) Get(id, routingValue string) (loadgen.ReadOutcome, error) {
	n, err := r.current()
	if err != nil {
		return loadgen.ReadOutcome{}, err
	}
	d, ok, err := r.router(n).Get(id, routingValue)
	if err != nil || !ok {
		return loadgen.ReadOutcome{}, err
	}
	out := loadgen.ReadOutcome{Hits: 1}
	if d.ID != id {
		out.Foreign = 1
	}
	return out, nil
}

// Search scans every shard (a page of pageSize documents from each, or
// all of them when counting) and checks each hit against the table the
// search ran at: a hit from a shard that table does not name for it is a
// foreign document seen.
func (r *nodeReader) Search(pageSize int) (loadgen.ReadOutcome, error) {
	n, err := r.current()
	if err != nil {
		return loadgen.ReadOutcome{}, err
	}
	before := n.Table()
	type hit struct {
		shard       routing.ShardID
		id, routing string
	}
	var out loadgen.ReadOutcome
	var suspects []hit
	t, err := n.SearchAt(max(0, pageSize), func(shard routing.ShardID, d storage.Doc) error {
		out.Hits++
		if _, s := before.Route(d.ID, d.Routing); s != shard {
			suspects = append(suspects, hit{shard, d.ID, d.Routing})
		}
		return nil
	})
	if err != nil {
		return loadgen.ReadOutcome{}, err
	}
	// A publish between the two table loads: judge the suspects by the
	// table searched (a hit right under the older table and wrong under
	// the newer one is not caught then; publishes are rare).
	for _, h := range suspects {
		if _, s := t.Route(h.id, h.routing); s != h.shard {
			out.Foreign++
		}
	}
	return out, nil
}
