// Package loadgen generates the continuous write load of a split
// experiment and measures it: every write's latency from its first attempt
// to its acknowledgement (retries and backoff included), errors, retries,
// a timeline in fixed buckets, and the longest write stall. It also feeds
// every write to a model.Model (attempt, then acknowledgement or failure)
// so the caller can verify the index against it afterwards.
//
// Each writer owns its ids, so per id the order of acknowledgements is the
// order of application.
package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/internal/model"
)

// Op is one write.
type Op struct {
	Delete  bool
	ID      string
	Routing string
	Source  []byte
}

// Sink carries out writes for writer w (0..Writers-1). It returns how many
// times it retried (stale routing, a write block) before the write was
// acknowledged. It is called concurrently, never twice at once for one w.
type Sink interface {
	Write(w int, op Op) (retries int, err error)
}

// Config shapes the load.
type Config struct {
	Writers      int     // concurrent writers (default 16)
	Rate         float64 // target writes per second, all writers together (0 = as fast as possible)
	DocSize      int     // source bytes per document (default 1024)
	IDsPerWriter int     // distinct ids each writer owns (default 2000)
	// Tenants route a share of ids with a custom routing value; the first
	// tenant is hot and gets HotShare of all writes.
	Tenants  int
	HotShare float64
	// Hot, if set, overrides the hot tenant and its share over time
	// (elapsed since the run started; share 0 = no hot tenant), so the hot
	// spot can move.
	Hot  func(elapsed time.Duration) (tenant int, share float64)
	Seed uint64
	// Moving reports whether a write is aimed at the documents being moved
	// (for the stall measurement); nil = every write.
	Moving func(id, routing string) bool
	// Recent, if set, receives the id of every acknowledged index write
	// (the read load gets them).
	Recent *Recent
}

// Defaults fills in unset fields.
func (c *Config) Defaults() {
	if c.Writers == 0 {
		c.Writers = 16
	}
	if c.DocSize == 0 {
		c.DocSize = 1024
	}
	if c.IDsPerWriter == 0 {
		c.IDsPerWriter = 2000
	}
}

// Record is one write as measured.
type Record struct {
	Start, End time.Duration // since the run started
	OK         bool
	Retries    int
	Moving     bool
}

// Result is what a run measured.
type Result struct {
	Records []Record
	// Model holds every write of the run (compact: it answers the run's
	// end, Model.Latest()). Writes that returned an error are failed in it.
	Model   *model.Model
	Errors  []error // the first few write errors
	Elapsed time.Duration
}

// IDFor returns writer w's k-th id and its routing value.
func (c Config) IDFor(w, k int) (id, routing string) {
	id = fmt.Sprintf("w%02d-%06d", w, k)
	if c.Tenants > 0 && k%4 == 0 { // a quarter of the ids belong to tenants
		routing = fmt.Sprintf("tenant-%d", (k/4)%c.Tenants)
	}
	return id, routing
}

// Run writes until ctx is done. start is the experiment's time origin, so
// records line up with the caller's own events.
func Run(ctx context.Context, cfg Config, sink Sink, start time.Time) *Result {
	cfg.Defaults()
	res := &Result{Model: model.New(model.Options{Compact: true})}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs, errs := runWriter(ctx, cfg, sink, res.Model, start, w)
			mu.Lock()
			res.Records = append(res.Records, recs...)
			if len(res.Errors) < 10 {
				res.Errors = append(res.Errors, errs...)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	slices.SortFunc(res.Records, func(a, b Record) int { return int(a.Start - b.Start) })
	return res
}

// runWriter is one writer: paced, owning its ids.
func runWriter(ctx context.Context, cfg Config, sink Sink, m *model.Model, start time.Time, w int) ([]Record, []error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
	var recs []Record
	var errs []error
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(cfg.Writers) / cfg.Rate)
	}
	// Writers are staggered across one interval: started together, they
	// would issue in lockstep bursts of Writers writes, leaving the disk idle
	// between bursts and whole windows without a write.
	p := newPacer(clock.Real{}, interval, w, cfg.Writers)
	src := make([]byte, cfg.DocSize)
	for k := 0; ctx.Err() == nil; k++ {
		if interval > 0 && !p.wait(ctx) {
			break
		}
		op := pick(cfg, rng, w, src, time.Since(start))
		value := model.Absent
		if !op.Delete {
			value = model.Doc(op.Source)
		}
		mw := m.Attempt(op.ID, value)
		rec := Record{Start: time.Since(start), Moving: cfg.Moving == nil || cfg.Moving(op.ID, op.Routing)}
		retries, err := sink.Write(w, op)
		rec.End, rec.Retries, rec.OK = time.Since(start), retries, err == nil
		recs = append(recs, rec)
		if err != nil {
			if len(errs) < 3 {
				errs = append(errs, fmt.Errorf("writer %d: %s: %w", w, op.ID, err))
			}
			m.Fail(mw) // it may or may not have happened, but it is over
			continue
		}
		m.Ack(mw)
		if cfg.Recent != nil && !op.Delete {
			cfg.Recent.add(op.ID, op.Routing)
		}
	}
	return recs, errs
}

// pick chooses the next write: mostly index/update, some deletes; the hot
// tenant (tenant 0, or cfg.Hot's at elapsed) gets its share of them.
func pick(cfg Config, rng *rand.Rand, w int, src []byte, elapsed time.Duration) Op {
	k := rng.IntN(cfg.IDsPerWriter)
	hot, share := 0, cfg.HotShare
	if cfg.Hot != nil {
		hot, share = cfg.Hot(elapsed)
	}
	if cfg.Tenants > 0 && rng.Float64() < share {
		// tenant t's ids are k = 4·(Tenants·j + t) (see IDFor)
		k = 4 * (cfg.Tenants*rng.IntN(max(1, cfg.IDsPerWriter/(4*cfg.Tenants))) + hot%cfg.Tenants)
	}
	id, routing := cfg.IDFor(w, k)
	if rng.IntN(10) == 0 {
		return Op{Delete: true, ID: id, Routing: routing}
	}
	for i := 0; i < len(src); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < len(src); j++ {
			src[i+j] = byte(v >> (8 * j))
		}
	}
	return Op{ID: id, Routing: routing, Source: slices.Clone(src)}
}

// pacer spaces a loop's iterations interval apart, starting at slot/of of
// an interval, so loops started together are staggered. An iteration
// never starts before its time; one that is late starts at once (the loop
// catches up), unless it is more than a second late: then the schedule
// starts again from now rather than bursting through the backlog.
type pacer struct {
	clk      clock.Clock
	interval time.Duration
	next     time.Time
}

func newPacer(clk clock.Clock, interval time.Duration, slot, of int) *pacer {
	return &pacer{clk: clk, interval: interval, next: clk.Now().Add(time.Duration(slot) * interval / time.Duration(max(1, of)))}
}

// wait waits for the next iteration's time; false if ctx ended first.
func (p *pacer) wait(ctx context.Context) bool {
	p.next = p.next.Add(p.interval)
	if d := p.next.Sub(p.clk.Now()); d > 0 {
		select {
		case <-ctx.Done():
		case <-p.clk.After(d):
		}
	} else if d < -time.Second {
		p.next = p.clk.Now() // do not build an unbounded backlog
	}
	return ctx.Err() == nil
}
