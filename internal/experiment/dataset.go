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

	"github.com/shardsplit/shardsplit/internal/loadgen"
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
}

// BuildDataset loads cfg.Docs documents, using the ids the load will write
// (so the load updates existing documents), with async durability and large
// batches, then closes the store. progress, if set, is called with the
// number of documents loaded.
func BuildDataset(dir string, cfg DatasetConfig, logger *zap.Logger, progress func(int)) (*Dataset, error) {
	start := time.Now()
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
	u, _ := eng.DiskUsage()
	if err := n.Close(); err != nil {
		return nil, err
	}
	return &Dataset{Dir: dir, Config: cfg, Table: tab, Bytes: u.Unique, Built: time.Since(start)}, nil
}

// load writes the initial documents in per-shard batches of 500.
func load(n *node.Node, tab *routing.Table, cfg DatasetConfig, progress func(int)) error {
	lc := cfg.Load
	writers := max(1, lc.Writers)
	perWriter := max(1, lc.IDsPerWriter)
	rng := rand.New(rand.NewPCG(lc.Seed, 99))
	size := max(1, lc.DocSize)
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
	for i := range cfg.Docs {
		w, k := i%writers, (i/writers)%perWriter
		id, routingValue := lc.IDFor(w, k)
		if i >= writers*perWriter { // more docs than the load's ids: extra ids
			id = fmt.Sprintf("bulk-%09d", i)
		}
		p, shard := tab.Route(id, routingValue)
		src := make([]byte, size)
		for j := 0; j < size; j += 8 {
			v := rng.Uint64()
			for b := 0; b < 8 && j+b < size; b++ {
				src[j+b] = byte(v >> (8 * b))
			}
		}
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
