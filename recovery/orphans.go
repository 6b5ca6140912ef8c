package recovery

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// ErrStoresWithoutTable is returned by Open when the data directory holds
// shard stores but no routing table: starting a new index there would
// serve an empty index over existing data (and a later split could reuse
// the stores' ids). An operator must restore the table or clear the
// directory.
var ErrStoresWithoutTable = errors.New("recovery: shard stores but no routing table")

// storesWithoutTable returns an ErrStoresWithoutTable naming what the data
// directory holds, or nil if it holds no store.
func storesWithoutTable(eng *storage.Engine) error {
	dirs, err := eng.StoreDirs()
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return nil
	}
	return fmt.Errorf("%w (found %v in %s: restore the table or remove them)", ErrStoresWithoutTable, dirs, eng.Dir())
}

// removeOrphans destroys the shard stores no one will ever open (per-shard
// layout): every shard-N directory whose id the table names neither as an
// active shard nor as a child of a split in progress. A crash can leave
// one behind (a child whose creation failed before its split journaled it,
// a parent whose retirement did not finish); left alone it would make every
// later split that picks its id fail. It runs after the journal decisions
// and returns the ids it removed, ascending.
func removeOrphans(eng *storage.Engine, t *routing.Table, logger *zap.Logger) ([]routing.ShardID, error) {
	if eng.Layout() != storage.LayoutPerShard {
		return nil, nil
	}
	ids, err := eng.ShardDirs()
	if err != nil {
		return nil, err
	}
	var removed []routing.ShardID
	for _, id := range ids {
		if _, named := t.Shard(id); named { // active, or a child of a split in progress
			continue
		}
		if err := eng.DestroyShard(id); err != nil {
			return removed, fmt.Errorf("remove orphan shard store %d: %w", id, err)
		}
		logger.Info("orphan shard store removed", zap.Uint32("shard", uint32(id)), zap.Uint64("table", uint64(t.Version())))
		removed = append(removed, id)
	}
	return removed, nil
}
