package storage

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// noNewTables fails, once armed, every creation of a table file: a disk
// whose table writes fail for good while its WAL, already allocated, still
// takes writes.
func noNewTables() *failAlways {
	return &failAlways{
		match: func(op errorfs.Op) bool { return op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst") },
		fail:  func(op errorfs.Op) error { return fmt.Errorf("injected: create %s: %w", op.Path, syscall.EIO) },
	}
}

// A split whose parent cannot write a table must fail, not wait: Pebble's
// DB.Flush waits for the memtable to be flushed, and a failed flush is
// retried at once, without a limit (DB.flush: "TODO(peter): count
// consecutive flush errors and backoff"), so a split's forced flush that
// waited for it would wait for good, holding the parent's log and
// compactions. CreateChildren must return the flush's error, the
// parent must keep serving, and once the disk recovers, Pebble's retry
// flushes the memtable.
func TestAFailedForcedFlushFailsTheSplit(t *testing.T) {
	for _, copyWAL := range []bool{false, true} {
		t.Run(fmt.Sprintf("copyWAL=%v", copyWAL), func(t *testing.T) {
			inj := noNewTables()
			// FlushChildren: the flush a split makes when the retained
			// history cannot stand in for the memtables.
			e, parent := openParentOn(t, "/data", errorfs.Wrap(vfs.NewMem(), inj), Options{CopyChildWAL: copyWAL, FlushChildren: true})
			// Above flushBeforeCheckpoint, so the copying build flushes too.
			writeDocs(t, parent, "d", 3000, 1024)
			parent.HoldLog()
			inj.armed.Store(true)
			type result struct {
				children []*Shard
				err      error
			}
			done := make(chan result, 1)
			go func() {
				children, _, err := e.CreateChildren(parent, halves(), ChildExcise, true)
				done <- result{children, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(20 * time.Second):
				inj.armed.Store(false) // let Pebble's retry succeed, so the close can end
				<-done
				t.Fatalf("CreateChildren still waiting 20 s after the parent's table writes began to fail (%d failed creations)", inj.hits.Load())
			}
			for _, c := range r.children {
				if c != nil {
					t.Errorf("child %d made while the parent could not write a table", c.ID())
				}
			}
			if r.err == nil || !strings.Contains(r.err.Error(), "injected") {
				t.Fatalf("CreateChildren: %v; want the failed flush's error", r.err)
			}
			t.Logf("CreateChildren failed with: %v (%d failed creations)", r.err, inj.hits.Load())
			// The parent serves: its WAL takes writes, its documents read.
			writeDocs(t, parent, "after", 10, 64)
			if n, err := parent.CountKeys(rootSpan(2)); err != nil || n != 3010 {
				t.Fatalf("parent after the failed split: %d documents, %v; want 3010", n, err)
			}
			inj.armed.Store(false)
			if err := parent.st.db.Flush(); err != nil {
				t.Fatalf("the parent's flush once the disk recovered: %v", err)
			}
			if err := parent.ReleaseLog(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
