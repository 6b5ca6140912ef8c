package splitter

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
//	step [n=N]                                        carry out the next N intents
//	run                                               step until the split ends
//	cancel
//	table
//	search

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

type traceEnv struct {
	t       *testing.T
	node    *node.Node
	drv     *Driver
	split   *Split
	tables  map[routing.Version]*routing.Table // every published table, for stale requests
	routers map[string]*node.Router
}

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
	case "step", "run":
		return env.step(td)
	case "cancel":
		if err := env.split.Cancel(); err != nil {
			return "", err
		}
		return fmt.Sprintf("phase %s, ready %v\n", env.split.Machine().Phase(), env.split.Machine().Ready()), nil
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
	eng, err := storage.Open(storage.Options{Dir: "/data", FS: vfs.NewMem(), Layout: layout, CacheBytes: 1 << 20})
	if err != nil {
		return "", err
	}
	if env.node, err = node.Open(node.Config{Engine: eng, Table: tab}); err != nil {
		return "", err
	}
	env.drv = NewDriver(env.node, Config{})
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
	plan := Plan{Parent: routing.ShardID(parent), LagThreshold: 1, MaxCatchUpRounds: 2}
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
	env.split = env.drv.Start(plan)
	return fmt.Sprintf("phase %s, ready %v\n", env.split.Machine().Phase(), env.split.Machine().Ready()), nil
}

func (env *traceEnv) step(td *datadriven.TestData) (string, error) {
	n := 1
	td.MaybeScanArgs(env.t, "n", &n)
	var b strings.Builder
	for i := 0; td.Cmd == "run" || i < n; i++ {
		if env.split.Done() {
			break
		}
		from := env.split.Machine().Phase()
		in, ev, err := env.split.Step()
		if err != nil {
			return b.String(), err
		}
		env.remember()
		fmt.Fprintf(&b, "%s: %s -> %s", from, in, ev.Kind)
		if ev.Kind == EventFailed {
			fmt.Fprintf(&b, " (%v)", ev.Err)
		}
		if to := env.split.Machine().Phase(); to != from {
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
	return b.String()
}
