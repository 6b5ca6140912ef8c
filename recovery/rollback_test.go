package recovery

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// A reservation in the durable table that no unfinished split in the
// journal accounts for (a table whose rename reached the disk while its
// directory fsync failed: the node kept the old table, the split aborted
// and journaled "aborted") is rolled back on open, not left in progress for
// ever. Found by the simulation (tests/sim, seeds 10, 177, 216, 275).
func TestOpenCancelsAReservationNoSplitAccountsFor(t *testing.T) {
	fs := vfs.NewMem()
	tab, _ := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 32, PartitionSize: 1})
	opts := storage.Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20}
	n, _, _, err := Open(opts, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = n.Close()
	eng, err := storage.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	reserved, err := routing.Apply(tab, routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.PersistTable(eng, reserved); err != nil {
		t.Fatal(err)
	}
	_ = eng.Close()

	n, j, rep, err := Open(opts, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	t.Logf("decisions: %+v", rep.Decisions)
	if c := Check(n, j, nil); !c.OK() {
		t.Fatalf("after recovery: %v", c.Violations)
	}
	if v := n.Table().Version(); v <= reserved.Version() {
		t.Fatalf("recovered table v%d, want above the reservation's v%d", v, reserved.Version())
	}
}
