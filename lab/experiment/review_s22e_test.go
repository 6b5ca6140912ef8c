package experiment

import (
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/lab/loadgen"
)

// TestReviewS22eAfterHandoffThroughputIsARate: throughput_after_handoff_ops
// was the count of writes acknowledged in [WindowEnd, WindowEnd+1s) cut at
// the load's end, so a run whose load stopped half a second after the
// handoff (compare --after 500ms) reported half its throughput under an
// ops/s key, beside throughput_steady_ops, a true rate. It must be writes
// per second over the part of that second the run has.
func TestReviewS22eAfterHandoffThroughputIsARate(t *testing.T) {
	var recs []loadgen.Record
	for at := time.Duration(0); at < 2500*time.Millisecond; at += time.Millisecond { // 1,000 writes/s throughout
		recs = append(recs, loadgen.Record{Start: at, End: at + 100*time.Microsecond, OK: true, Moving: true})
	}
	o := &Outcome{Strategy: "inplace", Load: &loadgen.Result{Records: recs},
		WindowStart: 1900 * time.Millisecond, WindowEnd: 2 * time.Second, End: 2500 * time.Millisecond}
	s := Summarize(o)
	if s.ThroughputSteadyOps < 990 || s.ThroughputSteadyOps > 1010 {
		t.Fatalf("steady %v ops/s, want 1000", s.ThroughputSteadyOps)
	}
	if got := s.ThroughputAfterHandoffOps; got < 990 || got > 1010 {
		t.Fatalf("throughput_after_handoff_ops = %v with writes at 1000/s throughout (steady %v ops/s) and the load ending 500 ms after the handoff; want 1000",
			got, s.ThroughputSteadyOps)
	}
}

// TestReviewS22eParseScaleBenchKeepsLayoutsApart: BenchmarkSplitUnderLoad
// runs both storage layouts (layout=per-shard/parent=…, layout=shared/
// parent=…) and its documented command (-bench SplitUnderLoad) prints
// both; ParseScaleBench keyed its points by parent size alone, so the
// scale curve's medians pooled per-shard splits (hundreds of ms) with
// shared ones (metadata only). Runs of different configurations must not
// share a median: here an error naming both.
func TestReviewS22eParseScaleBenchKeepsLayoutsApart(t *testing.T) {
	const out = `BenchmarkSplitUnderLoad/layout=per-shard/parent=100MiB-2   1   300.0 split-ms   10.0 stall-ms   107.0 parent-MiB
BenchmarkSplitUnderLoad/layout=per-shard/parent=100MiB-2   1   310.0 split-ms   11.0 stall-ms   107.0 parent-MiB
BenchmarkSplitUnderLoad/layout=shared/parent=100MiB-2      1   2.0 split-ms     1.0 stall-ms    107.0 parent-MiB
`
	pts, err := ParseScaleBench(strings.NewReader(out), "x")
	if err == nil {
		t.Fatalf("per-shard and shared runs pooled: %+v (split-ms median %v of 300, 310 per-shard and 2 shared)", pts, pts[0].SplitMs)
	}
	if !strings.Contains(err.Error(), "layout=per-shard") || !strings.Contains(err.Error(), "layout=shared") {
		t.Fatalf("error %q does not name both configurations", err)
	}
	// One layout selected (-bench 'SplitUnderLoad/layout=shared') parses.
	if _, err := ParseScaleBench(strings.NewReader(strings.SplitAfterN(out, "\n", 3)[2]), "x"); err != nil {
		t.Fatalf("one layout: %v", err)
	}
}

// TestReviewS22eReclaimFromTheRequest: reclaim_ms is documented (and
// quoted by compare's reading and findings' questions 2 and 4) as the
// time from the split request until the disk is back within 10 % of its
// settled size, but Reclaimed measured from WindowStart, which an aligned
// split (--align-flush) moves past the request by its wait for the
// parent's own flush: the wait went missing from the number.
func TestReviewS22eReclaimFromTheRequest(t *testing.T) {
	sec := time.Second
	o := &Outcome{Strategy: "rfc", Requested: sec, WindowStart: 1500 * time.Millisecond, WindowEnd: 1600 * time.Millisecond,
		End: 3 * sec, DiskAfter: 100,
		Disk: []DiskSample{{At: 900 * time.Millisecond, Bytes: 100}, {At: 1200 * time.Millisecond, Bytes: 100},
			{At: 2 * sec, Bytes: 200}, {At: 2100 * time.Millisecond, Bytes: 100}, {At: 3 * sec, Bytes: 100}}}
	if got, want := Reclaimed(o), 1100*time.Millisecond; got != want {
		t.Fatalf("Reclaimed = %v with the request at 1 s, the split's start at 1.5 s (aligned) and the disk settled from 2.1 s; want %v", got, want)
	}
}
