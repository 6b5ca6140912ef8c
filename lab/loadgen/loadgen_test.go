package loadgen

import (
	"context"
	"sync"
	"testing"
	"time"
)

type nopSink struct{}

func (nopSink) Write(int, Op) (int, error) { return 0, nil }

// firstWrites records when each writer's first write reached the sink,
// and calls all once every one of writers has written.
type firstWrites struct {
	mu      sync.Mutex
	start   time.Time
	writers int
	first   map[int]time.Duration
	all     func()
}

func (f *firstWrites) Write(w int, _ Op) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.first[w]; !ok {
		f.first[w] = time.Since(f.start)
		if len(f.first) == f.writers {
			f.all()
		}
	}
	return 0, nil
}

// Paced writers are staggered: started together they would issue in
// lockstep bursts of Writers writes, then a gap of a whole interval. Writer
// w of n starts its grid w/n of an interval late (the pacer's own tests
// show it keeps that grid), so its first write comes no sooner than
// (1 + w/n) intervals after the start. A pacer is never early, and a
// loaded machine only makes writes later, so this cannot fail from
// load; the fraction of bunched starts this test counted before could
// (a stall of 150 ms made the catch-up writes bunch).
func TestPacedWritersAreStaggered(t *testing.T) {
	// Until every writer has written (a bound, not a timing: it ends the
	// run only if some writer never writes).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const writers, rate = 8, 400
	interval := time.Second * writers / rate // 20 ms
	start := time.Now()
	sink := &firstWrites{start: start, writers: writers, first: map[int]time.Duration{}, all: cancel}
	Run(ctx, Config{Writers: writers, Rate: rate, DocSize: 8, IDsPerWriter: 10, Seed: 1}, sink, start)
	if len(sink.first) != writers {
		t.Fatalf("%d of %d writers wrote in a minute at %d/s", len(sink.first), writers, rate)
	}
	for w := range writers {
		if due := interval + time.Duration(w)*interval/writers; sink.first[w] < due {
			t.Errorf("writer %d first wrote at %s, before its slot at %s: writers in lockstep", w, sink.first[w], due)
		}
	}
}
