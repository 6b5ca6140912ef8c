package routing

import (
	"math"
	"slices"
)

// ewmaAlpha is the coordinator's EWMA weight for new samples
// (ResponseCollectorService.ALPHA).
const ewmaAlpha = 0.3

// nanosPerMilli converts the collector's nanoseconds to the milliseconds the
// C3 rank is computed in (ComputedNodeStats.FACTOR).
const nanosPerMilli = 1e6

// nodeStats is one node's entry in the response collector.
type nodeStats struct {
	queue    float64 // EWMA of the search queue size
	response float64 // EWMA of the response time, nanoseconds
	service  float64 // latest reported service-time EWMA, nanoseconds
}

// ARS reproduces OpenSearch's adaptive replica selection (C3) on the
// coordinator: ResponseCollectorService plus the ranking and stats
// adjustment of IndexShardRoutingTable. It is a plain value: no clock, no
// randomness (the caller supplies the rotation OpenSearch draws at random),
// and not safe for concurrent use.
type ARS struct {
	stats       map[string]*nodeStats
	outstanding map[string]int64 // nodeSearchCounts
}

// NewARS returns a collector with no statistics.
func NewARS() *ARS {
	return &ARS{stats: map[string]*nodeStats{}, outstanding: map[string]int64{}}
}

// AddNodeStatistics records one response (addNodeStatistics): the queue size
// and response time are averaged with weight 0.3 for the new sample (the
// first sample initialises them); the service time replaces the old one,
// because it is already an EWMA on the data node.
func (a *ARS) AddNodeStatistics(node string, queue int, responseNanos, serviceNanos int64) {
	s, ok := a.stats[node]
	if !ok {
		a.stats[node] = &nodeStats{queue: float64(queue), response: float64(responseNanos), service: float64(serviceNanos)}
		return
	}
	s.queue = ewmaAlpha*float64(queue) + (1-ewmaAlpha)*s.queue
	s.response = ewmaAlpha*float64(responseNanos) + (1-ewmaAlpha)*s.response
	s.service = float64(serviceNanos)
}

// SetOutstanding sets a node's outstanding search count (nodeSearchCounts).
func (a *ARS) SetOutstanding(node string, n int64) { a.outstanding[node] = n }

// Outstanding returns a node's outstanding search count, 1 by default.
func (a *ARS) Outstanding(node string) int64 {
	if n, ok := a.outstanding[node]; ok {
		return n
	}
	return 1
}

// computed is ComputedNodeStats: a snapshot with the queue truncated to int.
type computed struct {
	queue             int
	response, service float64
	clients           int
}

func (a *ARS) snapshot(node string) (computed, bool) {
	s, ok := a.stats[node]
	if !ok {
		return computed{}, false
	}
	return computed{queue: int(s.queue), response: s.response, service: s.service, clients: len(a.stats)}, true
}

// rank is the C3 rank R - 1/mu + (1 + outstanding*clients + q)^3 / mu with R
// and mu in milliseconds.
func (c computed) rank(outstanding int64) float64 {
	qHat := 1 + float64(outstanding)*float64(c.clients) + float64(c.queue)
	r := c.response / nanosPerMilli
	mu := c.service / nanosPerMilli
	return r - 1/mu + math.Pow(qHat, 3)/mu
}

// Rank returns a node's current C3 rank, or false if it has no statistics.
func (a *ARS) Rank(node string) (float64, bool) {
	c, ok := a.snapshot(node)
	if !ok {
		return 0, false
	}
	return c.rank(a.Outstanding(node)), true
}

// Select orders the copies of a shard for one search, as
// activeInitializingShardsRankedIt does for the active copies: rotate left
// by rotate (OpenSearch draws it at random), stable-sort by rank with nodes
// that have no statistics first, then, if the winner has statistics, pull
// every other node's statistics halfway to the winner's (adjustStats) and
// count one more outstanding search on the winner. copies name the node of
// each copy; two copies on one node compare equal.
func (a *ARS) Select(copies []string, rotate int) []string {
	if len(copies) <= 1 {
		return slices.Clone(copies)
	}
	n := len(copies)
	order := make([]string, n)
	for i := range copies {
		order[i] = copies[((i+rotate)%n+n)%n]
	}
	snap := map[string]computed{}
	for _, node := range order {
		if c, ok := a.snapshot(node); ok {
			snap[node] = c
		}
	}
	rankOf := func(node string) (float64, bool) {
		c, ok := snap[node]
		return c.rank(a.Outstanding(node)), ok
	}
	slices.SortStableFunc(order, func(x, y string) int {
		rx, okx := rankOf(x)
		ry, oky := rankOf(y)
		switch {
		case !okx && !oky:
			return 0
		case !okx:
			return -1
		case !oky:
			return 1
		}
		return cmpFloat(rx, ry)
	})
	winner := order[0]
	if best, ok := snap[winner]; ok {
		a.adjust(winner, best, snap)
		// NB: an absent count becomes 1, not default(1)+1, as Java's
		// compute(id, (k, n) -> n == null ? 1 : n + 1) does.
		if n, ok := a.outstanding[winner]; ok {
			a.outstanding[winner] = n + 1
		} else {
			a.outstanding[winner] = 1
		}
	}
	return order
}

// adjust is adjustStats: every non-winner with statistics receives the
// integer averages of its snapshot and the winner's.
func (a *ARS) adjust(winner string, best computed, snap map[string]computed) {
	nodes := make([]string, 0, len(snap))
	for node := range snap {
		nodes = append(nodes, node)
	}
	slices.Sort(nodes)
	for _, node := range nodes {
		if node == winner {
			continue
		}
		s := snap[node]
		a.AddNodeStatistics(node, (best.queue+s.queue)/2,
			int64(best.response+s.response)/2, int64(best.service+s.service)/2)
	}
}

func cmpFloat(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}
