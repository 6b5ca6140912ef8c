package experiment

import (
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/internal/loadgen"
)

// An aligned split's wait for the parent's own flush belongs to neither
// window (Outcome.SteadyEnd): the steady read latencies must end at the
// request, like the steady writes, not at the split's start.
func TestSummarizeSteadyReadsEndAtTheRequest(t *testing.T) {
	ms := time.Millisecond
	var recs []loadgen.Record
	for at := time.Duration(0); at < 8*time.Second; at += 10 * ms {
		recs = append(recs, loadgen.Record{Start: at, End: at + ms, OK: true, Moving: true})
	}
	reads := &loadgen.ReadResult{}
	for at := time.Duration(0); at < 8*time.Second; at += 10 * ms {
		d := 2 * ms
		if at >= 4*time.Second && at < 7*time.Second { // the wait: the parent's own flush slows reads
			d = 80 * ms
		}
		reads.Records = append(reads.Records,
			loadgen.ReadRecord{Kind: loadgen.ReadGet, Start: at, End: at + d, OK: true},
			loadgen.ReadRecord{Kind: loadgen.ReadSearch, Start: at, End: at + d, OK: true})
	}
	// Requested at 4 s, waited 3 s, split from 7 s to 7.1 s.
	o := &Outcome{Strategy: "inplace", Load: &loadgen.Result{Records: recs}, Reads: reads,
		Requested: 4 * time.Second, AlignWait: 3 * time.Second, Aligned: true,
		WindowStart: 7 * time.Second, WindowEnd: 7100 * ms, End: 8 * time.Second}
	m := Summarize(o)
	if m.GetP99SteadyMs > 10 || m.SearchP99SteadyMs > 10 {
		t.Errorf("steady p99 get %.1f ms, search %.1f ms: the steady read window runs into the 3 s wait after the request (want ~2 ms, like the steady writes' window, which ends at %v)",
			m.GetP99SteadyMs, m.SearchP99SteadyMs, o.SteadyEnd())
	}
}
