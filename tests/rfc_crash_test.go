package tests

// The rfc strategy's children (storage.ChildKeepAll: whole-parent copies
// whose foreign documents are deleted one by one after the handoff) under
// the crash rules of crash_test.go: a power loss at every durable
// operation from the split's start until both children's cleanups have
// ended, writes going on throughout. Every crash image must recover to a
// serving index whose reads show no foreign document (recovery.Check:
// every document once, on the shard the table names), with every
// acknowledged write; once the cleanup that node.Open restarts has ended,
// no store may hold a key outside its span and no marker may be left.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
)

// rfcCleanupPace makes the cleanup take many small batches, so crashes
// land between them.
var rfcCleanupPace = storage.ForeignCleanupOptions{Batch: 25, Pause: time.Millisecond}

func TestRFCCleanupCrashPoints(t *testing.T) {
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		t.Run("mode="+mode.String(), func(t *testing.T) { rfcCrashRun(t, mode, 1) })
	}
}

func rfcCrashRun(t *testing.T, mode routing.Mode, seed uint64) {
	m := model.New(model.Options{})
	cc := newCrashCloner(crashfs.New(), m, rand.New(rand.NewPCG(seed, 7)))
	clones := cc.clones
	tab, _ := routing.NewTable(mode, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	opts := storage.Options{Dir: "/data", FS: cc.fs, Durability: storage.DurabilityRequest,
		CacheBytes: 1 << 20, ForeignCleanup: rfcCleanupPace}
	n, j, _, err := recovery.Open(opts, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := node.NewRouter(n, tab, node.RouterConfig{MaxRetries: 16})
	// Documents enough for a few dozen batches of deletes.
	for i := range 600 {
		id := fmt.Sprintf("p-%d", i)
		mw := m.Attempt(id, model.Doc([]byte(id)))
		if _, err := r.Index(id, "", []byte(id)); err != nil {
			t.Fatal(err)
		}
		m.Ack(mw)
	}
	// In the parent's tables, which a keep-all child keeps whole (of its
	// parent's unflushed writes a child takes only its own), so the
	// children have foreign documents to delete.
	parent, _ := n.Store(0)
	if err := parent.Flush(); err != nil {
		t.Fatal(err)
	}

	var checked, pending atomic.Int64
	var wgCheck sync.WaitGroup
	wgCheck.Add(1)
	go func() {
		defer wgCheck.Done()
		for c := range clones {
			p, err := checkRFCCrashClone(c, tab, m)
			if err != nil {
				t.Errorf("crash point %d: %v", c.index, err)
			}
			if p {
				pending.Add(1)
			}
			checked.Add(1)
		}
	}()

	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("w%d-%d", w, wr.IntN(30))
				if wr.IntN(3) == 0 {
					id = fmt.Sprintf("p-%d", wr.IntN(600)) // rewrite a loaded document
				}
				source := fmt.Appendf(nil, "w%d-v%d", w, i)
				var mw *model.Write
				var err error
				if wr.IntN(5) == 0 {
					mw = m.Attempt(id, model.Absent)
					_, err = r.Delete(id, "")
				} else {
					mw = m.Attempt(id, model.Doc(source))
					_, err = r.Index(id, "", source)
				}
				if err != nil {
					m.Fail(mw)
					t.Errorf("writer %d: %v", w, err)
					return
				}
				m.Ack(mw)
				time.Sleep(500 * time.Microsecond)
			}
		}()
	}
	time.Sleep(10 * time.Millisecond)
	cc.armed.Store(true)
	d := splitter.NewDriver(n, splitter.Config{Journal: j, ChildBuild: storage.ChildKeepAll})
	rep, err := d.Run(splitter.SplitPlan(0, 2))
	if err != nil || rep.Phase != splitter.PhaseDone {
		t.Fatalf("split: %v %v", err, rep.Err)
	}
	if err := n.Engine().WaitForeignCleanups(context.Background()); err != nil {
		t.Fatal(err)
	}
	cc.disarm()
	stop.Store(true)
	wg.Wait()
	close(clones)
	wgCheck.Wait()
	ended, _ := n.Engine().ForeignCleanups()
	_ = n.Close()
	deleted := 0
	for _, e := range ended {
		if !e.Done {
			t.Errorf("live cleanup of %d did not finish: %v", e.Shard, e.Err)
		}
		deleted += e.Deleted
	}
	if deleted < 300 {
		t.Errorf("the live cleanups deleted %d documents; want most of the 600 loaded", deleted)
	}
	// The point of the test: crashes during the cleanup, not only before.
	if checked.Load() < 20 || pending.Load() < 5 {
		t.Errorf("%d crash points, %d of them with a cleanup pending; want >= 20 and >= 5", checked.Load(), pending.Load())
	}
	t.Logf("%d crash points recovered and checked, %d during a cleanup", checked.Load(), pending.Load())
}

// checkRFCCrashClone recovers a crash image and checks it at once (reads
// show no foreign document, every acknowledged write is there), then
// waits for the cleanups that opening restarted and checks that no store
// holds a foreign key any more. It reports whether a cleanup was pending.
func checkRFCCrashClone(c crashClone, initial *routing.Table, m *model.Model) (bool, error) {
	opts := storage.Options{Dir: "/data", FS: c.fs, Durability: storage.DurabilityRequest, CacheBytes: 1 << 20,
		ForeignCleanup: rfcCleanupPace}
	n, j, _, err := recovery.Open(opts, initial, nil)
	if err != nil {
		return false, fmt.Errorf("recover: %w", err)
	}
	defer n.Close()
	wasPending := false
	for _, id := range n.Table().ActiveShards() {
		s, err := n.Store(id)
		if err != nil {
			return false, err
		}
		p, err := s.ForeignPending()
		if err != nil {
			return false, err
		}
		wasPending = wasPending || p
	}
	check := func(when string) error {
		found := map[string]model.Value{}
		rep := recovery.Check(n, j, func(_ routing.ShardID, d storage.Doc) { found[d.ID] = model.Doc(d.Source) })
		if !rep.OK() {
			return fmt.Errorf("%s: invariants: %q", when, rep.Violations)
		}
		r, err := m.Check(c.at, found)
		if err != nil {
			return err
		}
		if !r.OK() {
			return fmt.Errorf("%s: %d lost, %d unexpected, %d wrong of %d ids: %v", when, r.Lost, r.Unexpected, r.Wrong, r.Checked, r.Mismatches)
		}
		return nil
	}
	if err := check("right after recovery"); err != nil {
		return wasPending, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Engine().WaitForeignCleanups(ctx); err != nil {
		return wasPending, fmt.Errorf("restarted cleanup: %w", err)
	}
	for _, id := range n.Table().ActiveShards() {
		s, _ := n.Store(id)
		p, err := s.ForeignPending()
		if err != nil || p {
			return wasPending, fmt.Errorf("shard %d: marker left after the restarted cleanup (%v)", id, err)
		}
		if k, err := s.ForeignDocs(); err != nil || k != 0 {
			return wasPending, fmt.Errorf("shard %d holds %d foreign documents after the restarted cleanup (%v)", id, k, err)
		}
	}
	return wasPending, check("after the restarted cleanup")
}
