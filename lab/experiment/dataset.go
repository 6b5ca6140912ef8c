// Package experiment runs the measured experiments that splitdemo reports
// and the benchmarks quote: it builds a starting dataset once, clones it
// (hard links) for each strategy so every strategy starts from identical
// data, runs a strategy under the continuous write load of package
// loadgen, and verifies the index against the load's model afterwards.
package experiment

import (
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// DatasetConfig describes the starting data.
type DatasetConfig struct {
	Mode     routing.Mode
	Settings routing.Settings
	Layout   storage.Layout
	Docs     int // documents loaded before the experiment
	Load     loadgen.Config
}

// Dataset is a built, closed data directory to clone.
type Dataset struct {
	Dir    string
	Config DatasetConfig
	Table  *routing.Table
	Bytes  int64 // unique bytes on disk
	Built  time.Duration
	// Settle is the wait, within Built, for the compactions the load left
	// owing; Owed is what they were when the load ended (the deepest L0
	// and the largest debt over the shards).
	Settle time.Duration
	Owed   storage.Backlog
}

// BuildDataset loads cfg.Docs documents, using the ids the load will write
// (so the load updates existing documents), with async durability and large
// batches, waits for the compactions the load left owing (settle), then
// closes the store. progress, if set, is called with the number of
// documents loaded.
func BuildDataset(dir string, cfg DatasetConfig, logger *zap.Logger, progress func(int)) (*Dataset, error) {
	start := time.Now()
	if logger == nil { // as storage.Open and node.Open take it (TestStaleQuick)
		logger = zap.NewNop()
	}
	cfg.Load.Defaults()
	tab, err := routing.NewTable(cfg.Mode, cfg.Settings)
	if err != nil {
		return nil, err
	}
	eng, err := storage.Open(storage.Options{Dir: dir, Layout: cfg.Layout, Durability: storage.DurabilityAsync, Logger: logger})
	if err != nil {
		return nil, err
	}
	n, err := node.Open(node.Config{Engine: eng, Table: tab, Logger: logger})
	if err != nil {
		_ = eng.Close()
		return nil, err
	}
	if err := load(n, tab, cfg, progress); err != nil {
		_ = n.Close()
		return nil, err
	}
	for _, id := range tab.ActiveShards() {
		s, err := n.Store(id)
		if err == nil {
			err = s.Sync()
		}
		if err != nil {
			_ = n.Close()
			return nil, err
		}
	}
	settleStart := time.Now()
	var stores []backlogger
	for _, id := range tab.ActiveShards() {
		s, err := n.Store(id)
		if err != nil {
			_ = n.Close()
			return nil, err
		}
		stores = append(stores, s)
	}
	owed, err := settle(clock.Real{}, stores, settleIdle, settleLimit)
	if err != nil {
		_ = n.Close()
		return nil, err
	}
	settled := time.Since(settleStart)
	logger.Info("dataset settled", zap.Duration("wait", settled), zap.Int("l0_sublevels", owed.L0Sublevels), zap.Uint64("debt", owed.Debt))
	u, _ := eng.DiskUsage()
	if err := n.Close(); err != nil {
		return nil, err
	}
	return &Dataset{Dir: dir, Config: cfg, Table: tab, Bytes: u.Unique, Built: time.Since(start), Settle: settled, Owed: owed}, nil
}

// How long a loaded dataset's stores must run no compaction to count as
// settled, and the longest settle waits.
const (
	settleIdle  = time.Second
	settleLimit = 10 * time.Minute
)

// backlogger is a shard as settle sees it.
type backlogger interface {
	Backlog() (storage.Backlog, error)
}

// settle waits until no store of the shards has run a compaction or a
// flush for idle, and returns what the load left owing: the deepest L0
// and the largest debt over the shards when the wait began. A poll that
// finds one running, or more ended than the last poll (one that began
// and ended between them), restarts the idle time. Past limit it fails,
// naming what is still owed.
//
// Why: a bulk load writes far faster than one compaction at a time can keep
// up with (a 4 GiB parent in about 130 s), so a dataset closed straight
// after it carries that debt into every clone. Question 11's 4 GiB parents,
// unsettled, were at L0's stop-writes depth in whole sets of five runs, and
// one run met Pebble's own write stop there (430 ms, no WAL sync for
// 425 ms) and the next split gave up after three drain timeouts
// (design/2026-11-30-split-scale.md). A shard that grew to 4 GiB under the
// benchmark's 5,000 writes/s has had hours to compact: the split should
// start from that state, not from the end of a bulk load. A split of a
// parent in debt is its own case (the stop-writes fallback,
// Engine.CreateChildren).
//
// Idle, not Pebble's debt estimate: the estimate counts every byte of L0,
// even the few files below its compaction threshold that Pebble leaves
// there, so it need never reach zero. Pebble schedules a compaction as
// soon as one scores, so a store idle for a second wants none.
func settle(clk clock.Clock, shards []backlogger, idle, limit time.Duration) (owed storage.Backlog, err error) {
	start := clk.Now()
	idleSince := start
	var ended int64
	for poll := 0; ; poll++ {
		var now storage.Backlog // the deepest L0 and largest debt; running and ended summed
		for _, s := range shards {
			b, err := s.Backlog()
			if err != nil {
				return owed, fmt.Errorf("experiment: settle the loaded dataset: %w", err)
			}
			now = storage.Backlog{L0Sublevels: max(now.L0Sublevels, b.L0Sublevels), Debt: max(now.Debt, b.Debt),
				Running: now.Running + b.Running, Ended: now.Ended + b.Ended}
		}
		if poll == 0 {
			owed = now
		}
		busy := now.Running > 0 || (poll > 0 && now.Ended != ended)
		ended = now.Ended
		if busy {
			idleSince = clk.Now()
		} else if clk.Since(idleSince) >= idle {
			return owed, nil
		}
		if clk.Since(start) > limit {
			return owed, fmt.Errorf("experiment: the loaded dataset still compacts after %s (L0 %d sublevels, debt %d bytes, %d running)",
				limit, now.L0Sublevels, now.Debt, now.Running)
		}
		clk.Sleep(min(idle/4, 250*time.Millisecond))
	}
}

// load writes the initial documents in per-shard batches of 500.
func load(n *node.Node, tab *routing.Table, cfg DatasetConfig, progress func(int)) error {
	batches := map[routing.ShardID][]storage.Op{}
	flush := func(id routing.ShardID) error {
		s, err := n.Store(id)
		if err != nil {
			return err
		}
		if _, err := s.Write(batches[id], nil); err != nil {
			return fmt.Errorf("experiment: load shard %d: %w", id, err)
		}
		batches[id] = batches[id][:0]
		return nil
	}
	i := 0
	err := eachInitialDoc(cfg, true, func(id, routingValue string, src []byte) error {
		p, shard := tab.Route(id, routingValue)
		batches[shard] = append(batches[shard], storage.Op{Kind: storage.OpIndex, Root: tab.Keyspace(p.Root), Key: tab.KeyOf(p),
			ID: id, Routing: routingValue, Source: src})
		if len(batches[shard]) == 500 {
			if err := flush(shard); err != nil {
				return err
			}
		}
		if progress != nil && i%10000 == 0 {
			progress(i)
		}
		i++
		return nil
	})
	if err != nil {
		return err
	}
	for id, b := range batches {
		if len(b) > 0 {
			if err := flush(id); err != nil {
				return err
			}
		}
	}
	if progress != nil {
		progress(cfg.Docs)
	}
	return nil
}

// eachInitialDoc calls fn with every document the dataset is loaded with,
// in load order: its id, routing value and source, drawn from the load's
// seed. fresh gives each call a source of its own (fn may keep it);
// otherwise one buffer is reused.
func eachInitialDoc(cfg DatasetConfig, fresh bool, fn func(id, routingValue string, src []byte) error) error {
	lc := cfg.Load
	writers := max(1, lc.Writers)
	perWriter := max(1, lc.IDsPerWriter)
	rng := rand.New(rand.NewPCG(lc.Seed, 99))
	size := max(1, lc.DocSize)
	src := make([]byte, size)
	for i := range cfg.Docs {
		w, k := i%writers, (i/writers)%perWriter
		id, routingValue := lc.IDFor(w, k)
		if i >= writers*perWriter { // more docs than the load's ids: extra ids
			id = fmt.Sprintf("bulk-%09d", i)
		}
		if fresh {
			src = make([]byte, size)
		}
		for j := 0; j < size; j += 8 {
			v := rng.Uint64()
			for b := 0; b < 8 && j+b < size; b++ {
				src[j+b] = byte(v >> (8 * b))
			}
		}
		if err := fn(id, routingValue, src); err != nil {
			return err
		}
	}
	return nil
}

// InitialDocs calls fn with the id and the source digest (model.Digest) of
// every document the dataset was loaded with.
func (d *Dataset) InitialDocs(fn func(id string, digest uint64)) {
	_ = eachInitialDoc(d.Config, false, func(id, _ string, src []byte) error {
		fn(id, model.Digest(src))
		return nil
	})
}

// Clone makes an identical copy of the dataset in dir.
func (d *Dataset) Clone(dir string) error {
	return storage.CloneDir(nil, d.Dir, dir)
}

// InitialIDs returns every id the dataset was loaded with and its routing.
func (d *Dataset) InitialIDs() map[string]string {
	lc := d.Config.Load
	writers, perWriter := max(1, lc.Writers), max(1, lc.IDsPerWriter)
	ids := make(map[string]string, d.Config.Docs)
	for i := range d.Config.Docs {
		id, r := lc.IDFor(i%writers, (i/writers)%perWriter)
		if i >= writers*perWriter {
			id, r = fmt.Sprintf("bulk-%09d", i), ""
		}
		ids[id] = r
	}
	return ids
}
