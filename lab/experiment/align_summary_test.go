package experiment

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/lab/loadgen"
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

// splitdemo compare --align-flush: summary.json must say how long the
// in-place split waited for its parent's own flush and whether it came in
// time; past the bound the split forced a flush like an unaligned one, and
// nothing else in the summary tells the two apart.
func TestSummaryRecordsTheAlignment(t *testing.T) {
	o := &Outcome{Strategy: "inplace", Load: &loadgen.Result{},
		Requested: 4 * time.Second, AlignWait: 5 * time.Second, Aligned: false,
		WindowStart: 9 * time.Second, WindowEnd: 9100 * time.Millisecond, End: 10 * time.Second}
	js, err := json.Marshal(Summarize(o))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	if m["align_wait_ms"] != 5000.0 || m["aligned"] != false {
		t.Errorf("summary of a split that waited 5 s and did not align: align_wait_ms %v, aligned %v (keys %d); want 5000 and false",
			m["align_wait_ms"], m["aligned"], len(m))
	}
}
