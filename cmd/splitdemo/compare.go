package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/baseline"
	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

const compareUsage = `splitdemo compare: in-place split, the RFC's in-place split and new-index _split under
continuous writes and reads.

Usage:
  splitdemo [compare] [flags]

Builds an index (default: 8 shards, routing shards 1024, 1 KiB documents, some
tenants routed with a custom routing value, one hot tenant so one shard is hot),
then, on identical copies of that data and under the same continuous writes
and reads:
  inplace   splits the hot shard in place (children from a hard-linked checkpoint
            excised to their spans, catch-up, a handoff of milliseconds), while
            writers keep writing;
  rfc       the same split as OpenSearch's in-place split RFC designs it: each
            child is a hard-linked copy of the WHOLE parent (nothing excised),
            the same catch-up and handoff, and afterwards each child removes its
            foreign documents in the background while it serves (--cleanup);
  newindex  does what OpenSearch users do today: write block, _split x2 of the
            whole index to a new index (its foreign documents removed by
            --cleanup), alias swap (source stays blocked); writers retry.
Readers run beside the writers: routed gets of acknowledged documents and
unrouted searches across every shard (a page of hits; every 200th search an
exact count of every document), each hit checked against the table.
After each strategy every acknowledged write is verified against the index.

Writes to --out (default ./splitdemo-out/): report.md, throughput.png,
latency.png, timeline.csv, summary.json. A progress line goes to stderr;
Ctrl-C stops cleanly.

Flags:
  --docs N             documents loaded before the writes start (default 200000)
  --doc-size BYTES     document source size (default 1024)
  --writers N          concurrent writers (default 16)
  --rate N             target writes per second, all writers, > 0 (default 2000)
  --shards N           number_of_shards (default 8; routing shards = the create default)
  --split SHARD[:N]    in-place: the shard to split and into how many (default: the
                       hot shard, 2); refused unless inplace or rfc runs, as are
                       --mode and --align-flush
  --mode MODE          in-place routing mode: partition or opensearch (default partition)
  --durability D       request (fsync before ack) or async (default request)
  --strategy S         inplace, rfc, newindex, all (the three), or both (inplace and
                       newindex, as before rfc existed) (default all)
  --read-rate N        routed gets per second; searches run at N/10 per second;
                       0 = no reads (default 200)
  --count-every N      every Nth search is an exact count of every document (a full
                       scan here) instead of a page of hits; 0 = never (default 200:
                       one every 10 s at the default rates)
  --cleanup C          how rfc's children and newindex's targets remove the documents
                       they do not own (default mark; refused unless rfc or newindex
                       runs):
                         mark     Lucene's, what OpenSearch pays: a scan that routes
                                  every document and marks the foreign ones deleted
                                  without rewriting any (ShardSplittingQuery sets
                                  live-docs bits), then merges that reclaim their
                                  space, measured on their own (newindex: the scan
                                  under the write block, the merge after the alias
                                  swap; rfc: both after the handoff)
                         per-doc  a point delete per foreign document, then a
                                  compaction: a write per document, more than Lucene
                                  pays for the same deletes
                         range    the foreign key ranges dropped without reading them
                                  (newindex: excise; rfc: range tombstones and a
                                  compaction): what key-ordered storage allows and
                                  Lucene, whose segments mix every shard's documents,
                                  cannot
  --steady DURATION    writes before the split, > 0 (default 4s)
  --after DURATION     writes after the split (default 10s; the rfc strategy goes on
                       until its children's cleanup has ended, at most 60s more)
  --align-flush D      inplace and rfc: wait up to D for the parent's own memtable
                       flush before the split begins, so its children replay almost
                       nothing of the parent's unflushed writes (0 = begin at once,
                       the default; newindex always begins at once); the window
                       is measured from the split's start, the steady window ends at
                       its request
  --seed N             workload seed (default 1)
  --out DIR            output directory (default ./splitdemo-out)
  --json FILE          also write summary.json to FILE
  --data DIR           where to build the index (default: a temporary directory,
                       removed afterwards)
  --log-level LEVEL    zap level for the log on stderr (default warn)

Examples:
  go run ./cmd/splitdemo
  go run ./cmd/splitdemo compare --docs 1000000 --rate 5000 --writers 64 --cleanup per-doc --out big-run
  go run ./cmd/splitdemo compare --strategy rfc --mode opensearch   # the RFC's design exactly
`

// compareConfig is the parsed command line.
type compareConfig struct {
	docs, docSize, writers, shards, splitWays int
	rate                                      float64
	splitShard                                int // -1 = the hot shard
	mode                                      routing.Mode
	durability                                storage.Durability
	inplace, rfc, newindex                    bool
	readRate                                  float64
	countEvery                                int
	cleanup                                   baseline.Cleanup
	steady, after, alignFlush                 time.Duration
	seed                                      uint64
	out, jsonPath, data                       string
	logLevel                                  string
	args                                      []string
}

func parseCompare(args []string, stdout io.Writer) (*compareConfig, int, error) {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &compareConfig{args: args, splitShard: -1, splitWays: 2}
	fs.IntVar(&c.docs, "docs", 200000, "")
	fs.IntVar(&c.docSize, "doc-size", 1024, "")
	fs.IntVar(&c.writers, "writers", 16, "")
	fs.Float64Var(&c.rate, "rate", 2000, "")
	fs.IntVar(&c.shards, "shards", 8, "")
	split := fs.String("split", "", "")
	mode := fs.String("mode", "partition", "")
	durability := fs.String("durability", "request", "")
	strategy := fs.String("strategy", "all", "")
	fs.Float64Var(&c.readRate, "read-rate", 200, "")
	fs.IntVar(&c.countEvery, "count-every", 200, "")
	cleanup := fs.String("cleanup", "mark", "")
	fs.DurationVar(&c.steady, "steady", 4*time.Second, "")
	fs.DurationVar(&c.after, "after", 10*time.Second, "")
	fs.DurationVar(&c.alignFlush, "align-flush", 0, "")
	fs.Uint64Var(&c.seed, "seed", 1, "")
	fs.StringVar(&c.out, "out", "splitdemo-out", "")
	fs.StringVar(&c.jsonPath, "json", "", "")
	fs.StringVar(&c.data, "data", "", "")
	fs.StringVar(&c.logLevel, "log-level", "warn", "")
	if code, err := parseFlags(fs, args, compareUsage, stdout); err != nil {
		return nil, code, err
	}
	var err error
	if c.mode, err = routing.ParseMode(*mode); err != nil {
		return nil, exitUsage, fmt.Errorf("--mode %q: want partition or opensearch", *mode)
	}
	if c.durability, err = storage.ParseDurability(*durability); err != nil {
		return nil, exitUsage, fmt.Errorf("--durability %q: want request or async", *durability)
	}
	if c.cleanup, err = baseline.ParseCleanup(*cleanup); err != nil {
		return nil, exitUsage, fmt.Errorf("--cleanup %q: want mark, per-doc or range", *cleanup)
	}
	switch *strategy {
	case "all":
		c.inplace, c.rfc, c.newindex = true, true, true
	case "both": // before rfc existed, "both" meant these two
		c.inplace, c.newindex = true, true
	case "inplace":
		c.inplace = true
	case "rfc":
		c.rfc = true
	case "newindex":
		c.newindex = true
	default:
		return nil, exitUsage, fmt.Errorf("--strategy %q: want inplace, rfc, newindex, all or both", *strategy)
	}
	// A flag that shapes only strategies the run does not run would be
	// ignored while summary.json's config still reported it.
	var unused []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "split", "mode", "align-flush":
			if !c.inplace && !c.rfc {
				unused = append(unused, fmt.Sprintf("--%s %q shapes the in-place strategies (inplace, rfc), which --strategy %q does not run", f.Name, f.Value, *strategy))
			}
		case "cleanup":
			if !c.newindex && !c.rfc {
				unused = append(unused, fmt.Sprintf("--%s %q shapes the rfc and newindex strategies, which --strategy %q does not run", f.Name, f.Value, *strategy))
			}
		}
	})
	if len(unused) > 0 {
		return nil, exitUsage, errors.New(strings.Join(unused, "; "))
	}
	if *split != "" {
		id, ways, hasWays := strings.Cut(*split, ":")
		n, err := strconv.Atoi(id)
		if err != nil || n < 0 {
			return nil, exitUsage, fmt.Errorf("--split %q: shard %q is not a shard id", *split, id)
		}
		c.splitShard = n
		if hasWays {
			if c.splitWays, err = strconv.Atoi(ways); err != nil || c.splitWays < 2 {
				return nil, exitUsage, fmt.Errorf("--split %q: %q is not a number of children >= 2", *split, ways)
			}
		}
	}
	for name, v := range map[string]int{"--docs": c.docs, "--doc-size": c.docSize, "--writers": c.writers} {
		if v < 1 {
			return nil, exitUsage, fmt.Errorf("%s %d: must be at least 1", name, v)
		}
	}
	if err := paceable("--rate", c.rate, c.writers, fmt.Sprintf("one write per writer of %d", c.writers)); err != nil {
		return nil, exitUsage, err
	}
	if c.countEvery < 0 {
		return nil, exitUsage, fmt.Errorf("--count-every %d: must not be negative", c.countEvery)
	}
	if c.readRate < 0 {
		return nil, exitUsage, fmt.Errorf("--read-rate %v: must not be negative", c.readRate)
	}
	if c.readRate != 0 { // 0: no reads; searches run at a tenth of the rate
		if err := paceable("--read-rate", c.readRate, 10, "one search"); err != nil {
			return nil, exitUsage, err
		}
	}
	// The steady window is what the split window is measured against
	// (throughput during the split as a share of steady): without one the
	// share divides by 0 ops/s.
	if c.steady <= 0 {
		return nil, exitUsage, fmt.Errorf("--steady %v: must be positive", c.steady)
	}
	if c.after < 0 {
		return nil, exitUsage, fmt.Errorf("--after %v: must not be negative", c.after)
	}
	if c.alignFlush < 0 {
		return nil, exitUsage, fmt.Errorf("--align-flush %v: must not be negative", c.alignFlush)
	}
	if _, err := routing.NewSettings("index", c.shards, 0, 1); err != nil {
		return nil, exitUsage, fmt.Errorf("--shards %d: %w", c.shards, err)
	}
	if c.splitShard >= c.shards {
		return nil, exitUsage, fmt.Errorf("--split %q: the index has shards 0..%d", *split, c.shards-1)
	}
	return c, exitOK, nil
}

func runCompare(args []string, stdout, stderr io.Writer) int {
	cfg, code, err := parseCompare(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return code
	}
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo compare: %v\n", err)
		return code
	}
	undo, err := prepareOutputs(cfg.out, cfg.jsonPath)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo compare: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := compare(ctx, cfg, stderr)
	if err != nil {
		undo() // nothing to write: leave no empty --out behind
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "\nsplitdemo compare: interrupted; nothing written")
		return exitFail
	}
	if err != nil {
		fmt.Fprintf(stderr, "\nsplitdemo compare: %v\n", err)
		return exitFail
	}
	if err := writeOutputs(cfg, res); err != nil {
		fmt.Fprintf(stderr, "splitdemo compare: write report: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s\nreport: %s\n", res.reading, filepath.Join(cfg.out, "report.md"))
	for _, o := range res.outcomes {
		if !o.Verify.OK() {
			fmt.Fprintf(stderr, "splitdemo compare: %s verification FAILED: %+v\n", o.Strategy, o.Verify)
			return exitFail
		}
		if o.Reads != nil && o.Reads.Foreign > 0 {
			fmt.Fprintf(stderr, "splitdemo compare: %s: reads returned %d foreign documents\n", o.Strategy, o.Reads.Foreign)
			return exitFail
		}
		if n := o.FailedWrites(); n > 0 && mustServe(o.Strategy) {
			fmt.Fprintf(stderr, "splitdemo compare: %s: %d writes failed\n", o.Strategy, n)
			return exitFail
		}
	}
	return exitOK
}

// foreignModel is the rfc children's cleanup of a --cleanup model.
func foreignModel(c baseline.Cleanup) storage.ForeignModel {
	switch c {
	case baseline.CleanupMark:
		return storage.ForeignMark
	case baseline.CleanupRange:
		return storage.ForeignRange
	}
	return storage.ForeignPerDoc
}

// readConfig is the read load of --read-rate and --count-every: gets at
// the rate, searches at a tenth of it, every countEvery-th search a full
// count. 200 gets/s is a tenth of the default write rate: enough samples
// for a p99 in each one-second window (and about 20 in a 100 ms split
// window) while a get costs one Pebble point read. A page of hits costs a
// seek and ten steps per shard. A count is a scan of every document here
// (OpenSearch answers a match_all count from segment metadata): about
// 0.2-1 s on the default index, and it pushes the writers' blocks out of
// the block cache. Measured side by side (inplace only, 4 runs each, a
// machine at load 13-16): with one count a second the split window's
// stall went from 50 to 94 ms (medians) and throughput during the split
// from 0.77 to 0.41 of steady, while gets and pages alone, or one count
// every 10 s, left both where they were without reads. Hence one count
// in 200 searches.
func readConfig(cfg *compareConfig) loadgen.ReadConfig {
	return loadgen.ReadConfig{GetRate: cfg.readRate, SearchRate: cfg.readRate / 10, CountEvery: cfg.countEvery, Seed: cfg.seed}
}

// comparison is everything a compare run produced.
type comparison struct {
	cfg        *compareConfig
	settings   routing.Settings
	hotShard   routing.ShardID
	datasetDoc int64
	outcomes   []*experiment.Outcome
	summary    map[string]any
	reading    string
	started    time.Time
	took       time.Duration
}

// progress shows the current stage on stderr: a spinner on a terminal, a
// line per stage otherwise (logs and CI stay readable).
type progress struct {
	bar  *progressbar.ProgressBar
	w    io.Writer
	last string
	done chan struct{}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, done: make(chan struct{})}
	if !isTerminal(w) {
		return p
	}
	p.bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(w),
		progressbar.OptionSpinnerType(14), progressbar.OptionSetElapsedTime(true), progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond))
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				_ = p.bar.Add(1)
			}
		}
	}()
	return p
}

func (p *progress) stage(s string) {
	if p.bar != nil {
		p.bar.Describe(s)
		return
	}
	// Without a terminal, print each stage once (not every progress count).
	if head, _, _ := strings.Cut(s, ":"); head != p.last {
		p.last = head
		fmt.Fprintln(p.w, "splitdemo:", s)
	}
}

func (p *progress) finish() {
	close(p.done)
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zap.ParseAtomicLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	zc := zap.NewDevelopmentConfig()
	zc.Level = lvl
	zc.OutputPaths, zc.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	return zc.Build()
}

// compare builds the dataset(s) and runs the strategies.
func compare(ctx context.Context, cfg *compareConfig, stderr io.Writer) (*comparison, error) {
	logger, err := newLogger(cfg.logLevel)
	if err != nil {
		return nil, err
	}
	defer logger.Sync() //nolint:errcheck
	res := &comparison{cfg: cfg, started: time.Now()}
	res.settings, _ = routing.NewSettings("index", cfg.shards, 0, 1)
	dir := cfg.data
	if dir == "" {
		if dir, err = os.MkdirTemp("", "splitdemo-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	load := loadgen.Config{Writers: cfg.writers, Rate: cfg.rate, DocSize: cfg.docSize,
		IDsPerWriter: max(100, cfg.docs/cfg.writers), Tenants: 8, HotShare: 0.3, Seed: cfg.seed}
	p := newProgress(stderr)
	defer p.finish()

	datasets := map[routing.Mode]*experiment.Dataset{}
	build := func(mode routing.Mode) (*experiment.Dataset, error) {
		if d, ok := datasets[mode]; ok {
			return d, nil
		}
		dc := experiment.DatasetConfig{Mode: mode, Settings: res.settings, Layout: storage.LayoutPerShard, Docs: cfg.docs, Load: load}
		d, err := experiment.BuildDataset(filepath.Join(dir, "dataset-"+mode.String()), dc, logger, func(n int) {
			p.stage(fmt.Sprintf("loading %s dataset: %d/%d documents", mode, n, cfg.docs))
		})
		datasets[mode] = d
		return d, err
	}
	tab, _ := routing.NewTable(cfg.mode, res.settings)
	_, res.hotShard = tab.Route("any", "tenant-0")
	if cfg.splitShard >= 0 {
		res.hotShard = routing.ShardID(cfg.splitShard)
	}
	reads := readConfig(cfg)
	for _, keepAll := range []bool{false, true} {
		name := map[bool]string{false: "inplace", true: "rfc"}[keepAll]
		if (keepAll && !cfg.rfc) || (!keepAll && !cfg.inplace) {
			continue
		}
		d, err := build(cfg.mode)
		if err != nil {
			return nil, err
		}
		res.datasetDoc = d.Bytes
		childBuild := storage.ChildExcise
		what := "splitting shard %d in place"
		if keepAll {
			childBuild, what = storage.ChildKeepAll, "splitting shard %d in place as the RFC (whole-parent children, "+cfg.cleanup.String()+" cleanup)"
		}
		p.stage(fmt.Sprintf("%s: writing %v, then "+what, name, cfg.steady, res.hotShard))
		runDir := filepath.Join(dir, name)
		if err := d.Clone(runDir); err != nil {
			return nil, err
		}
		out, err := experiment.RunInPlace(ctx, experiment.InPlaceConfig{
			Dir: runDir, Dataset: d, Durability: cfg.durability, Load: load,
			Splits: []splitter.Plan{splitter.SplitPlan(res.hotShard, cfg.splitWays)},
			Steady: cfg.steady, After: cfg.after, Logger: logger, StaleEvery: 200,
			ChildBuild: childBuild, Reads: reads, AlignFlush: cfg.alignFlush,
			ForeignCleanup: storage.ForeignCleanupOptions{Model: foreignModel(cfg.cleanup)},
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		res.outcomes = append(res.outcomes, out)
	}
	if cfg.newindex {
		d, err := build(routing.ModePartition)
		if err != nil {
			return nil, err
		}
		res.datasetDoc = max(res.datasetDoc, d.Bytes)
		p.stage(fmt.Sprintf("newindex: writing %v, then write block, _split x2, alias swap", cfg.steady))
		out, err := experiment.RunNewIndex(ctx, experiment.NewIndexConfig{
			Dir: filepath.Join(dir, "newindex"), Dataset: d, Durability: cfg.durability, Load: load,
			Factor: 2, Cleanup: cfg.cleanup, Steady: cfg.steady, After: cfg.after, Logger: logger, Reads: reads,
		})
		if err != nil {
			return nil, fmt.Errorf("newindex: %w", err)
		}
		res.outcomes = append(res.outcomes, out)
	}
	p.stage("writing the report")
	res.took = time.Since(res.started)
	res.summary = summarize(res)
	res.reading = reading(res)
	return res, nil
}
