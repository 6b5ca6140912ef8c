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

const runUsage = `splitdemo run: write continuously while splitting, for crash tests.

Usage:
  splitdemo run --data DIR [flags]

Creates the index in DIR (or opens it, recovering any split a crash
interrupted), loads --docs documents into a new index, then writes with
--writers writers (index, update, delete; a quarter of the ids with custom
routing) while splitting: the given --split shards in order, and with
--split-every, repeatedly the active shard holding the most documents into
--split-ways children until --max-shards shards are active. Writes are
acknowledged only after an fsync (request durability).

Each writer owns its ids, so per id the order of FILE is the order of
application. Before sending a write it appends to FILE
  {"w":W,"seq":N,"state":"attempt","id":"…","routing":"…","op":"index|delete","value_hash":H}
and the same line with "state":"ack" after the acknowledgement, each line
written to the OS before going on. Runs until killed or --duration.

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
  --acked FILE          the write log described above (default: none)
  --seed S              workload seed (default 1)
  --duration D          stop after D (default: run until killed)

Example:
  splitdemo run --data /tmp/ix --acked /tmp/ix.acked --split-every 200ms --duration 10s
`

type runConfig struct {
	data, acked, modeName string
	shards, docs, writers int
	splits                []splitSpec
	every                 time.Duration
	ways, maxShards       int
	seed                  uint64
	stream                uint64 // the write log's size at start: see runWriter
	duration              time.Duration
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
	fs.Uint64Var(&c.seed, "seed", 1, "")
	fs.DurationVar(&c.duration, "duration", 0, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, runUsage)
			return exitOK
		}
		fmt.Fprintf(stderr, "splitdemo run: %v\n", err)
		return exitUsage
	}
	if c.data == "" {
		fmt.Fprintln(stderr, "splitdemo run: --data is required")
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
		f, err := os.OpenFile(c.acked, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		log = &ackLog{f: f}
		if fi, err := f.Stat(); err == nil {
			c.stream = uint64(fi.Size()) // a rerun on the same log draws new values, still from --seed
		}
	}
	_, statErr := os.Stat(c.data)
	fresh := statErr != nil
	n, j, rep, err := recovery.Open(storage.Options{Dir: c.data, Durability: storage.DurabilityRequest}, initial, zap.NewNop())
	if err != nil {
		return err
	}
	defer n.Close()
	for _, d := range rep.Decisions {
		fmt.Fprintf(stdout, "recovered split %d of shard %d: %s (%s)\n", d.Split, d.Parent, d.Action, d.Why)
	}
	if fresh {
		if err := loadDocs(n, c); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, c.writers+1)
	for w := range c.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runWriter(ctx, n, log, c, w); err != nil {
				errs <- err
			}
		}()
	}
	splitErr := runSplits(ctx, n, j, c)
	<-ctx.Done()
	wg.Wait()
	close(errs)
	if splitErr != nil {
		return splitErr
	}
	return <-errs
}

func loadDocs(n *node.Node, c runConfig) error {
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	for i := range c.docs {
		if _, err := r.Index(fmt.Sprintf("base-%d", i), "", []byte(fmt.Sprintf("base value %d", i))); err != nil {
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

// runSplits does the --split list, then the periodic splits.
func runSplits(ctx context.Context, n *node.Node, j *splitter.Journal, c runConfig) error {
	d := splitter.NewDriver(n, splitter.Config{Journal: j})
	split := func(parent routing.ShardID, ways int) error {
		r, err := d.Run(splitter.Plan{Parent: parent, Ways: ways})
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
	if c.every <= 0 {
		return nil
	}
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		active := n.Table().ActiveShards()
		if len(active) >= c.maxShards {
			continue
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
		if err := split(fullest, c.ways); err != nil {
			if routing.ExceptionOf(err) == routing.IllegalArgument { // e.g. too narrow to split further
				continue
			}
			return err
		}
	}
}
