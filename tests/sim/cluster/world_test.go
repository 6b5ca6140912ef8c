package clustersim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/clusternode"
	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
	"github.com/shardsplit/shardsplit/tests/simkit"
	"github.com/shardsplit/shardsplit/transport"
)

// index is the one index a run writes to.
const index = "logs"

// swarm is what a seed draws before its first step: the corner of the
// space the run explores (swarm testing).
type swarm struct {
	nodes    int // 3-5, every one cluster-manager-eligible
	shards   int // 1-3
	replicas int // 1 .. min(2, nodes-1)
	keys     int // 4-16 document ids
	clients  int // 2-5
	steps    int // safety steps before the quiet phase
	// Per step: how much of the pending traffic is delivered (the rest
	// waits: delay), and the per-message odds of a drop and a duplicate.
	deliverPct    int
	dropPct       int
	dupPct        int
	crashPct      int // per step, a crash (or a restart of a dead node)
	leaderKillPct int // per step, the cluster manager's leader crashes
	partitionPct  int // per step, a partition begins or heals
	keepUnsynced  int // percent of unsynced bytes a crash keeps (0 in most seeds)
	diskPct       int // per step, a node's disk starts failing (see diskFaults)
	deletePct     int // of client writes
}

func drawSwarm(rng *rand.Rand) swarm {
	sw := swarm{nodes: 3 + rng.IntN(3), shards: 1 + rng.IntN(3), keys: 4 + rng.IntN(13), clients: 2 + rng.IntN(4),
		steps: 150 + rng.IntN(200), deliverPct: 30 + rng.IntN(71), dropPct: rng.IntN(4), dupPct: rng.IntN(4),
		crashPct: rng.IntN(4), leaderKillPct: rng.IntN(3), partitionPct: rng.IntN(5), deletePct: rng.IntN(15)}
	sw.replicas = 1 + rng.IntN(min(2, sw.nodes-1))
	if rng.IntN(4) == 0 {
		sw.keepUnsynced = 1 + rng.IntN(100)
	}
	if rng.IntN(2) == 0 {
		sw.diskPct = 1 + rng.IntN(3)
	}
	return sw
}

func (sw swarm) String() string {
	return fmt.Sprintf("nodes=%d shards=%d replicas=%d keys=%d clients=%d steps=%d deliver=%d%% drop=%d%% dup=%d%% crash=%d%% leaderkill=%d%% partition=%d%% disk=%d%% keep=%d%% delete=%d%%",
		sw.nodes, sw.shards, sw.replicas, sw.keys, sw.clients, sw.steps, sw.deliverPct, sw.dropPct, sw.dupPct,
		sw.crashPct, sw.leaderKillPct, sw.partitionPct, sw.diskPct, sw.keepUnsynced, sw.deletePct)
}

// world is one run: nodes over the in-memory network on crashable
// in-memory disks, clients, the model and the checks' memory.
type world struct {
	seed  uint64
	rng   *rand.Rand
	sw    swarm
	net   *transport.Network
	names []string
	nodes map[string]*simNode

	step    int
	trace   []string
	finding string
	stats   stats

	clients []*client
	keys    []string
	model   *model.Model
	hist    history
	writeNo int

	// writes maps a coordinator's request (node/incarnation/req: a
	// restarted node numbers its requests from 1 again) to the shard it
	// writes, from the op/write messages seen on the network.
	writes map[string]shardRef
	// gcps is the last global checkpoint each copy reported, by node
	// incarnation and allocation id (it must never go down).
	gcps map[string]int64
	// partitioned names the links this run cut (for the trace and heal).
	cuts []string
	// committed is the state with the highest version any node applied,
	// in any of its lives: a node applies only what raft committed, and a
	// committed state outlives the nodes that applied it.
	committed *cluster.State
	// split drives and checks a split of the index (split_test.go), in
	// the seeds of TestClusterSplitSim; nil in the others.
	split *splitRun
}

type shardRef struct {
	Index string          `json:"index"`
	Shard routing.ShardID `json:"shard"`
}

type simNode struct {
	name string
	disk *crashfs.Disk
	// faults fails some of the node's file operations while armed.
	faults      *diskFaults
	faultsUntil int // the step its faults end
	n           *clusternode.Node
	dead        bool
	lives       int
}

type stats struct {
	steps, writes, acked, reads, crashes, restarts, leaderKills, partitions, drops, dups, promotions, diskFaults, ioErrors int
	// rounds counts every round of delivery and ticks: the safety
	// steps', the forming's and the quiet phase's.
	rounds int
}

func (s *stats) add(o stats) {
	s.steps += o.steps
	s.writes += o.writes
	s.acked += o.acked
	s.reads += o.reads
	s.crashes += o.crashes
	s.restarts += o.restarts
	s.leaderKills += o.leaderKills
	s.partitions += o.partitions
	s.drops += o.drops
	s.dups += o.dups
	s.promotions += o.promotions
	s.diskFaults += o.diskFaults
	s.ioErrors += o.ioErrors
	s.rounds += o.rounds
}

// client is a logical client: one operation at a time, each through a
// node drawn at the call.
type client struct {
	id   int
	busy bool
}

// endpoint is a node's view of the network: addresses are node names,
// and every message sent passes the simulator's eyes first.
type endpoint struct {
	w    *world
	name string
	tr   transport.Transport
}

func (e endpoint) Send(m transport.Message)                  { e.w.sent(e.name, m); e.tr.Send(m) }
func (e endpoint) SendAddr(addr string, m transport.Message) { m.To = addr; e.Send(m) }
func (e endpoint) SetPeer(name, addr string)                 {}

func newWorld(seed uint64) *world {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	w := &world{seed: seed, rng: rng, sw: drawSwarm(rng), net: transport.NewNetwork(), nodes: map[string]*simNode{},
		model: model.New(model.Options{}), writes: map[string]shardRef{}, gcps: map[string]int64{}}
	for i := range w.sw.nodes {
		w.names = append(w.names, fmt.Sprintf("n%d", i+1))
	}
	for i := range w.sw.keys {
		w.keys = append(w.keys, fmt.Sprintf("k%d", i))
	}
	for i := range w.sw.clients {
		w.clients = append(w.clients, &client{id: i})
	}
	sample := slices.Clone(w.keys)
	w.rng.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	w.hist.Sample = sample[:min(4, len(sample))]
	w.logf("swarm", "%s sample=%v", w.sw, w.hist.Sample)
	for _, name := range w.names {
		w.nodes[name] = &simNode{name: name, disk: crashfs.New(), faults: &diskFaults{rng: rand.New(rand.NewPCG(w.rng.Uint64(), 3))}}
		w.start(name)
	}
	return w
}

func (w *world) logf(action, format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%04d %-12s %s", w.step, action, fmt.Sprintf(format, args...)))
}

func (w *world) fail(format string, args ...any) {
	if w.finding != "" {
		return
	}
	w.finding = fmt.Sprintf("step %d: ", w.step) + fmt.Sprintf(format, args...)
	w.logf("finding", "%s", w.finding)
}

func (w *world) start(name string) {
	sn := w.nodes[name]
	sn.lives++
	fs := errorfs.Wrap(sn.disk.FS(nil), sn.faults)
	n, err := clusternode.Open(clusternode.Config{Name: name, DataDir: "/data", FS: fs, TransportAddr: name, Seeds: w.names,
		InitialManagers: w.names, Transport: endpoint{w: w, name: name, tr: w.net.Endpoint(name)},
		Stores: clusternode.Stores{FS: fs, CacheBytes: 1 << 20},
		Rand:   rand.New(rand.NewPCG(w.rng.Uint64(), uint64(sn.lives))), EphemeralID: fmt.Sprintf("%s-life%d", name, sn.lives),
		Logger: nodeLogger(w)})
	if err != nil {
		w.fail("open %s (life %d): %v", name, sn.lives, err)
		sn.dead = true
		return
	}
	sn.n, sn.dead = n, false
	life := sn.lives
	n.Manager().OnApply(func(prev, next *cluster.State) { w.checkTransition(name, life, prev, next) })
}

// diskFaults fails, while armed, a share of a node's writes of the files
// the node writes itself: its copies' COPY records (an empty primary's, a
// recovered copy's) and a peer recovery's chunks (WriteAt), with EIO.
// Pebble's own files are spared: Pebble treats a failed WAL or MANIFEST
// write as fatal to the process (tests/sim covers that path, a single
// node's), and its background goroutines would make the faults' order
// depend on the scheduler. The node must fail the copy or retry, never
// acknowledge what it did not write or serve a partial copy.
type diskFaults struct {
	mu    sync.Mutex
	rng   *rand.Rand
	pct   int // the share of matching operations failed; 0 = disarmed
	fired int
}

func (d *diskFaults) String() string { return "sim disk faults" }

// MaybeError implements errorfs.Injector.
func (d *diskFaults) MaybeError(op errorfs.Op) error {
	if op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
		return nil
	}
	base := filepath.Base(op.Path)
	if op.Kind != errorfs.OpFileWriteAt && base != "COPY" && base != "COPY.tmp" {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pct == 0 || d.rng.IntN(100) >= d.pct {
		return nil
	}
	d.fired++
	return errorfs.ErrInjected
}

func (d *diskFaults) arm(pct int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pct = pct
}

func (d *diskFaults) take() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.fired
	d.fired = 0
	return n
}

// logNodes (SHARDSPLIT_SIM_LOG=1) prints the nodes' logs to stderr,
// each line with the step it was written in: for one seed.
var logNodes = os.Getenv("SHARDSPLIT_SIM_LOG") != ""

func nodeLogger(w *world) *zap.Logger {
	if !logNodes {
		return zap.NewNop()
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.DisableStacktrace = true
	cfg.EncoderConfig.TimeKey = ""
	l, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return l.WithOptions(zap.Hooks(func(zapcore.Entry) error {
		fmt.Fprintf(os.Stderr, "step %04d: ", w.step)
		return nil
	}))
}

// crash kills a node as a power loss would: what it did not sync is gone,
// and so are the messages on their way to it. Its requests in flight fail
// (their outcome unknown).
func (w *world) crash(name, why string) {
	sn := w.nodes[name]
	sn.dead = true
	old := sn.disk
	sn.disk = old.Crash(w.sw.keepUnsynced, w.rng.Uint64())
	dropped := w.net.DropTo(name)
	w.logf("crash", "%s (%s), %d messages to it lost", name, why, dropped)
	w.stats.crashes++
	if err := sn.n.Close(); err != nil {
		w.logf("crash", "%s: closing the dead process's engines: %v", name, err)
	}
}

func (w *world) restart(name string) {
	w.start(name)
	w.stats.restarts++
	w.logf("restart", "%s life %d", name, w.nodes[name].lives)
}

func (w *world) live() []*simNode {
	var out []*simNode
	for _, name := range w.names {
		if sn := w.nodes[name]; !sn.dead {
			out = append(out, sn)
		}
	}
	return out
}

func (w *world) dead() []string {
	var out []string
	for _, name := range w.names {
		if w.nodes[name].dead {
			out = append(out, name)
		}
	}
	return out
}

// latest returns the committed cluster state with the highest version
// any live node applied.
func (w *world) latest() *cluster.State {
	var st *cluster.State
	for _, sn := range w.live() {
		if s := sn.n.State(); st == nil || s.Version > st.Version {
			st = s
		}
	}
	return st
}

// deliver hands some of the pending messages over, in a seeded order,
// dropping and duplicating some: what is left waits (delay).
func (w *world) deliver(pct, dropPct, dupPct int) {
	n := w.net.Pending() * pct / 100
	if pct > 0 && n == 0 && w.net.Pending() > 0 {
		n = 1
	}
	for i := 0; i < n && w.net.Pending() > 0; i++ {
		j := w.rng.IntN(w.net.Pending())
		switch r := w.rng.IntN(100); {
		case r < dropPct:
			w.net.Drop(j)
			w.stats.drops++
			continue
		case r < dropPct+dupPct:
			w.net.Duplicate(j)
			w.stats.dups++
		}
		m, ok := w.net.Deliver(j)
		if !ok || (w.split != nil && w.split.managerCut(m)) {
			continue
		}
		if sn := w.nodes[m.To]; sn != nil && !sn.dead {
			sn.n.Step(m)
		}
		if w.split != nil {
			w.split.watch()
		}
		if w.finding != "" {
			return
		}
	}
}

func (w *world) tick() {
	for _, sn := range w.live() {
		sn.n.Tick()
		if err := sn.n.Fatal(); err != nil {
			w.fail("%s cannot take part in the cluster: %v", sn.name, err)
		}
	}
}

// round is one step of time: deliveries, then a tick of every live node.
func (w *world) round(pct, dropPct, dupPct int) {
	w.stats.rounds++
	w.deliver(pct, dropPct, dupPct)
	w.tick()
	if w.split != nil {
		w.split.watch()
	}
}

// --- clients

func (w *world) anyLive() *simNode {
	live := w.live()
	if len(live) == 0 {
		return nil
	}
	return live[w.rng.IntN(len(live))]
}

func (w *world) clientOp(c *client) {
	sn := w.anyLive()
	if sn == nil {
		return
	}
	if w.split != nil && w.split.rng.IntN(6) == 0 {
		w.split.search(c, sn)
		return
	}
	key := w.keys[w.rng.IntN(len(w.keys))]
	if w.rng.IntN(3) == 0 {
		w.get(c, sn, key)
		return
	}
	w.writeNo++
	value := fmt.Sprintf("c%d.%d", c.id, w.writeNo)
	if w.rng.IntN(100) < w.sw.deletePct {
		value = ""
	}
	w.write(c, sn, key, value)
}

func modelValue(v string) model.Value {
	if v == "" {
		return model.Absent
	}
	return model.Doc([]byte(v))
}

func (w *world) write(c *client, sn *simNode, key, value string) {
	c.busy = true
	w.stats.writes++
	mw := w.model.Attempt(key, modelValue(value))
	call := w.hist.Now()
	verb := "index"
	if value == "" {
		verb = "delete"
	}
	step := w.step
	done := func(r clusternode.DocResult, err error) {
		c.busy = false
		if err != nil {
			var conflict *clusternode.ConflictError
			if errors.As(err, &conflict) {
				w.fail("c%d %s %s=%q: a version conflict without op_type create: %v", c.id, verb, key, value, err)
			}
			// Whatever the error, the write's outcome is unknown for good:
			// the request may still be on its way to a primary (sent by a
			// coordinator that died since, or before a resend), and a
			// primary may apply it later. It never ends.
			_ = mw
			w.hist.write(call, c.id, key, value, false)
			w.logf("c"+fmt.Sprint(c.id)+" "+verb, "%s=%q via %s (from step %d): %v", key, value, sn.name, step, err)
			return
		}
		w.stats.acked++
		w.model.Ack(mw)
		w.hist.write(call, c.id, key, value, true)
		w.logf("c"+fmt.Sprint(c.id)+" "+verb, "%s=%q via %s (from step %d): %s shard %d seq %d term %d copies %d/%d", key, value, sn.name, step,
			r.Result, r.Shard, r.Seq, r.Term, r.Copies, r.Total)
		if r.Result != "not_found" {
			w.checkAckedOnInSync(fmt.Sprintf("c%d's write of %s", c.id, key), r.Shard, r.Seq, r.Term)
		}
	}
	if value == "" {
		sn.n.DeleteDoc(index, key, "", done)
	} else {
		sn.n.IndexDoc(index, key, "", []byte(value), false, done)
	}
	sn.n.Flush()
}

func (w *world) get(c *client, sn *simNode, key string) {
	c.busy = true
	w.stats.reads++
	callAt := w.model.Now()
	call := w.hist.Now()
	step := w.step
	sn.n.GetDoc(index, key, "", func(d clusternode.Doc, found bool, err error) {
		c.busy = false
		if err != nil {
			w.logf("c"+fmt.Sprint(c.id)+" get", "%s via %s (from step %d): %v", key, sn.name, step, err)
			return
		}
		value := ""
		if found {
			value = string(d.Source)
			if value == "" {
				w.fail("c%d get %s: a present document with an empty source", c.id, key)
			}
		}
		w.hist.read(call, c.id, key, value)
		w.logf("c"+fmt.Sprint(c.id)+" get", "%s via %s (from step %d) = %q", key, sn.name, step, value)
		w.checkRead(key, value, model.Cut{Acked: callAt, Attempted: w.model.Now()})
	})
	sn.n.Flush()
}

// checkRead: a read returns a state the model allows between its call
// and its return: no acknowledged write lost, none undone by an older one.
func (w *world) checkRead(key, value string, cut model.Cut) {
	allowed, err := w.model.Allowed(key, cut)
	if err != nil {
		w.fail("model: %v", err)
		return
	}
	found := modelValue(value)
	for _, v := range allowed {
		if v.Admits(found) {
			return
		}
	}
	var names []string
	for _, v := range allowed {
		names = append(names, v.String())
	}
	w.fail("read %s = %q (%s); the model allows %s", key, value, found, strings.Join(names, ", "))
}

// --- the network's eyes

// sent sees every message a node sends to another (a node's messages to
// itself do not cross the network).
func (w *world) sent(from string, m transport.Message) {
	switch m.Kind {
	case "op/write":
		var r struct {
			Req    uint64   `json:"req"`
			Origin string   `json:"origin"`
			Shard  shardRef `json:"shard"`
		}
		if json.Unmarshal(m.Body, &r) == nil {
			w.writes[fmt.Sprintf("%s/%s/%d", from, r.Origin, r.Req)] = r.Shard
		}
	case "op/write_result":
		var r struct {
			Req    uint64 `json:"req"`
			Origin string `json:"origin"`
			Code   string `json:"code"`
			Items  []struct {
				Seq  int64  `json:"seq"`
				Term uint64 `json:"term"`
				Code string `json:"code"`
			} `json:"items"`
		}
		if json.Unmarshal(m.Body, &r) != nil || r.Code != "" {
			return
		}
		ref, ok := w.writes[fmt.Sprintf("%s/%s/%d", m.To, r.Origin, r.Req)]
		if !ok {
			return
		}
		for _, it := range r.Items {
			if it.Code == "" && it.Seq >= 0 {
				w.checkAckedOnInSync(fmt.Sprintf("%s's acknowledgement of %s's request %d", from, m.To, r.Req), ref.Shard, it.Seq, it.Term)
			}
		}
	}
}

// --- checks

// copyView is a copy as the simulator finds it on a live node.
type copyView struct {
	node string
	life int
	info clusternode.CopyInfo
}

// openCopies returns every copy open on a live node, by allocation id.
func (w *world) openCopies() map[string]copyView {
	out := map[string]copyView{}
	for _, sn := range w.live() {
		for _, ci := range sn.n.Copies() {
			out[ci.AllocationID] = copyView{node: sn.name, life: sn.lives, info: ci}
		}
	}
	return out
}

// checkAckedOnInSync: a write acknowledged at seq is on every copy the
// latest committed state names in sync (that a live node has open), or
// that copy was removed from the in-sync set first. The latest committed
// state is the newest any node applied, dead ones included: a primary
// acknowledges once the state failing a copy is committed and applied on
// its own node, and if that node dies before any live node applied it,
// the state is still committed (a quorum holds it) and the next leader
// publishes it; the live nodes' states would name the failed copy.
func (w *world) checkAckedOnInSync(what string, shard routing.ShardID, seq int64, term uint64) {
	st := w.committed
	if st == nil {
		st = w.latest()
	}
	if st == nil || st.Indices[index] == nil {
		return
	}
	im := st.Indices[index]
	copies := w.openCopies()
	for _, aid := range im.InSync[shard] {
		cv, ok := copies[aid]
		if !ok || cv.info.Recovering {
			continue
		}
		if cv.info.LCP < seq {
			w.fail("%s (shard %d seq %d term %d): in-sync copy %s on %s has local checkpoint %d (state v%d, in sync %v)",
				what, shard, seq, term, aid, cv.node, cv.info.LCP, st.Version, im.InSync[shard])
			return
		}
	}
}

// checkStep runs after every step: the global checkpoint of every shard's
// primary is at most the local checkpoint of every in-sync copy; a copy
// that took the primary's term holds nothing past the primary's local
// checkpoint (a new primary's resync undid it first); and no
// in-sync copy's global checkpoint goes down within one life of its node,
// even if the copy was closed and opened again on its files (a copy keeps
// it with its files, durable with its next synced write: a crash may take
// back what was not synced).
func (w *world) checkStep() {
	st := w.latest()
	if st == nil || st.Indices[index] == nil {
		return
	}
	im := st.Indices[index]
	copies := w.openCopies()
	aids := make([]string, 0, len(copies))
	for aid := range copies {
		aids = append(aids, aid)
	}
	slices.Sort(aids)
	for _, aid := range aids {
		cv := copies[aid]
		if cv.info.Recovering || !slices.Contains(im.InSync[cv.info.Shard], aid) {
			continue // a copy still recovering may be rebuilt from scratch under its id
		}
		k := fmt.Sprintf("%s/%d/%s", cv.node, cv.life, aid)
		if prev, ok := w.gcps[k]; ok && cv.info.GCP < prev {
			w.fail("copy %s on %s: global checkpoint went from %d down to %d", aid, cv.node, prev, cv.info.GCP)
			return
		}
		w.gcps[k] = cv.info.GCP
	}
	for _, shard := range im.ShardIDs() {
		sh := int(shard)
		if _, child := im.SplitOf(shard); child {
			continue // its copies follow the parent's primary: splitRun checks them
		}
		p, ok := st.Primary(index, shard)
		if !ok || !p.Active() {
			continue
		}
		pc, ok := copies[p.AllocationID]
		if !ok || pc.info.Recovering || !pc.info.Primary || pc.info.Term != im.PrimaryTerms[shard] {
			continue
		}
		for _, aid := range aids {
			cv := copies[aid]
			if cv.info.Shard != shard || cv.info.Index != im.UUID || aid == p.AllocationID || cv.info.Recovering {
				continue
			}
			if cv.info.Term == pc.info.Term && cv.info.LCP > pc.info.LCP {
				w.fail("shard %d: copy %s on %s took the primary's term %d yet holds operations to %d, past the primary %s's local checkpoint %d (not undone by the resync)",
					sh, aid, cv.node, pc.info.Term, cv.info.LCP, p.AllocationID, pc.info.LCP)
				return
			}
		}
		for _, aid := range im.InSync[shard] {
			cv, ok := copies[aid]
			if !ok || cv.info.Recovering {
				continue
			}
			if cv.info.LCP < pc.info.GCP {
				w.fail("shard %d: the primary %s on %s has global checkpoint %d above in-sync copy %s's local checkpoint %d on %s (state v%d)",
					sh, p.AllocationID, pc.node, pc.info.GCP, aid, cv.info.LCP, cv.node, st.Version)
				return
			}
		}
	}
}

// checkTransition runs on every committed state a node applies: a shard's
// primary changes only to a copy of the previous state's in-sync set, and
// only with a strictly greater primary term; terms never go down.
func (w *world) checkTransition(node string, life int, prev, next *cluster.State) {
	if next != nil && (w.committed == nil || next.Version > w.committed.Version) {
		w.committed = next
	}
	if prev == nil || next == nil {
		return
	}
	if logNodes && node == w.names[0] {
		fmt.Fprintf(os.Stderr, "step %04d: state v%d on %s: %s\n", w.step, next.Version, node, w.describeState(next))
	}
	pi, ni := prev.Indices[index], next.Indices[index]
	if pi == nil || ni == nil || pi.UUID != ni.UUID {
		return
	}
	if w.split != nil {
		w.split.checkTransition(node, life, prev, next)
	}
	for _, shard := range ni.ShardIDs() {
		sh := int(shard)
		if _, existed := pi.Copies[shard]; !existed {
			continue // a child of a split begun by this state
		}
		if ni.PrimaryTerms[shard] < pi.PrimaryTerms[shard] {
			w.fail("%s applied v%d: shard %d's primary term went from %d down to %d", node, next.Version, sh, pi.PrimaryTerms[shard], ni.PrimaryTerms[shard])
			return
		}
		np, ok := next.Primary(index, shard)
		if !ok || !np.Assigned() {
			continue
		}
		pp, _ := prev.Primary(index, shard)
		if pp.AllocationID == np.AllocationID {
			continue
		}
		if np.RecoverySource == cluster.EmptyStore && len(pi.InSync[shard]) == 0 {
			continue // the shard's first primary
		}
		if node == w.names[0] || w.nodes[w.names[0]].dead {
			w.stats.promotions++
		}
		if !slices.Contains(pi.InSync[shard], np.AllocationID) {
			w.fail("%s applied v%d: shard %d's primary became %s on %s, not in the in-sync set %v of v%d", node, next.Version, sh,
				np.AllocationID, np.Node, pi.InSync[shard], prev.Version)
			return
		}
		if ni.PrimaryTerms[shard] <= pi.PrimaryTerms[shard] {
			w.fail("%s applied v%d: shard %d's primary became %s with term %d, not above %d", node, next.Version, sh,
				np.AllocationID, ni.PrimaryTerms[shard], pi.PrimaryTerms[shard])
			return
		}
	}
}

// describeState says where every copy of the index is, for a finding.
func (w *world) describeState(st *cluster.State) string {
	im := st.Indices[index]
	if im == nil {
		return "no index"
	}
	var b strings.Builder
	copies := w.openCopies()
	for _, shard := range im.ShardIDs() {
		sh := int(shard)
		fmt.Fprintf(&b, "shard %d term %d in-sync %v:", sh, im.PrimaryTerms[shard], im.InSync[shard])
		for _, c := range im.Copies[shard] {
			fmt.Fprintf(&b, " [%s %s p=%v %s %s %s %s last=%s failed=%d]", c.AllocationID, c.Node, c.Primary, c.State, c.RecoverySource,
				c.UnassignedReason, c.AllocationStatus, c.LastNode, c.FailedAllocations)
			if cv, ok := copies[c.AllocationID]; ok {
				fmt.Fprintf(&b, "{open on %s: %+v}", cv.node, cv.info)
			}
		}
		b.WriteString("; ")
	}
	for _, name := range st.NodeNames() {
		fmt.Fprintf(&b, "node %s copies %+v; ", name, st.Nodes[name].Copies)
	}
	return b.String()
}

// caughtUp reports whether every started copy of every shard is open on
// a live node with its primary's local and global checkpoints.
func (w *world) caughtUp(st *cluster.State) bool {
	im := st.Indices[index]
	copies := w.openCopies()
	for _, shard := range im.ShardIDs() {
		p, ok := st.Primary(index, shard)
		if !ok {
			return false
		}
		pc, ok := copies[p.AllocationID]
		if !ok || pc.info.Recovering {
			return false
		}
		for _, c := range im.Copies[shard] {
			cv, ok := copies[c.AllocationID]
			if !ok || cv.info.Recovering || cv.info.LCP != pc.info.LCP || cv.info.GCP != pc.info.GCP {
				return false
			}
		}
	}
	return true
}

// copiesEqual reports whether every started copy of every shard holds the
// documents its primary holds.
func (w *world) copiesEqual() error {
	st := w.latest()
	im := st.Indices[index]
	for _, shard := range im.ShardIDs() {
		sh := int(shard)
		var want []string
		wantFrom := ""
		for _, c := range im.Copies[shard] {
			if c.State != cluster.Started {
				continue
			}
			sn := w.nodes[c.Node]
			if sn.dead {
				return fmt.Errorf("shard %d: started copy %s on dead node %s", sh, c.AllocationID, c.Node)
			}
			docs := []string{}
			err := sn.n.ScanCopy(im.UUID, shard, func(d storage.Doc) error {
				_, src := clusternode.DecodeSource(d.Source)
				docs = append(docs, fmt.Sprintf("%s=%s", d.ID, src))
				return nil
			})
			if err != nil {
				return err
			}
			if want == nil {
				want, wantFrom = docs, c.AllocationID+"@"+c.Node
			} else if !slices.Equal(want, docs) {
				return fmt.Errorf("shard %d: copy %s@%s holds %v, copy %s holds %v", sh, c.AllocationID, c.Node, docs, wantFrom, want)
			}
		}
	}
	return nil
}

// --- porcupine

// history records the operations on a sample of keys. Time is the
// simulator's operation counter: an operation is called at a now taken
// when the client sends it and returns at the now it is answered; a write
// whose outcome is unknown never returns (it may take effect at any later
// point, or never).
type history struct{ simkit.History }

func (h *history) write(call int64, client int, key, value string, acked bool) {
	if !h.Sampled(key) {
		return
	}
	ret := simkit.Never
	if acked {
		ret = h.Now()
	}
	h.Write(client, key, value, call, ret)
}

func (h *history) read(call int64, client int, key, value string) {
	if !h.Sampled(key) {
		return
	}
	h.Read(client, key, value, call, h.Now())
}
