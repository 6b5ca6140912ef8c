package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

const runUsage = `splitdemo run: write continuously while splitting and merging, for crash tests.

Usage:
  splitdemo run --data DIR [flags]

Creates the index in DIR (or opens it, recovering any split a crash
interrupted), loads --docs documents into a new index, then writes with
--writers writers (index, update, delete; a quarter of the ids with custom
routing) while splitting: the given --split shards in order, and with
--split-every, repeatedly the active shard holding the most documents into
--split-ways children until --max-shards shards are active; and with
--merge-every, repeatedly two adjacent leaves of one root chosen by the seed
(one split or merge at a time). Writes are acknowledged only after an fsync
(request durability).

Each writer owns its ids, so per id the order of FILE is the order of
application. Before sending a write it appends to FILE
  {"w":W,"seq":N,"state":"attempt","id":"…","routing":"…","op":"index|delete","value_hash":H}
and the same line with "state":"ack" after the acknowledgement, each line
written to the OS before going on. The load of a new index, once each of
its --docs documents (base-0, base-1, ...) is acknowledged, is the line
  {…,"state":"loaded",…,"docs":N}
before any writer's. Runs until killed or --duration.

Flags:
  --data DIR            data directory (required)
  --shards N            number_of_shards of a new index (default 4)
  --docs N              documents loaded into a new index (default 1000)
  --writers N           concurrent writers (default 4)
  --mode MODE           partition or opensearch (default partition)
  --split SHARD:N       split SHARD into N at the start; repeatable
  --split-every D       split the fullest active shard every D (default: never)
  --split-ways N        children per periodic split (default 2)
  --max-shards M        stop periodic splits at M active shards (default 16)
  --merge-every D       merge two adjacent leaves of a root every D (default: never)
  --acked FILE          the write log described above (default: none)
  --seed S              workload seed (default 1)
  --duration D          stop after D (default: run until killed)
  --merges N            stop once N merges are done (needs --merge-every; --duration
                        still bounds the run)

Example:
  splitdemo run --data /tmp/ix --acked /tmp/ix.acked --split-every 200ms --duration 10s
  splitdemo run --data /tmp/ix --acked /tmp/ix.acked --split-every 100ms --merge-every 150ms
`

type runConfig struct {
	data, acked, modeName string
	shards, docs, writers int
	splits                []splitSpec
	every, mergeEvery     time.Duration
	ways, maxShards       int
	seed                  uint64
	stream                uint64 // the write log's size at start: see runWriter
	duration              time.Duration
	stopAfterMerges       int // stop once this many merges are done (0 = never)
}

func runRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := runConfig{}
	fs.StringVar(&c.data, "data", "", "")
	fs.StringVar(&c.acked, "acked", "", "")
	fs.StringVar(&c.modeName, "mode", "partition", "")
	fs.IntVar(&c.shards, "shards", 4, "")
	fs.IntVar(&c.docs, "docs", 1000, "")
	fs.IntVar(&c.writers, "writers", 4, "")
	fs.Func("split", "", func(v string) error {
		spec, err := parseSplitSpec(v)
		if err == nil && spec.points != nil {
			err = errors.New("run takes SHARD:N")
		}
		c.splits = append(c.splits, spec)
		return err
	})
	fs.DurationVar(&c.every, "split-every", 0, "")
	fs.IntVar(&c.ways, "split-ways", 2, "")
	fs.IntVar(&c.maxShards, "max-shards", 16, "")
	fs.DurationVar(&c.mergeEvery, "merge-every", 0, "")
	fs.Uint64Var(&c.seed, "seed", 1, "")
	fs.DurationVar(&c.duration, "duration", 0, "")
	fs.IntVar(&c.stopAfterMerges, "merges", 0, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, runUsage)
			return exitOK
		}
		fmt.Fprintf(stderr, "splitdemo run: %v\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "splitdemo run: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if c.data == "" {
		fmt.Fprintln(stderr, "splitdemo run: --data is required")
		return exitUsage
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--split-every", c.every}, {"--merge-every", c.mergeEvery}, {"--duration", c.duration}} {
		if d.v < 0 {
			fmt.Fprintf(stderr, "splitdemo run: %s %v: must not be negative\n", d.flag, d.v)
			return exitUsage
		}
	}
	if c.maxShards < 1 {
		fmt.Fprintf(stderr, "splitdemo run: --max-shards %d: must be at least 1\n", c.maxShards)
		return exitUsage
	}
	if c.writers < 1 || c.ways < 2 || c.docs < 0 {
		fmt.Fprintf(stderr, "splitdemo run: --writers %d, --split-ways %d, --docs %d: need writers >= 1, ways >= 2, docs >= 0\n", c.writers, c.ways, c.docs)
		return exitUsage
	}
	mode, err := routing.ParseMode(c.modeName)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo run: --mode %q: want partition or opensearch\n", c.modeName)
		return exitUsage
	}
	if c.stopAfterMerges < 0 || (c.stopAfterMerges > 0 && c.mergeEvery <= 0) {
		fmt.Fprintf(stderr, "splitdemo run: --merges %d: needs --merge-every and a count >= 1\n", c.stopAfterMerges)
		return exitUsage
	}
	settings, err := routing.NewSettings("index", c.shards, 0, 1)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo run: --shards %d: %v\n", c.shards, err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.duration)
		defer cancel()
	}
	if err := runLoad(ctx, c, mode, settings, stdout); err != nil {
		fmt.Fprintf(stderr, "splitdemo run: %v\n", err)
		return exitFail
	}
	return exitOK
}

// ackLog is the write log: one JSON line per attempt and per ack.
type ackLog struct {
	mu sync.Mutex
	f  *os.File
}

type ackLine struct {
	W         int    `json:"w"`
	Seq       int    `json:"seq"`
	State     string `json:"state"`
	ID        string `json:"id"`
	Routing   string `json:"routing"`
	Op        string `json:"op"`
	ValueHash uint64 `json:"value_hash"`
	Docs      int    `json:"docs,omitempty"` // "loaded": how many base-N documents
}

// endTornLine ends the last line of a write log opened for appending if a
// run killed mid-line left it without its newline, so that verify skips
// the torn line alone and not the first line this run appends, and
// returns the log's size before this run.
func endTornLine(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return 0, err
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, fi.Size()-1); err != nil {
		return 0, err
	}
	if last[0] != '\n' {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			return 0, err
		}
	}
	return fi.Size(), nil
}

func (l *ackLog) write(line ackLine) error {
	if l == nil {
		return nil
	}
	b, _ := json.Marshal(line)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.f.Write(append(b, '\n')) // one write(2): in the OS when it returns
	return err
}

func runLoad(ctx context.Context, c runConfig, mode routing.Mode, settings routing.Settings, stdout io.Writer) error {
	initial, err := routing.NewTable(mode, settings)
	if err != nil {
		return err
	}
	// The write log exists from the first instant, so a run killed while it
	// is still recovering or loading leaves an (empty) log to verify.
	var log *ackLog
	if c.acked != "" {
		f, err := os.OpenFile(c.acked, os.O_CREATE|os.O_APPEND|os.O_RDWR, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		log = &ackLog{f: f}
		size, err := endTornLine(f)
		if err != nil {
			return fmt.Errorf("--acked %q: %w", c.acked, err)
		}
		c.stream = uint64(size) // a rerun on the same log draws new values, still from --seed
	}
	// The index is new if DIR holds nothing yet: missing, or made empty
	// beforehand (--data $(mktemp -d)).
	entries, statErr := os.ReadDir(c.data)
	fresh := statErr != nil || len(entries) == 0
	n, j, rep, err := recovery.Open(storage.Options{Dir: c.data, Durability: storage.DurabilityRequest}, initial, zap.NewNop())
	if err != nil {
		return err
	}
	defer n.Close()
	for _, d := range rep.Decisions {
		fmt.Fprintf(stdout, "recovered %s (%s)\n", describeDecision(d), d.Why)
	}
	if fresh {
		if err := loadDocs(n, c); err != nil {
			return err
		}
		// Every loaded document is acknowledged: verify checks them all.
		if err := log.write(ackLine{State: "loaded", Docs: c.docs}); err != nil {
			return err
		}
	}
	ctx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	var wg sync.WaitGroup
	errs := make(chan error, c.writers+1)
	for w := range c.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runWriter(ctx, n, log, c, w); err != nil {
				errs <- err
				stopWriters() // the run has failed: end it now, not at --duration or a kill
			}
		}()
	}
	splitErr := runSplits(ctx, n, j, c)
	if splitErr != nil || c.stopAfterMerges > 0 {
		stopWriters() // --merges reached, or the splits failed: stop now
	}
	<-ctx.Done()
	wg.Wait()
	close(errs)
	if splitErr != nil {
		return splitErr
	}
	return <-errs
}

// baseDoc is the i-th document run loads into a new index.
func baseDoc(i int) (id string, source []byte) {
	return fmt.Sprintf("base-%d", i), []byte(fmt.Sprintf("base value %d", i))
}

func loadDocs(n *node.Node, c runConfig) error {
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	for i := range c.docs {
		id, src := baseDoc(i)
		if _, err := r.Index(id, "", src); err != nil {
			return err
		}
	}
	return nil
}

// runWriter writes until ctx is done; each writer owns ids w<W>-<k>.
func runWriter(ctx context.Context, n *node.Node, log *ackLog, c runConfig, w int) error {
	r := node.NewRouter(n, n.Table(), node.RouterConfig{MaxRetries: 32})
	// The workload is the seed's: writer w's stream is (seed, w), offset by
	// the write log's length so that a rerun appending to the same log does
	// not repeat its values (and so cannot hide a lost write behind one).
	rng := rand.New(rand.NewPCG(c.seed, uint64(w)<<48^c.stream))
	for seq := 0; ctx.Err() == nil; seq++ {
		k := rng.IntN(200)
		line := ackLine{W: w, Seq: seq, State: "attempt", ID: fmt.Sprintf("w%d-%d", w, k), Op: "index"}
		if k%4 == 0 {
			line.Routing = fmt.Sprintf("tenant-%d", k%3)
		}
		src := []byte(fmt.Sprintf("w%d seq %d %x", w, seq, rng.Uint64()))
		if rng.IntN(8) == 0 {
			line.Op, src = "delete", nil
		} else {
			line.ValueHash = model.Digest(src)
		}
		if err := log.write(line); err != nil {
			return err
		}
		var err error
		if line.Op == "delete" {
			_, err = r.Delete(line.ID, line.Routing)
		} else {
			_, err = r.Index(line.ID, line.Routing, src)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("writer %d: %w", w, err)
		}
		line.State = "ack"
		if err := log.write(line); err != nil {
			return err
		}
	}
	return nil
}

// describeDecision names a recovery decision: a split's parent or a
// merge's sources and target.
func describeDecision(d recovery.Decision) string {
	if d.Kind == splitter.KindMerge {
		target := routing.ShardID(0) // never reserved
		if len(d.Targets) > 0 {
			target = d.Targets[0]
		}
		return fmt.Sprintf("merge %d of shards %v into %d: %s", d.ID, d.Sources, target, d.Action)
	}
	return fmt.Sprintf("split %d of shard %d: %s", d.ID, d.Sources[0], d.Action)
}

// runSplits does the --split list, then the periodic splits and merges, one
// at a time (the journal and recovery rely on it).
func runSplits(ctx context.Context, n *node.Node, j *splitter.Journal, c runConfig) error {
	d := splitter.NewDriver(n, splitter.Config{Journal: j})
	split := func(parent routing.ShardID, ways int) error {
		r, err := d.Run(splitter.SplitPlan(parent, ways))
		if err != nil {
			return err
		}
		if r.Phase != splitter.PhaseDone && ctx.Err() == nil {
			return fmt.Errorf("split of %d aborted: %w", parent, r.Err)
		}
		return nil
	}
	for _, s := range c.splits {
		if err := split(s.shard, s.ways); err != nil {
			return err
		}
	}
	if c.every <= 0 && c.mergeEvery <= 0 {
		return nil
	}
	splits, merges := tickerOrNil(c.every), tickerOrNil(c.mergeEvery)
	merged := 0
	defer splits.stop()
	defer merges.stop()
	rng := rand.New(rand.NewPCG(c.seed, 0x6d65726765)) // "merge"
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-splits.c:
			if err := splitFullest(n, c, split); err != nil {
				return err
			}
		case <-merges.c:
			ok, err := mergeAdjacent(ctx, n, d, rng)
			if err != nil {
				return err
			}
			if ok {
				merged++
			}
			if c.stopAfterMerges > 0 && merged >= c.stopAfterMerges {
				return nil
			}
		}
	}
}

// ticker is a time.Ticker whose channel is nil (never ready) when off.
type ticker struct {
	t *time.Ticker
	c <-chan time.Time
}

func tickerOrNil(d time.Duration) ticker {
	if d <= 0 {
		return ticker{}
	}
	t := time.NewTicker(d)
	return ticker{t: t, c: t.C}
}

func (t ticker) stop() {
	if t.t != nil {
		t.t.Stop()
	}
}

// splitFullest splits the active shard holding the most documents, unless
// --max-shards are active.
func splitFullest(n *node.Node, c runConfig, split func(routing.ShardID, int) error) error {
	active := n.Table().ActiveShards()
	if len(active) >= c.maxShards {
		return nil
	}
	fullest, most := routing.ShardID(0), -1
	for _, id := range active {
		s, ok := n.ShardStore(id)
		if !ok {
			continue // retired since the table was read
		}
		o, _ := n.Table().Shard(id)
		if k, err := s.CountKeys(o.Span); err == nil && k > most {
			fullest, most = id, k
		}
	}
	if err := split(fullest, c.ways); err != nil && routing.ExceptionOf(err) != routing.IllegalArgument { // e.g. too narrow to split further
		return err
	}
	return nil
}

// mergeAdjacent merges two adjacent leaves of one root, chosen by rng
// among every such pair, and says whether a merge was done; with none (no
// root has two leaves) it does nothing.
func mergeAdjacent(ctx context.Context, n *node.Node, d *splitter.Driver, rng *rand.Rand) (bool, error) {
	t := n.Table()
	var pairs [][]routing.ShardID
	for r := range t.Settings().Shards {
		leaves := t.Leaves(routing.ShardID(r))
		for i := 1; i < len(leaves); i++ {
			pairs = append(pairs, []routing.ShardID{leaves[i-1].Shard, leaves[i].Shard})
		}
	}
	if len(pairs) == 0 {
		return false, nil
	}
	sources := pairs[rng.IntN(len(pairs))]
	r, err := d.Run(splitter.MergePlan(sources...))
	if err != nil {
		return false, err
	}
	if r.Phase != splitter.PhaseDone && ctx.Err() == nil {
		return false, fmt.Errorf("merge of %v aborted: %w", sources, r.Err)
	}
	return r.Phase == splitter.PhaseDone, nil
}
