package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// The read load: while the writers write, readers issue routed gets of
// documents the writers had acknowledged and unrouted searches across
// every shard, at fixed modest rates, and record each read's latency on
// the writers' time origin, so one timeline holds both.

// ReadKind is the kind of a read.
type ReadKind uint8

const (
	// ReadGet is a routed get by id (and routing value).
	ReadGet ReadKind = iota + 1
	// ReadSearch is an unrouted search across every shard returning a page
	// of hits: each shard's first PageSize documents (a match_all
	// query-then-fetch of size PageSize).
	ReadSearch
	// ReadCount is an unrouted exact count of every document (a _count
	// with match_all): a full scan here, so it runs rarely.
	ReadCount
)

func (k ReadKind) String() string {
	switch k {
	case ReadGet:
		return "get"
	case ReadSearch:
		return "search"
	case ReadCount:
		return "count"
	}
	return fmt.Sprintf("ReadKind(%d)", uint8(k))
}

// ReadOutcome is what one read returned.
type ReadOutcome struct {
	Hits int // documents returned or counted (a get: 1 if found)
	// Foreign counts returned documents the table the read ran at does
	// not place on the shard that returned them: a foreign document seen.
	// It must stay 0.
	Foreign int
}

// Reader carries out reads; its methods are called concurrently.
type Reader interface {
	Get(id, routing string) (ReadOutcome, error)
	// Search returns a page of pageSize hits per shard, or with pageSize
	// < 0 counts every document.
	Search(pageSize int) (ReadOutcome, error)
}

// ReadConfig shapes the read load.
type ReadConfig struct {
	GetRate    float64 // routed gets per second, all get loops together (0 = none)
	SearchRate float64 // searches per second (0 = none)
	// CountEvery makes every n-th search an exact count of every document
	// (0 = never).
	CountEvery int
	PageSize   int // hits per shard of a search (default 10, OpenSearch's size)
	GetLoops   int // concurrent get loops (default 2): a slow get does not stop the others
	Seed       uint64
}

// ReadRecord is one read as measured.
type ReadRecord struct {
	Kind       ReadKind
	Start, End time.Duration // since the run started
	OK         bool
	Hits       int
}

// ReadResult is what a read run measured.
type ReadResult struct {
	Records []ReadRecord
	Foreign int     // foreign documents seen (must be 0)
	Errors  []error // the first few read errors
}

// Of returns the reads of one kind as Records, so Summarize, MaxStall
// and the bucket functions measure them like writes.
func (r *ReadResult) Of(kind ReadKind) []Record {
	if r == nil {
		return nil
	}
	var out []Record
	for _, x := range r.Records {
		if x.Kind == kind {
			out = append(out, Record{Start: x.Start, End: x.End, OK: x.OK, Moving: true})
		}
	}
	return out
}

// Recent holds the ids of recently acknowledged index writes (not
// deletes), for the readers to get. Safe for concurrent use.
type Recent struct {
	mu   sync.Mutex
	ring []idRouting
	next int
	full bool
}

type idRouting struct{ id, routing string }

// NewRecent returns a ring of the last n acknowledged ids.
func NewRecent(n int) *Recent { return &Recent{ring: make([]idRouting, max(1, n))} }

// add records an acknowledged index write.
func (r *Recent) add(id, routing string) {
	r.mu.Lock()
	r.ring[r.next] = idRouting{id, routing}
	if r.next++; r.next == len(r.ring) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// pick returns a random recent id, or false if none was recorded yet.
func (r *Recent) pick(rng *rand.Rand) (id, routing string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.ring)
	}
	if n == 0 {
		return "", "", false
	}
	x := r.ring[rng.IntN(n)]
	return x.id, x.routing, true
}

// RunReads reads until ctx is done. Gets pick from recent (ids the writers
// acknowledged; until there is one, an id of the load's id space, which
// the dataset loaded); start is the writers' time origin.
func RunReads(ctx context.Context, cfg ReadConfig, load Config, r Reader, recent *Recent, start time.Time) *ReadResult {
	load.Defaults()
	if cfg.PageSize == 0 {
		cfg.PageSize = 10
	}
	if cfg.GetLoops <= 0 {
		cfg.GetLoops = 2
	}
	res := &ReadResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	collect := func(recs []ReadRecord, foreign int, errs []error) {
		mu.Lock()
		defer mu.Unlock()
		res.Records = append(res.Records, recs...)
		res.Foreign += foreign
		if len(res.Errors) < 10 {
			res.Errors = append(res.Errors, errs...)
		}
	}
	if cfg.GetRate > 0 {
		for g := range cfg.GetLoops {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(cfg.Seed, 1000+uint64(g)))
				collect(paced(ctx, cfg.GetRate/float64(cfg.GetLoops), g, cfg.GetLoops, start, func(int) (ReadKind, ReadOutcome, error) {
					id, routing, ok := recent.pick(rng)
					if !ok {
						id, routing = load.IDFor(rng.IntN(load.Writers), rng.IntN(load.IDsPerWriter))
					}
					out, err := r.Get(id, routing)
					return ReadGet, out, err
				}))
			}()
		}
	}
	if cfg.SearchRate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			collect(paced(ctx, cfg.SearchRate, 0, 1, start, func(i int) (ReadKind, ReadOutcome, error) {
				if cfg.CountEvery > 0 && i%cfg.CountEvery == cfg.CountEvery-1 {
					out, err := r.Search(-1)
					return ReadCount, out, err
				}
				out, err := r.Search(cfg.PageSize)
				return ReadSearch, out, err
			}))
		}()
	}
	wg.Wait()
	slices.SortFunc(res.Records, func(a, b ReadRecord) int { return int(a.Start - b.Start) })
	return res
}

// paced calls read rate times a second until ctx is done (the loop is
// staggered by slot/of of an interval, as the writers are), and returns
// the records, the foreign documents seen and the first errors.
func paced(ctx context.Context, rate float64, slot, of int, start time.Time, read func(i int) (ReadKind, ReadOutcome, error)) ([]ReadRecord, int, []error) {
	p := newPacer(clock.Real{}, time.Duration(float64(time.Second)/rate), slot, of)
	var recs []ReadRecord
	var errs []error
	foreign := 0
	for i := 0; p.wait(ctx); i++ {
		rec := ReadRecord{Start: time.Since(start)}
		kind, out, err := read(i)
		rec.Kind, rec.End, rec.OK, rec.Hits = kind, time.Since(start), err == nil, out.Hits
		foreign += out.Foreign
		recs = append(recs, rec)
		if err != nil && len(errs) < 3 {
			errs = append(errs, fmt.Errorf("%s: %w", kind, err))
		}
	}
	return recs, foreign, errs
}
