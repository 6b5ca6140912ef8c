package node_test

import (
	"errors"
	"testing"
	"time"
)

// Retire destroys a shard's store. While the table that stopped naming it
// is published but not durable, the durable table (the one a failed commit
// and recovery go back to) still names it the owner: retiring it then would
// destroy the only authoritative copy of its documents. Retire must refuse
// until the table is durable.
func TestReviewNodeRetireRefusesAShardTheDurableTableNames(t *testing.T) {
	n, eng, p, _ := pendingSplit(t)
	err := n.Retire(0, time.Second)
	if err == nil {
		t.Errorf("Retire of the split parent while its table is not durable succeeded")
	}
	if _, open := eng.Shard(0); !open {
		t.Fatalf("the parent's store was destroyed before the table that retires it was durable")
	}
	if err := p.Commit(func() error { return errors.New("injected: fsync failed") }); err == nil {
		t.Fatal("commit succeeded")
	}
	// The node failed; recovery goes back to the durable table, in which
	// shard 0 owns its documents: its store must still be there.
}
