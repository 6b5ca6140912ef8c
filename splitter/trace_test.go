package splitter_test

// Protocol traces (etcd-raft interaction-test style): testdata/*.txt drive
// a node and a split step by step; the expected output shows every
// transition and every fenced request. Regenerate with -rewrite and review
// the diff like code.
//
// Commands:
//
//	define-table mode=partition|opensearch shards=N routing-shards=R [layout=per-shard|shared]
//	write id=X [routing=R] [value=V] [version=N]     route with table vN (default: current), send once
//	delete id=X [version=N]
//	get id=X [version=N]
//	router name=A                                     a router caching the current table
//	router-write name=A id=X value=V                  write through router A (it retries on stale)
//	split parent=P ways=N | split parent=P points=K1,K2
//	merge sources=(A,B,...)                           begin a merge (then step, run, cancel as for a split)
//	step [n=N]                                        carry out the next N intents (with their journal records)
//	run                                               step until the operation ends
//	cancel                                            ask the operation to cancel: accepted or refused
//	table
//	search
//	journal                                           the journal's records, oldest first
//	inject op=rename|create|sync|... path=S [after=K] fail the (K+1)-th matching filesystem op from now with ENOSPC
//	crash [unsynced=P]                                power loss: the disk as synced (plus P% of the rest), the node gone
//	recover                                           recovery.Open on the crashed disk: its decisions and table
//	check                                             recovery.Check on the node: the invariants

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	. "github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

type traceEnv struct {
	t       *testing.T
	mem     *vfs.MemFS // the disk: crashable
	inj     *injector
	opts    storage.Options
	initial *routing.Table
	node    *node.Node
	journal *Journal
	drv     *Driver
	op      *Operation                         // the split or merge being traced
	tables  map[routing.Version]*routing.Table // every published table, for stale requests
	routers map[string]*node.Router
}

// injector fails the (after+1)-th filesystem operation of a kind on a path
// containing a string, once.
type injector struct {
	armed atomic.Bool
	op    errorfs.OpKind
	path  string
	after atomic.Int32
}

func (i *injector) MaybeError(op errorfs.Op) error {
	if !i.armed.Load() || op.Kind != i.op || !strings.Contains(op.Path, i.path) {
		return nil
	}
	if i.after.Add(-1) >= 0 {
		return nil
	}
	i.armed.Store(false)
	return fmt.Errorf("injected: %w", syscall.ENOSPC)
}

func (i *injector) String() string { return "trace injector" }

var opKinds = map[string]errorfs.OpKind{"create": errorfs.OpCreate, "rename": errorfs.OpRename, "sync": errorfs.OpFileSync,
	"write": errorfs.OpFileWrite, "link": errorfs.OpLink, "remove": errorfs.OpRemove, "open": errorfs.OpOpen}

func TestProtocolTraces(t *testing.T) {
	datadriven.Walk(t, "testdata/trace", func(t *testing.T, path string) {
		env := &traceEnv{t: t}
		defer func() {
			if env.node != nil {
				_ = env.node.Close()
			}
		}()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			out, err := env.handle(td)
			if err != nil {
				return fmt.Sprintf("error: %v\n", err)
			}
			return out
		})
	})
}

func (env *traceEnv) remember() {
	t := env.node.Table()
	env.tables[t.Version()] = t
}

func (env *traceEnv) handle(td *datadriven.TestData) (string, error) {
	switch td.Cmd {
	case "define-table":
		return env.define(td)
	case "write", "delete":
		return env.write(td)
	case "get":
		return env.get(td)
	case "router":
		var name string
		td.ScanArgs(env.t, "name", &name)
		env.routers[name] = node.NewRouter(env.node, env.node.Table(), node.RouterConfig{})
		return fmt.Sprintf("router %s caches v%d\n", name, env.node.Table().Version()), nil
	case "router-write":
		var name, id, value string
		td.ScanArgs(env.t, "name", &name)
		td.ScanArgs(env.t, "id", &id)
		td.ScanArgs(env.t, "value", &value)
		r := env.routers[name]
		from := r.Table().Version()
		res, err := r.Index(id, "", []byte(value))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("ok shard=%d seq=%d routed-with=v%d retries=%d (router had v%d)\n",
			res.Shard, res.Seq, res.Version, res.Retries, from), nil
	case "split":
		return env.startSplit(td)
	case "merge":
		var srcs []string
		td.ScanArgs(env.t, "sources", &srcs)
		plan := Plan{Kind: KindMerge, LagThreshold: 1, MaxCatchUpRounds: 2}
		for _, v := range srcs {
			var id routing.ShardID
			fmt.Sscan(v, &id)
			plan.Sources = append(plan.Sources, id)
		}
		env.op = env.drv.Start(plan)
		return showReady(env.op.Machine()), nil
	case "step", "run":
		return env.step(td)
	case "cancel":
		if err := env.op.Cancel(); err != nil {
			return fmt.Sprintf("refused: %v\n", err), nil
		}
		return "accepted; " + showReady(env.op.Machine()), nil
	case "journal":
		var b strings.Builder
		for _, r := range env.journal.Records() {
			fmt.Fprintf(&b, "%s\n", r)
		}
		if env.journal.Dirty() {
			b.WriteString("(the last write failed: the file lacks some of these; the next write carries them)\n")
		}
		return b.String(), nil
	case "inject":
		var op, path string
		after := 0
		td.ScanArgs(env.t, "op", &op)
		td.ScanArgs(env.t, "path", &path)
		td.MaybeScanArgs(env.t, "after", &after)
		kind, ok := opKinds[op]
		if !ok {
			return "", fmt.Errorf("unknown op %q", op)
		}
		env.inj.op, env.inj.path = kind, path
		env.inj.after.Store(int32(after))
		env.inj.armed.Store(true)
		return fmt.Sprintf("the next %s of *%s* after %d fails with ENOSPC\n", op, path, after), nil
	case "crash":
		return env.crash(td)
	case "recover":
		return env.recover()
	case "check":
		c := recovery.Check(env.node, env.journal, nil)
		if c.OK() {
			return fmt.Sprintf("ok: table v%d, %d active shards, %d documents\n", c.TableVersion, c.Shards, c.Documents), nil
		}
		return fmt.Sprintf("violations:\n  %s\n", strings.Join(c.Violations, "\n  ")), nil
	case "table":
		return describeTable(env.node.Table()), nil
	case "search":
		return env.search()
	}
	return "", fmt.Errorf("unknown command %q", td.Cmd)
}

func (env *traceEnv) define(td *datadriven.TestData) (string, error) {
	var modeName, layoutName = "partition", "per-shard"
	var shards, routingShards int
	td.MaybeScanArgs(env.t, "mode", &modeName)
	td.MaybeScanArgs(env.t, "layout", &layoutName)
	td.ScanArgs(env.t, "shards", &shards)
	td.ScanArgs(env.t, "routing-shards", &routingShards)
	mode, err := routing.ParseMode(modeName)
	if err != nil {
		return "", err
	}
	layout, err := storage.ParseLayout(layoutName)
	if err != nil {
		return "", err
	}
	tab, err := routing.NewTable(mode, routing.Settings{Shards: shards, RoutingShards: routingShards, PartitionSize: 1})
	if err != nil {
		return "", err
	}
	env.mem, env.inj, env.initial = vfs.NewCrashableMem(), &injector{}, tab
	env.opts = storage.Options{Dir: "/data", FS: errorfs.Wrap(env.mem, env.inj), Layout: layout, CacheBytes: 1 << 20}
	if err := env.open(); err != nil {
		return "", err
	}
	env.tables = map[routing.Version]*routing.Table{}
	env.routers = map[string]*node.Router{}
	env.remember()
	return describeTable(tab), nil
}

// tableArg returns the table a request is routed with: version=N or current.
func (env *traceEnv) tableArg(td *datadriven.TestData) (*routing.Table, error) {
	if !td.HasArg("version") {
		return env.node.Table(), nil
	}
	var v uint64
	td.ScanArgs(env.t, "version", &v)
	t, ok := env.tables[routing.Version(v)]
	if !ok {
		return nil, fmt.Errorf("no table v%d was published", v)
	}
	return t, nil
}

func (env *traceEnv) write(td *datadriven.TestData) (string, error) {
	var id, routingValue, value string
	td.ScanArgs(env.t, "id", &id)
	td.MaybeScanArgs(env.t, "routing", &routingValue)
	td.MaybeScanArgs(env.t, "value", &value)
	t, err := env.tableArg(td)
	if err != nil {
		return "", err
	}
	p, shard := t.Route(id, routingValue)
	kind := storage.OpIndex
	if td.Cmd == "delete" {
		kind = storage.OpDelete
	}
	seq, err := env.node.Write(node.WriteRequest{Kind: kind, Shard: shard, Version: t.Version(), Root: p.Root,
		Key: t.KeyOf(p), ID: id, Routing: routingValue, Source: []byte(value)})
	prefix := fmt.Sprintf("%s %s (partition %d) to shard %d at v%d: ", td.Cmd, id, p.Partition, shard, t.Version())
	if err != nil {
		return prefix + err.Error() + "\n", nil
	}
	return prefix + fmt.Sprintf("ok seq=%d\n", seq), nil
}

func (env *traceEnv) get(td *datadriven.TestData) (string, error) {
	var id string
	td.ScanArgs(env.t, "id", &id)
	t, err := env.tableArg(td)
	if err != nil {
		return "", err
	}
	p, shard := t.Route(id, "")
	d, ok, err := env.node.Get(node.GetRequest{Shard: shard, Version: t.Version(), Root: p.Root, Key: t.KeyOf(p), ID: id})
	prefix := fmt.Sprintf("get %s from shard %d at v%d: ", id, shard, t.Version())
	switch {
	case err != nil:
		return prefix + err.Error() + "\n", nil
	case !ok:
		return prefix + "not found\n", nil
	}
	return prefix + fmt.Sprintf("%q seq=%d\n", d.Source, d.Seq), nil
}

func (env *traceEnv) startSplit(td *datadriven.TestData) (string, error) {
	var parent, ways int
	td.ScanArgs(env.t, "parent", &parent)
	plan := Plan{Sources: []routing.ShardID{routing.ShardID(parent)}, LagThreshold: 1, MaxCatchUpRounds: 2}
	if td.HasArg("points") {
		var pts []string
		td.ScanArgs(env.t, "points", &pts)
		for _, p := range pts {
			var v int64
			fmt.Sscan(p, &v)
			k, err := env.node.Table().Mode().KeyOf(v)
			if err != nil {
				return "", err
			}
			plan.Points = append(plan.Points, k)
		}
	} else {
		td.ScanArgs(env.t, "ways", &ways)
		plan.Ways = ways
	}
	env.op = env.drv.Start(plan)
	return showReady(env.op.Machine()), nil
}

// showReady prints a machine's phase, the journal records it wants written
// and its next intent.
func showReady(m *Machine) string {
	rd := m.Ready()
	var recs []string
	for _, r := range rd.Journal {
		recs = append(recs, r.Stage.String())
	}
	return fmt.Sprintf("phase %s, journal %v, next %v\n", m.Phase(), recs, rd.Intent)
}

// open recovers and opens the node on the current disk.
func (env *traceEnv) open() error {
	n, j, _, err := recovery.Open(env.opts, env.initial, nil)
	if err != nil {
		return err
	}
	env.node, env.journal = n, j
	env.drv = NewDriver(n, Config{Journal: j})
	env.op = nil
	return nil
}

// crash takes the disk as a power loss would leave it; the node is gone.
func (env *traceEnv) crash(td *datadriven.TestData) (string, error) {
	unsynced := 0
	td.MaybeScanArgs(env.t, "unsynced", &unsynced)
	cfg := vfs.CrashCloneCfg{}
	if unsynced > 0 {
		cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rand.New(rand.NewPCG(1, 2))}
	}
	clone := env.mem.CrashClone(cfg)
	env.op = nil
	if env.node != nil {
		_ = env.node.Close()
		env.node = nil
	}
	env.mem, env.inj = clone, &injector{}
	env.opts.FS = errorfs.Wrap(clone, env.inj)
	return "crashed\n", nil
}

// recover opens the crashed disk through recovery and prints what it did.
func (env *traceEnv) recover() (string, error) {
	n, j, rep, err := recovery.Open(env.opts, env.initial, nil)
	if err != nil {
		return "", err
	}
	env.node, env.journal = n, j
	env.drv = NewDriver(n, Config{Journal: j})
	var b strings.Builder
	for _, d := range rep.Decisions {
		fmt.Fprintf(&b, "%s %d of %v into %v: %s cancel=%v delete=%v (%s)\n", d.Kind, d.ID, d.Sources, d.Targets, d.Action, d.Cancel, d.Delete, d.Why)
	}
	fmt.Fprintf(&b, "opened at table v%d\n", rep.Table)
	return b.String(), nil
}

func (env *traceEnv) step(td *datadriven.TestData) (string, error) {
	n := 1
	td.MaybeScanArgs(env.t, "n", &n)
	var b strings.Builder
	for i := 0; td.Cmd == "run" || i < n; i++ {
		if env.op.Done() {
			break
		}
		m := env.op.Machine()
		from := m.Phase()
		var recs []string
		for _, r := range m.Ready().Journal {
			recs = append(recs, r.Stage.String())
		}
		in, ev, err := env.op.Next()
		if err != nil {
			return b.String(), err
		}
		env.remember()
		fmt.Fprintf(&b, "%s: ", from)
		if len(recs) > 0 {
			fmt.Fprintf(&b, "journal %v, ", recs)
		}
		fmt.Fprintf(&b, "%s -> %s", in, ev.Kind)
		if ev.Kind == EventFailed {
			fmt.Fprintf(&b, " (%v)", ev.Err)
		}
		if to := m.Phase(); to != from {
			fmt.Fprintf(&b, "; phase %s", to)
		}
		fmt.Fprintf(&b, "; table v%d\n", env.node.Table().Version())
	}
	return b.String(), nil
}

func (env *traceEnv) search() (string, error) {
	var lines []string
	v, err := env.node.Search(func(shard routing.ShardID, d storage.Doc) error {
		lines = append(lines, fmt.Sprintf("  shard %d: %s=%q", shard, d.ID, d.Source))
		return nil
	})
	if err != nil {
		return "", err
	}
	slices.Sort(lines)
	return fmt.Sprintf("search at v%d: %d documents\n%s\n", v, len(lines), strings.Join(lines, "\n")), nil
}

// describeTable prints a table's leaves and splits in display units.
func describeTable(t *routing.Table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table v%d (%s, %d roots, R=%d)\n", t.Version(), t.Mode(), t.Settings().Shards, t.Settings().RoutingShards)
	d := t.Mode().Display
	for r := range t.Settings().Shards {
		fmt.Fprintf(&b, "  root %d:", r)
		for _, l := range t.Leaves(routing.ShardID(r)) {
			fmt.Fprintf(&b, " %d=[%d,%d]", l.Shard, d(l.Span.Start), d(l.Span.End-1))
		}
		b.WriteString("\n")
	}
	for _, s := range t.Splits() {
		state := "committed"
		if s.InProgress {
			state = "in progress"
		}
		fmt.Fprintf(&b, "  split of %d (%s):", s.Parent, state)
		for _, c := range s.Children {
			fmt.Fprintf(&b, " %d=[%d,%d]", c.Shard, d(c.Span.Start), d(c.Span.End-1))
		}
		b.WriteString("\n")
	}
	for _, m := range t.Merges() {
		state := "committed"
		if m.InProgress {
			state = "in progress"
		}
		fmt.Fprintf(&b, "  merge of %v into %d=[%d,%d] (%s)\n", m.SourceIDs(), m.Target, d(m.Span().Start), d(m.Span().End-1), state)
	}
	return b.String()
}
