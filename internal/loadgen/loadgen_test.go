package loadgen

import (
	"context"
	"slices"
	"testing"
	"time"
)

type nopSink struct{}

func (nopSink) Write(int, Op) (int, error) { return 0, nil }

// Paced writers are staggered: started together they would issue in
// lockstep bursts (most consecutive starts microseconds apart, then a gap
// of a whole interval).
func TestPacedWritersAreStaggered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res := Run(ctx, Config{Writers: 8, Rate: 400, DocSize: 8, IDsPerWriter: 10, Seed: 1}, nopSink{}, time.Now())
	starts := make([]time.Duration, 0, len(res.Records))
	for _, r := range res.Records {
		starts = append(starts, r.Start)
	}
	slices.Sort(starts)
	if len(starts) < 40 {
		t.Fatalf("only %d writes in 300 ms at 400/s", len(starts))
	}
	bunched := 0
	for i := 1; i < len(starts); i++ {
		if starts[i]-starts[i-1] < 500*time.Microsecond {
			bunched++
		}
	}
	// Staggered: starts 2.5 ms apart. Lockstep: 7 of every 8 bunched.
	if frac := float64(bunched) / float64(len(starts)-1); frac > 0.5 {
		t.Fatalf("%.0f%% of consecutive writes started within 0.5 ms of each other: writers in lockstep", 100*frac)
	}
}
