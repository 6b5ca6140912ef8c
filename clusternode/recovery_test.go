package clusternode

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/transport"
)

// TestALateRecoveryRequestDoesNotRestartAFinishedRecovery: the network may
// deliver a replica's recovery request again after the recovery ended;
// the primary's node must not start it anew, since the source would
// cancel it once the target (long open) stops answering, and the cancel
// would wipe a started, in-sync copy.
func TestALateRecoveryRequestDoesNotRestartAFinishedRecovery(t *testing.T) {
	w, im, replica, primary, lc := aRecoveredReplica(t, 9)
	open := lc.c
	m, err := transport.NewMessage(replica.Node, primary, replication.KindRecoveryStart, replication.RecoveryStart{
		Shard: replication.ShardKey{Index: im.UUID, Shard: 0}, ID: lc.target.ID(), Target: replica.AllocationID, TargetNode: replica.Node})
	if err != nil {
		t.Fatal(err)
	}
	w.nodes[primary].n.Step(m)
	for range 200 {
		w.round()
	}
	now := w.nodes[replica.Node].n.copies[copyKey{index: im.UUID, shard: 0}]
	if now == nil || now.c != open {
		t.Fatalf("the started replica on %s was closed or rebuilt after a late recovery request", replica.Node)
	}
	if w.health("logs") != cluster.Green {
		t.Fatalf("logs is %s after a late recovery request", w.health("logs"))
	}
	w.runUntil(50, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
}

// TestAFinalizedRecoveryTargetIgnoresALateCancel: a source whose primary
// term ended may cancel a recovery its target already finalized and the
// cluster already started; the cancel must not wipe that copy, which may
// be promoted next (the shard would then have a primary no node holds).
func TestAFinalizedRecoveryTargetIgnoresALateCancel(t *testing.T) {
	w, im, replica, primary, lc := aRecoveredReplica(t, 11)
	open := lc.c
	m, err := transport.NewMessage(primary, replica.Node, replication.KindRecoveryCancel, map[string]any{
		"shard": replication.ShardKey{Index: im.UUID, Shard: 0}, "id": lc.target.ID(), "reason": "the source's primary term ended"})
	if err != nil {
		t.Fatal(err)
	}
	w.nodes[replica.Node].n.Step(m)
	now := w.nodes[replica.Node].n.copies[copyKey{index: im.UUID, shard: 0}]
	if now == nil || now.c != open {
		t.Fatalf("the started replica on %s was wiped by a cancel of its finished recovery", replica.Node)
	}
	for range 100 {
		w.round()
	}
	if w.health("logs") != cluster.Green {
		t.Fatalf("logs is %s after a late cancel", w.health("logs"))
	}
	if g := w.get(replica.Node, "logs", "a"); g.err != nil || !g.found {
		t.Fatalf("get a on %s after a late cancel: %+v", replica.Node, g)
	}
}

// TestARecoveryWhoseOpenedWordAndCancelWereLostStartsOver: a replica's
// word that it opened a recovery's files is lost, its source gives the
// silent recovery up, and the cancel is lost too. The target says it
// opened the files again until it is finalized, and the source's node,
// which runs no such recovery any more, answers with a cancel: the target
// starts a new recovery instead of waiting, open and initializing, for
// ever.
func TestARecoveryWhoseOpenedWordAndCancelWereLostStartsOver(t *testing.T) {
	w := newWorld(t, 11, "n1", "n2")
	w.runUntil(300, "a cluster of two", func() bool { return len(w.any().State().Nodes) == 2 })
	lost := map[string]int{}
	w.drop = func(m transport.Message) bool {
		if m.Kind == replication.KindRecoveryOpened && lost[m.Kind] == 0 || m.Kind == replication.KindRecoveryCancel && lost[m.Kind] == 0 {
			lost[m.Kind]++
			return true
		}
		// The target's repeated word is lost too while its source has
		// not given up.
		return m.Kind == replication.KindRecoveryOpened && lost[replication.KindRecoveryCancel] == 0
	}
	w.createIndex("n1", "logs", 1, 1)
	w.runUntil(1000, "logs green", func() bool { return w.health("logs") == cluster.Green })
	if lost[replication.KindRecoveryOpened] == 0 || lost[replication.KindRecoveryCancel] == 0 {
		t.Fatalf("lost %v: the recovery's opened word and its cancel were not both lost", lost)
	}
	w.drop = nil
	if a := w.index("n2", "logs", "a", "va"); a.err != nil {
		t.Fatal(a.err)
	}
	w.runUntil(50, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
}

// TestARecoveredCopyWhoseRecordFailedRecoversAgain: a replica whose
// recovery received every file but could not record itself (its COPY file
// failed to write) must start a new recovery, not wait for its source's
// cancel, which may be lost: it would stay initializing for good.
func TestARecoveredCopyWhoseRecordFailedRecoversAgain(t *testing.T) {
	w := newWorld(t, 11, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 0)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	if a := w.index("n2", "logs", "a", "va"); a.err != nil {
		t.Fatal(a.err)
	}
	w.nodes["n1"].n.UpdateReplicas("logs", 1, func(err error) {
		if err != nil {
			t.Error(err)
		}
	})
	w.nodes["n1"].n.Flush()
	// As soon as the replica's node starts its recovery, its disk fails
	// every write of the COPY record.
	var blocked string
	var node *worldNode
	recovering := func() bool {
		for _, wn := range w.live() {
			for k, lc := range wn.n.copies {
				if lc.c == nil && lc.target != nil {
					node, blocked = wn, filepath.Join(wn.n.copyDir(k), copyMetaFile)
					return true
				}
			}
		}
		return false
	}
	// One message at a time: a recovery may end within one round.
	for i := 0; !recovering(); i++ {
		if i == 20000 {
			t.Fatal("no replica started recovering")
		}
		if w.net.Pending() == 0 {
			for _, wn := range w.live() {
				wn.n.Tick()
			}
			continue
		}
		if m, ok := w.net.Deliver(0); ok {
			w.nodes[m.To].n.Step(m)
		}
	}
	healthy := node.n.cfg.FS
	node.n.cfg.FS = errorfs.Wrap(healthy, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.HasPrefix(op.Path, blocked) {
			return errorfs.ErrInjected
		}
		return nil
	}))
	// The source gives up on a target that stopped answering; its cancel
	// is lost on the way.
	for range 300 {
		for w.net.Pending() > 0 {
			if m, ok := w.net.Deliver(0); ok && m.Kind != replication.KindRecoveryCancel {
				w.nodes[m.To].n.Step(m)
			}
		}
		for _, wn := range w.live() {
			wn.n.Tick()
		}
	}
	if w.health("logs") == cluster.Green {
		t.Fatalf("logs went green though the replica on %s could not record itself", node.name)
	}
	node.n.cfg.FS = healthy
	w.runUntil(500, "logs green once the replica's disk writes again", func() bool { return w.health("logs") == cluster.Green })
	w.runUntil(50, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
}

// aRecoveredReplica makes, in a world of three nodes drawn from seed, an
// index of one shard with one replica, green and holding one document:
// the replica was built by a peer recovery whose target is still known.
func aRecoveredReplica(t *testing.T, seed uint64) (*world, *cluster.IndexMeta, cluster.ShardCopy, string, *localCopy) {
	t.Helper()
	w := newWorld(t, seed, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 1)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	if a := w.index("n2", "logs", "a", "va"); a.err != nil {
		t.Fatal(a.err)
	}
	im := w.any().State().Indices["logs"]
	var replica cluster.ShardCopy
	for _, c := range im.Copies[0] {
		if !c.Primary {
			replica = c
		}
	}
	primary := primaryNode(im, 0)
	lc := w.nodes[replica.Node].n.copies[copyKey{index: im.UUID, shard: 0}]
	if lc == nil || lc.c == nil || lc.target == nil {
		t.Fatalf("the replica on %s is not open from a recovery: %+v", replica.Node, lc)
	}
	return w, im, replica, primary, lc
}
