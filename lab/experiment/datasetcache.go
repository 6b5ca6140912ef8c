package experiment

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// cachedDataset is what a dataset cache directory records beside the data:
// enough to recognise the configuration it was built with and to rebuild
// the Dataset without loading it again.
type cachedDataset struct {
	Key    string
	Bytes  int64
	Built  time.Duration
	Settle time.Duration
	Owed   storage.Backlog
}

// datasetKey names the parts of cfg that decide the data (the load's
// callbacks do not), and how the build left it: "settled" since the build
// waits for the load's compactions (settle), so a cache built before that
// is built again.
func datasetKey(cfg DatasetConfig) string {
	l := cfg.Load
	l.Defaults()
	return fmt.Sprintf("mode=%s settings=%+v layout=%s docs=%d writers=%d ids=%d size=%d tenants=%d seed=%d settled",
		cfg.Mode, cfg.Settings, cfg.Layout, cfg.Docs, l.Writers, l.IDsPerWriter, l.DocSize, l.Tenants, l.Seed)
}

// CachedDataset returns the dataset cfg describes, built in dir by an
// earlier call if its record there matches cfg, else built now (into a
// temporary directory renamed into place, so an interrupted build is never
// mistaken for a finished one). Large benchmarks use it to build a
// multi-GiB dataset once across runs; every run works on a Clone.
func CachedDataset(dir string, cfg DatasetConfig, logger *zap.Logger) (*Dataset, error) {
	key := datasetKey(cfg)
	rec := filepath.Join(dir, "dataset.json")
	if b, err := os.ReadFile(rec); err == nil {
		var c cachedDataset
		if err := json.Unmarshal(b, &c); err == nil && c.Key == key {
			tab, err := routing.NewTable(cfg.Mode, cfg.Settings)
			if err != nil {
				return nil, err
			}
			cfg.Load.Defaults()
			return &Dataset{Dir: filepath.Join(dir, "data"), Config: cfg, Table: tab, Bytes: c.Bytes, Built: c.Built, Settle: c.Settle, Owed: c.Owed}, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("experiment: dataset cache %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("experiment: dataset cache %s: %w", dir, err)
	}
	tmp := dir + ".building"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("experiment: dataset cache %s: %w", dir, err)
	}
	d, err := BuildDataset(filepath.Join(tmp, "data"), cfg, logger, nil)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(cachedDataset{Key: key, Bytes: d.Bytes, Built: d.Built, Settle: d.Settle, Owed: d.Owed})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "dataset.json"), b, 0o644); err != nil {
		return nil, fmt.Errorf("experiment: dataset cache %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("experiment: dataset cache %s: %w", dir, err)
	}
	d.Dir = filepath.Join(dir, "data")
	return d, nil
}
