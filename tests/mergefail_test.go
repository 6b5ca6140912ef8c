package tests

// Failure paths and restarts of the in-place merge. Each test drives a
// merge into a path the happy-path tests never take and requires what the
// product promises.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// idOn returns a document id the table routes to shard want.
func idOn(t *testing.T, tab *routing.Table, want routing.ShardID) string {
	t.Helper()
	for i := range 1000 {
		id := fmt.Sprintf("d%d", i)
		if _, s := tab.Route(id, ""); s == want {
			return id
		}
	}
	t.Fatalf("no id routes to shard %d", want)
	return ""
}

// A split's children and a merge's target keep their sequence numbers
// above every document they hold, across a restart. The handoff raised them
// above the parent's (every source's) in memory only, and what the store
// had persisted could be lower: a per-shard merge target inherits the
// largest source's number but holds the other sources' documents with
// their own, higher, numbers; in the shared layout a child's (a target's)
// number is the parent's (the sources') at its creation, and the writes
// during catch-up land in its keys with higher ones. Reopened before its
// first write, the shard numbered its writes below documents it held: an
// update got a lower _seq_no than the version it replaced.
func TestHandoffSeqSurvivesRestart(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		for _, c := range []struct {
			op         string
			duringCopy bool // the source (parent) takes writes during catch-up
		}{{"split", false}, {"split", true}, {"merge", false}, {"merge", true}} {
			op := c.op
			t.Run(fmt.Sprintf("%s/%s/writes-during=%t", layout, op, c.duringCopy), func(t *testing.T) {
				fs := vfs.NewMem()
				opts := storage.Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20, Layout: layout}
				tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 4, PartitionSize: 1})
				if err != nil {
					t.Fatal(err)
				}
				n, j, _, err := recovery.Open(opts, tab, nil)
				if err != nil {
					t.Fatal(err)
				}
				r := node.NewRouter(n, tab, node.RouterConfig{})
				var last node.Result
				var id string // the document whose updates run the sequence number ahead
				write := func(k int) {
					t.Helper()
					for i := range k {
						if last, err = r.Index(id, "", fmt.Appendf(nil, "v%d", i)); err != nil {
							t.Fatal(err)
						}
					}
				}
				// During catch-up (if c.duringCopy), the source (parent) the
				// document is on takes 20 more updates of it.
				during := !c.duringCopy
				hook := func(_ splitter.Phase, in splitter.Intent) {
					if in.Kind == splitter.IntentCatchUp && !during {
						during = true
						write(20)
					}
				}
				d := splitter.NewDriver(n, splitter.Config{Journal: j})
				if op == "split" {
					id = idOn(t, n.Table(), 0)
					write(5)
					d = splitter.NewDriver(n, splitter.Config{Journal: j, Hook: hook})
				}
				if rep, err := d.Run(splitter.SplitPlan(0, 2)); err != nil || rep.Phase != splitter.PhaseDone {
					t.Fatalf("split: %v %v", err, rep.Err)
				}
				if op == "merge" {
					// Source 1 (the first: the largest on a tie) takes one
					// write, source 2 many, so its number runs ahead.
					id = idOn(t, n.Table(), 1)
					write(1)
					id = idOn(t, n.Table(), 2)
					write(30)
					d = splitter.NewDriver(n, splitter.Config{Journal: j, Hook: hook})
					rep, err := d.Run(splitter.MergePlan(1, 2))
					if err != nil || rep.Phase != splitter.PhaseDone {
						t.Fatalf("merge: %v %v", err, rep.Err)
					}
				}
				if !during {
					t.Fatal("no catch-up round: the hook wrote nothing during the operation")
				}
				if err := n.Close(); err != nil {
					t.Fatal(err)
				}
				n, _, _, err = recovery.Open(opts, tab, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer n.Close()
				r = node.NewRouter(n, tab, node.RouterConfig{})
				before := last
				write(1)
				if last.Seq <= before.Seq {
					t.Fatalf("update of %s after the %s and a restart got seq %d on shard %d; the version it replaced had seq %d on shard %d (sequence numbers went back)",
						id, op, last.Seq, last.Shard, before.Seq, before.Shard)
				}
			})
		}
	}
}

// nodeFileOp reports whether op is one of the node's own durable file
// operations — on TABLE, SPLITLOG and their temporary files, a sync of the
// data directory, the removal of a shard store — rather than Pebble's
// (a failed WAL or MANIFEST write makes Pebble end the process).
func nodeFileOp(op errorfs.Op) bool {
	if op.Kind.ReadOrWrite() != errorfs.OpIsWrite || op.Kind == errorfs.OpFileClose {
		return false
	}
	if op.Kind == errorfs.OpRemoveAll {
		return true
	}
	if op.Path == "/data" {
		return true
	}
	return filepath.Dir(op.Path) == "/data" && !strings.HasPrefix(filepath.Base(op.Path), "shard-")
}

// A merge whose k-th durable file operation of the node's own (a TABLE or
// SPLITLOG write, a directory sync, a store removal) fails with ENOSPC, for
// every k: the merge either fails the node (a published table could not be
// made durable) or ends cleanly — done, or aborted with both sources
// serving, no operation log held, no merge left in the table or the
// journal, and a second merge of the same shards completing (no id
// poisoned). Then a power loss keeping only synced data recovers, passes
// Check, and every acknowledged write is there.
func TestMergeFailsAtEveryNodeFileOp(t *testing.T) {
	sources := []routing.ShardID{1, 2}
	fired := true
	for k := 1; fired; k++ {
		fired = false
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			var armed atomic.Bool
			var count atomic.Int32
			var hit atomic.Pointer[errorfs.Op]
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if armed.Load() && nodeFileOp(op) && count.Add(1) == int32(k) {
					hit.Store(&op)
					return fmt.Errorf("injected: %w", syscall.ENOSPC)
				}
				return nil
			})
			n, j, tab := openFailpath(t, errorfs.Wrap(mem, inj))
			d := splitter.NewDriver(n, splitter.Config{Journal: j})
			if rep, err := d.Run(splitter.SplitPlan(0, 2)); err != nil || rep.Phase != splitter.PhaseDone {
				t.Fatalf("split: %v %v", err, rep.Err)
			}
			acked := map[string]string{}
			for i := range 20 {
				acked[fmt.Sprintf("d%d", i)] = "v1"
			}
			r := node.NewRouter(n, tab, node.RouterConfig{})
			// During catch-up a write to each source.
			hook := func(_ splitter.Phase, in splitter.Intent) {
				if in.Kind != splitter.IntentCatchUp {
					return
				}
				for _, s := range sources {
					id := idOn(t, n.Table(), s)
					if _, err := r.Index(id, "", []byte("during")); err == nil {
						acked[id] = "during"
					}
				}
			}
			armed.Store(true)
			rep, err := splitter.NewDriver(n, splitter.Config{Journal: j, Hook: hook}).Run(splitter.MergePlan(sources...))
			armed.Store(false)
			if hit.Load() == nil {
				return // k is past the merge's last operation
			}
			fired = true
			t.Logf("ENOSPC on op %d %s: merge %s (%v), run error %v", hit.Load().Kind, hit.Load().Path, rep.Phase, rep.Err, err)
			switch {
			case err != nil:
				if !errors.Is(err, node.ErrFailed) {
					t.Fatalf("merge could not reach a clean end and the node did not fail: %v", err)
				}
			case rep.Phase == splitter.PhaseAborted:
				for _, id := range sources {
					s, ok := n.ShardStore(id)
					if !ok {
						t.Fatalf("aborted: no store for source %d", id)
					}
					if h := s.LogHolds(); h != 0 {
						t.Fatalf("aborted: source %d's operation log is held %d time(s)", id, h)
					}
				}
				fallthrough
			case rep.Phase == splitter.PhaseDone:
				if ip := n.Table().MergesInProgress(); len(ip) != 0 {
					t.Fatalf("%s: table v%d still has merges in progress %v", rep.Phase, n.Table().Version(), ip)
				}
				if u := j.Unfinished(0); len(u) != 0 {
					t.Fatalf("%s: the journal leaves %v unfinished", rep.Phase, u)
				}
				for id := range acked {
					if _, err := r.Index(id, "", []byte("after")); err != nil {
						t.Fatalf("%s: write of %s: %v", rep.Phase, id, err)
					}
					acked[id] = "after"
				}
				if rep.Phase == splitter.PhaseAborted {
					again, err := d.Run(splitter.MergePlan(sources...))
					if err != nil || again.Phase != splitter.PhaseDone {
						t.Fatalf("a second merge after the aborted one: %s %v %v", again.Phase, err, again.Err)
					}
				}
			default:
				t.Fatalf("merge ended in phase %s without an error", rep.Phase)
			}
			img := mem.CrashClone(vfs.CrashCloneCfg{})
			_ = n.Close()
			n = reopen(t, img, tab)
			defer n.Close()
			r = node.NewRouter(n, tab, node.RouterConfig{})
			for id, want := range acked {
				doc, ok, err := r.Get(id, "")
				if err != nil || !ok || string(doc.Source) != want {
					t.Errorf("after recovery %s = %q, %v, %v; acknowledged %q", id, doc.Source, ok, err, want)
				}
			}
		})
	}
}

// In the shared layout a child's (a merge target's) documents are the
// parent's (the sources') keys, so a write the child took after the
// publish, not yet acknowledged, survives a crash that rolls the operation
// back — with the child's sequence number, above the parent's (INV-11).
// Recovery carries the children's sequence numbers over when it deletes
// them: otherwise the parent, owning the document again, numbers its next
// write of it below the surviving version (simulation seed 7 draws this
// case; recovery.Check asserts INV-11).
func TestRolledBackHandoffKeepsSeqAboveSurvivingWrites(t *testing.T) {
	for _, op := range []string{"split", "merge"} {
		t.Run(op, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			opts := storage.Options{Dir: "/data", FS: mem, CacheBytes: 1 << 20, Layout: storage.LayoutShared}
			tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 4, PartitionSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			n, j, _, err := recovery.Open(opts, tab, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := node.NewRouter(n, tab, node.RouterConfig{})
			id := "d0"
			var img *vfs.MemFS
			var parked chan error
			// Between the sync of the children (target) and the table's
			// commit: a write lands on a child (it waits for the commit to
			// be acknowledged), the store is synced, the power fails.
			hook := func(_ splitter.Phase, in splitter.Intent) {
				if in.Kind != splitter.IntentCommitTable || img != nil {
					return
				}
				parked = make(chan error, 1)
				go func() { _, err := r.Index(id, "", []byte("unacknowledged")); parked <- err }()
				tb := n.Table() // published, not yet durable
				p, owner := tb.Route(id, "")
				s, ok := n.ShardStore(owner)
				if !ok {
					t.Errorf("no store for shard %d", owner)
					return
				}
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if doc, found, err := s.GetAny(tb.Keyspace(p.Root), tb.KeyOf(p), id); err == nil && found && string(doc.Source) == "unacknowledged" {
						break
					}
				}
				if err := s.Sync(); err != nil {
					t.Error(err)
				}
				img = mem.CrashClone(vfs.CrashCloneCfg{})
			}
			if op == "merge" {
				if rep, err := splitter.NewDriver(n, splitter.Config{Journal: j}).Run(splitter.SplitPlan(0, 2)); err != nil || rep.Phase != splitter.PhaseDone {
					t.Fatalf("split: %v %v", err, rep.Err)
				}
			}
			for i := range 5 {
				if _, err := r.Index(id, "", fmt.Appendf(nil, "v%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			d := splitter.NewDriver(n, splitter.Config{Journal: j, Hook: hook})
			if op == "merge" {
				_, err = d.Run(splitter.MergePlan(1, 2))
			} else {
				_, err = d.Run(splitter.SplitPlan(0, 2))
			}
			if err != nil || img == nil {
				t.Fatalf("%s: %v (crash image taken: %t)", op, err, img != nil)
			}
			<-parked
			_ = n.Close()
			opts.FS = img
			n, j, rep, err := recovery.Open(opts, tab, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			t.Logf("recovered: %+v", rep)
			r = node.NewRouter(n, tab, node.RouterConfig{})
			before, ok, err := r.Get(id, "")
			if err != nil || !ok || string(before.Source) != "unacknowledged" {
				t.Fatalf("the unacknowledged write did not survive (%q %v %v): this test needs it to", before.Source, ok, err)
			}
			after, err := r.Index(id, "", []byte("after"))
			if err != nil {
				t.Fatal(err)
			}
			if after.Seq <= before.Seq {
				t.Errorf("update of %s after the rolled-back %s got seq %d on shard %d; the surviving version has seq %d", id, op, after.Seq, after.Shard, before.Seq)
			}
			if c := recovery.Check(n, j, nil); !c.OK() {
				t.Errorf("after recovery: %v", c.Violations)
			}
		})
	}
}

// A cancel delivered just before the k-th intent of a merge (by the hook,
// as a cancel from another goroutine racing the step), for every k: it is
// accepted exactly when the merge then aborts, and refused once the
// sources are fenced; an aborted merge leaves both sources serving with no
// operation log held; a done one retired them; either way the power-loss
// image recovers and passes Check.
func TestMergeCancelAtEveryIntent(t *testing.T) {
	sources := []routing.ShardID{1, 2}
	for k := 0; ; k++ {
		var mg *splitter.Operation
		var accepted, delivered bool
		var at splitter.IntentKind
		steps := 0
		mem := vfs.NewCrashableMem()
		n, j, tab := openFailpath(t, mem)
		if rep, err := splitter.NewDriver(n, splitter.Config{Journal: j}).Run(splitter.SplitPlan(0, 2)); err != nil || rep.Phase != splitter.PhaseDone {
			t.Fatalf("split: %v %v", err, rep.Err)
		}
		hook := func(_ splitter.Phase, in splitter.Intent) {
			if steps == k && !delivered {
				delivered, at = true, in.Kind
				accepted = mg.Cancel() == nil
			}
			steps++
		}
		mg = splitter.NewDriver(n, splitter.Config{Journal: j, Hook: hook}).Start(splitter.MergePlan(sources...))
		for i := 0; !mg.Done(); i++ {
			if i > 1000 {
				t.Fatalf("k=%d: merge did not end", k)
			}
			if _, _, err := mg.Next(); err != nil {
				t.Fatalf("k=%d: %v", k, err)
			}
		}
		if !delivered {
			_ = n.Close()
			break // k is past the merge's last intent
		}
		rep := mg.Report()
		t.Logf("k=%d: cancel before %s accepted=%t, merge %s", k, at, accepted, rep.Phase)
		if accepted != (rep.Phase == splitter.PhaseAborted) {
			t.Errorf("k=%d: cancel before %s accepted=%t, merge ended %s", k, at, accepted, rep.Phase)
		}
		for _, id := range sources {
			s, ok := n.ShardStore(id)
			if ok != (rep.Phase == splitter.PhaseAborted) {
				t.Errorf("k=%d: merge %s, source %d registered=%t", k, rep.Phase, id, ok)
			}
			if ok && s.LogHolds() != 0 {
				t.Errorf("k=%d: aborted merge left source %d's log held %d time(s)", k, id, s.LogHolds())
			}
		}
		if _, err := node.NewRouter(n, tab, node.RouterConfig{}).Index("d0", "", []byte("after")); err != nil {
			t.Errorf("k=%d: write after the merge: %v", k, err)
		}
		img := mem.CrashClone(vfs.CrashCloneCfg{})
		_ = n.Close()
		reopen(t, img, tab).Close()
	}
}
