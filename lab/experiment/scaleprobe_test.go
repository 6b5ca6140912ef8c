package experiment

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// probeDataset is the probes' dataset: one shard of SHARDSPLIT_SCALE_DOCS
// 1 KiB documents (default 4 Mi), per-shard layout, built once in cache.
func probeDataset(t *testing.T, cache string) (DatasetConfig, *Dataset) {
	t.Helper()
	docs, _ := strconv.Atoi(os.Getenv("SHARDSPLIT_SCALE_DOCS"))
	if docs == 0 {
		docs = 4 << 20
	}
	cfg := DatasetConfig{
		Mode:     routing.ModePartition,
		Settings: routing.Settings{Shards: 1, RoutingShards: 1024, PartitionSize: 1},
		Layout:   storage.LayoutPerShard,
		Docs:     docs,
		Load:     loadgen.Config{Writers: benchWriters, IDsPerWriter: docs / benchWriters, DocSize: 1024, Seed: 1},
	}
	d, err := CachedDataset(filepath.Join(cache, "ds-"+strconv.Itoa(docs)), cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dataset %s: %.0f MiB, built in %s, %s of it settling (the load left L0 %d sublevels deep, debt %.0f MiB)",
		d.Dir, float64(d.Bytes)/(1<<20), d.Built, d.Settle, d.Owed.L0Sublevels, float64(d.Owed.Debt)/(1<<20))
	return cfg, d
}

// TestScaleProbe is a manual probe (skipped unless SHARDSPLIT_SCALE_PROBE
// names a dataset cache directory): one split of a SHARDSPLIT_SCALE_DOCS
// parent under the benchmark's load, with a debug log.
// SHARDSPLIT_SCALE_SERIAL=1 makes the children one after another.
func TestScaleProbe(t *testing.T) {
	cache := os.Getenv("SHARDSPLIT_SCALE_PROBE")
	if cache == "" {
		t.Skip("SHARDSPLIT_SCALE_PROBE not set")
	}
	cfg, d := probeDataset(t, cache)
	if os.Getenv("SHARDSPLIT_SCALE_BUILD_ONLY") != "" {
		return
	}
	var err error
	logger := zap.NewNop()
	if p := os.Getenv("SHARDSPLIT_SCALE_LOG"); p != "" {
		zc := zap.NewDevelopmentConfig()
		zc.OutputPaths = []string{p}
		logger, err = zc.Build()
		if err != nil {
			t.Fatal(err)
		}
		defer logger.Sync()
	}
	runDir := filepath.Join(cache, "run-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := d.Clone(runDir); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(runDir)
	load := cfg.Load
	load.Rate = 5000
	var align time.Duration // SHARDSPLIT_SCALE_ALIGN=5s: wait for the parent's own flush
	if a := os.Getenv("SHARDSPLIT_SCALE_ALIGN"); a != "" {
		if align, err = time.ParseDuration(a); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	samples := map[string]int{}
	sampled := make(chan struct{})
	// SHARDSPLIT_SCALE_STACKS=1 samples every goroutine's stack each 20 ms
	// (where the opens and closes spend their time). Off by default: each
	// sample stops the world, and a runtime trace of one probe run caught
	// one such stop lasting 5.7 ms inside the split's window, as long as the
	// stall the probe measures.
	sampleStacks := os.Getenv("SHARDSPLIT_SCALE_STACKS") == "1"
	go func() {
		defer close(sampled)
		if !sampleStacks {
			<-stop
			return
		}
		buf := make([]byte, 8<<20)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			n := runtime.Stack(buf, true)
			for _, g := range strings.Split(string(buf[:n]), "\n\n") {
				if !strings.Contains(g, "pebble.Open(") && !strings.Contains(g, ").Close(") && !strings.Contains(g, "createChild(") {
					continue
				}
				if !strings.Contains(g, "cockroachdb/pebble") && !strings.Contains(g, "createChild(") {
					continue
				}
				var frames []string
				for _, line := range strings.Split(g, "\n")[1:] {
					if !strings.HasPrefix(line, "\t") && len(frames) < 8 {
						frames = append(frames, line)
					}
				}
				samples[strings.Join(frames, " <- ")]++
			}
		}
	}()
	out, err := RunInPlace(context.Background(), InPlaceConfig{
		Dir: runDir, Dataset: d, Durability: storage.DurabilityRequest, Load: load, Logger: logger,
		Splits: []splitter.Plan{splitter.SplitPlan(0, 2)}, Steady: 3 * time.Second, After: 6 * time.Second,
		AlignFlush: align, Warm: WarmFlush, SerialChildren: os.Getenv("SHARDSPLIT_SCALE_SERIAL") != "",
	})
	close(stop)
	<-sampled
	for k, v := range samples {
		t.Logf("stack x%d (x20ms): %s", v, k)
	}
	if err != nil {
		t.Fatal(err)
	}
	stall, at := loadgen.LongestStall(out.Load.Records, out.WindowStart, out.WindowEnd)
	t.Logf("split %.1f ms, stall %.1f ms from +%.1f ms, node stall %.1f ms", ms(out.WindowEnd-out.WindowStart),
		ms(stall), ms(at-out.WindowStart), ms(out.NodeStall))
	t.Logf("CPU in the window %.1f ms, of it the split's (above the steady rate) %.1f ms", ms(out.WindowCPU), ms(out.SplitCPU()))
	t.Logf("warmed: waited %.1f ms for the parent's first own flush before the steady window (it came: %v)", ms(out.WarmWait), out.Warmed)
	t.Logf("waited %.1f ms for the parent's own flush (aligned %v)", ms(out.AlignWait), out.Aligned)
	// The same measure over steady windows as long, before the request (the
	// findings' "steady windows as long", without importing them).
	var steady []time.Duration
	for w, at := out.WindowEnd-out.WindowStart, out.Requested-2500*time.Millisecond; w > 0 && at+w <= out.Requested; at += w / 2 {
		steady = append(steady, loadgen.MaxStall(out.Load.Records, at, at+w))
	}
	if len(steady) > 0 {
		slices.Sort(steady)
		t.Logf("steady windows as long: median %.1f ms of %d", ms(steady[len(steady)/2]), len(steady))
	}
	// The same windows read as the phases' lines read theirs (phaseStall):
	// the longest quiet interval touching the window, not MaxStall, which
	// counts the latency of the writes in flight at the window's start.
	runQuiet := loadgen.QuietIntervals(out.Load.Records, 0, 1<<62, 0)
	var quiet []time.Duration
	for w, at := out.WindowEnd-out.WindowStart, out.Requested-2500*time.Millisecond; w > 0 && at+w <= out.Requested; at += w / 2 {
		quiet = append(quiet, longestTouching(runQuiet, at, at+w))
	}
	if len(quiet) > 0 {
		slices.Sort(quiet)
		t.Logf("steady windows as long, longest quiet interval: median %.2f ms of %d", ms(quiet[len(quiet)/2]), len(quiet))
	}
	// Throughput as question 11 reads it: acknowledgements in the window,
	// at least 100 ms long, against the 2.5 s before the request; and how
	// they fall in 10 ms buckets.
	recs, ws := out.Load.Records, out.WindowStart
	we := max(out.WindowEnd, ws+100*time.Millisecond)
	during := loadgen.Summarize(recs, ws, we).OpsPerS
	steadyOps := loadgen.Summarize(recs, out.Requested-2500*time.Millisecond, out.Requested).OpsPerS
	var buckets []string
	for at := ws; at < we; at += 10 * time.Millisecond {
		buckets = append(buckets, strconv.Itoa(loadgen.Summarize(recs, at, at+10*time.Millisecond).Acked))
	}
	after := min(out.WindowEnd+time.Second, out.End)
	t.Logf("after the handoff: longest stall %.1f ms, throughput %.2f of steady over %.0f ms", ms(loadgen.MaxStall(recs, out.WindowEnd, after)),
		loadgen.Summarize(recs, out.WindowEnd, after).OpsPerS/max(1, steadyOps), ms(after-out.WindowEnd))
	t.Logf("throughput %.2f of steady (%.0f / %.0f writes/s over %.0f ms); acks per 10 ms: %s", during/max(1, steadyOps), during, steadyOps, ms(we-ws), strings.Join(buckets, " "))
	for _, q := range loadgen.QuietIntervals(out.Load.Records, out.Requested-time.Second, out.WindowEnd+time.Second, 4*time.Millisecond) {
		t.Logf("quiet %.1f ms from %+.1f ms", ms(q.Len), ms(q.At-out.WindowStart))
	}
	// Each phase's own longest stall (phaseStall): the handoff's is the
	// writers' wait for the fence and the table's durability, whatever the
	// clone phase's CPU costs them.
	for _, p := range out.Phases {
		t.Logf("phase %s %.1f ms (+%.1f to +%.1f), longest stall %.2f ms", p.Name, ms(p.End-p.Start), ms(p.Start-out.WindowStart), ms(p.End-out.WindowStart),
			ms(longestTouching(runQuiet, p.Start, p.End)))
	}
	if len(out.Phases) > 1 { // the children are made one after the other in the clone phase
		next := out.Phases[1].Start - out.WindowStart
		for _, c := range out.Children {
			for _, st := range []struct {
				name string
				d    time.Duration
			}{{"flush", c.Flush}, {"checkpoint", c.Checkpoint}, {"open", c.Open}, {"excise", c.Excise}} {
				t.Logf("child %d %s ~+%.1f to +%.1f", c.Shard, st.name, ms(next), ms(next+st.d))
				next += st.d
			}
		}
	}
	for _, n := range out.Notes {
		t.Log(n)
	}
}

// phaseStall is the longest quiet interval of the run that begins or ends
// in [from, to), or spans it. Not MaxStall over the phase: that sweeps
// only the writes that overlap the phase, so it drops the acks just
// outside it that end quiet intervals, and reports the latency of the
// writes in flight at the phase's start (and of any slow write started in
// it) as a stall, however short the phase and however steady the acks.
func phaseStall(recs []loadgen.Record, from, to time.Duration) time.Duration {
	return longestTouching(loadgen.QuietIntervals(recs, 0, 1<<62, 0), from, to)
}

// longestTouching is phaseStall over the run's quiet intervals, found once.
func longestTouching(quiet []loadgen.Quiet, from, to time.Duration) time.Duration {
	var longest time.Duration
	for _, q := range quiet {
		if q.At < to && q.At+q.Len >= from {
			longest = max(longest, q.Len)
		}
	}
	return longest
}

func TestPhaseStall(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	// Steady load: a write every 100 µs, each taking 5 ms, so an ack
	// every 100 µs after the first 5 ms.
	var steady []loadgen.Record
	for s := 0; s < 200_000; s += 100 {
		steady = append(steady, loadgen.Record{Start: us(s), End: us(s + 5000), OK: true, Moving: true})
	}
	// One slow write started in the phase, acked 30 ms later, while the
	// writes started after the phase keep being acked.
	slow := append([]loadgen.Record{{Start: us(100_050), End: us(130_050), OK: true, Moving: true}}, steady...)
	// No ack in (90 ms, 130 ms), a write outstanding all along: a 40 ms
	// stall over the phase.
	stall := []loadgen.Record{
		{Start: 80 * time.Millisecond, End: 130 * time.Millisecond, OK: true, Moving: true},
		{Start: 85 * time.Millisecond, End: 90 * time.Millisecond, OK: true, Moving: true},
		{Start: 95 * time.Millisecond, End: 130 * time.Millisecond, OK: true, Moving: true},
	}
	for _, tt := range []struct {
		name     string
		recs     []loadgen.Record
		from, to time.Duration
		want     time.Duration
	}{
		{"steady, a 0.5 ms phase", steady, us(100_000), us(100_500), us(100)},
		{"steady, a 20 ms phase", steady, us(100_000), us(120_000), us(100)},
		{"a slow write in the phase", slow, us(100_000), us(100_500), us(100)},
		{"a stall over the whole phase", stall, 100 * time.Millisecond, 110 * time.Millisecond, 40 * time.Millisecond},
		{"a stall ending in the phase", stall, 125 * time.Millisecond, 135 * time.Millisecond, 40 * time.Millisecond},
		{"the run's first write", steady, 0, us(1000), 5 * time.Millisecond},
		{"no writes", nil, 0, time.Second, 0},
	} {
		if got := phaseStall(tt.recs, tt.from, tt.to); got != tt.want {
			t.Errorf("%s: phaseStall = %v, want %v", tt.name, got, tt.want)
		}
	}
}
