package coordination

import "github.com/shardsplit/shardsplit/cluster"

// dedupLimit bounds the request ids a node remembers: a proposal is resent
// within a few ticks, far fewer entries than this apart.
const dedupLimit = 10000

// dedup remembers the outcome of the last dedupLimit requests applied, by
// request id, so that a task whose proposal was retried (its first
// proposal committed, but its proposer did not learn it in time) takes
// effect once. It is part of the replicated state: every node builds the
// same one from the same log, and snapshots carry it.
type dedup struct {
	Order   []string               `json:"order"`
	Results map[string]dedupResult `json:"results"`
}

type dedupResult struct {
	Index uint64                `json:"index"`
	Err   *cluster.RefusedError `json:"err,omitempty"`
}

func (d *dedup) get(req string) (dedupResult, bool) {
	r, ok := d.Results[req]
	return r, ok
}

func (d *dedup) put(req string, r dedupResult) {
	if d.Results == nil {
		d.Results = map[string]dedupResult{}
	}
	d.Results[req] = r
	d.Order = append(d.Order, req)
	if len(d.Order) > dedupLimit {
		delete(d.Results, d.Order[0])
		d.Order = d.Order[1:]
	}
}
