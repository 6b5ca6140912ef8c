package server

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shardsplit/shardsplit/service"
)

// The other _cat APIs: each a table in writeCat's text or JSON, with
// OpenSearch's column names (RestHealthAction, RestAliasAction, ...).
// Tables of things shardsplit has none of (fielddata, plugins,
// repositories, Lucene segments, thread pools, pending cluster-state
// tasks) are empty, as OpenSearch's are on a node without them.

func col(name string, aliases []string, desc string, right bool) catColumn {
	return catColumn{name: name, aliases: aliases, desc: desc, def: true, right: right}
}

var healthColumns = []catColumn{
	col("epoch", []string{"t", "time"}, "seconds since 1970-01-01 00:00:00", true),
	col("timestamp", []string{"ts", "hms", "hhmmss"}, "time in HH:MM:SS", false),
	col("cluster", []string{"cl"}, "cluster name", false),
	col("status", []string{"st"}, "health status", false),
	col("node.total", []string{"nt", "nodeTotal"}, "total number of nodes", true),
	col("node.data", []string{"nd", "nodeData"}, "number of nodes that can store data", true),
	col("discovered_master", []string{"dm"}, "cluster manager discovered", true),
	col("discovered_cluster_manager", []string{"dcm"}, "cluster manager discovered", true),
	col("shards", []string{"t", "sh", "shards.total", "shardsTotal"}, "total number of shards", true),
	col("pri", []string{"p", "shards.primary", "shardsPrimary"}, "number of primary shards", true),
	col("relo", []string{"r", "shards.relocating", "shardsRelocating"}, "number of relocating nodes", true),
	col("init", []string{"i", "shards.initializing", "shardsInitializing"}, "number of initializing nodes", true),
	col("unassign", []string{"u", "shards.unassigned", "shardsUnassigned"}, "number of unassigned shards", true),
	col("pending_tasks", []string{"pt", "pendingTasks"}, "number of pending tasks", true),
	col("max_task_wait_time", []string{"mtwt", "maxTaskWaitTime"}, "wait time of longest task pending", true),
	col("active_shards_percent", []string{"asp", "activeShardsPercent"}, "active number of shards in percent", true),
}

func (s *Server) catHealth(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, catParams...); err != nil {
		return err
	}
	h, status, err := s.healthBody("")
	if err != nil {
		return err
	}
	now := time.Now()
	num := func(k string) catCell { return numCell(int64(h[k].(int))) }
	cells := [][]catCell{{numCell(now.Unix()), textCell(now.UTC().Format("15:04:05")), textCell(s.cfg.ClusterName),
		textCell(status), num("number_of_nodes"), num("number_of_data_nodes"),
		textCell(strconv.FormatBool(h["discovered_master"].(bool))), textCell(strconv.FormatBool(h["discovered_cluster_manager"].(bool))),
		num("active_shards"), num("active_primary_shards"), num("relocating_shards"), num("initializing_shards"),
		num("unassigned_shards"), num("number_of_pending_tasks"), textCell("-"),
		textCell(format1Decimals(h["active_shards_percent_as_number"].(float64), "%"))}}
	return s.writeCat(w, r, healthColumns, cells)
}

var aliasColumns = []catColumn{
	col("alias", []string{"a"}, "alias name", false),
	col("index", []string{"i", "idx"}, "index alias points to", false),
	col("filter", []string{"f", "fi"}, "filter", false),
	col("routing.index", []string{"ri", "routingIndex"}, "index routing", false),
	col("routing.search", []string{"rs", "routingSearch"}, "search routing", false),
	col("is_write_index", []string{"w", "isWriteIndex"}, "write index", false),
}

func (s *Server) catAliases(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, catParams...)
	if err != nil {
		return err
	}
	var names []string
	if n := r.PathValue("name"); n != "" && n != "_all" && n != "*" {
		names = strings.Split(n, ",")
	}
	o, err := indicesOptions(q)
	if err != nil {
		return err
	}
	all, err := s.svc.Aliases("", names, o)
	if err != nil {
		return err
	}
	var cells [][]catCell
	for _, index := range sortedKeysOf(all) {
		for _, alias := range sortedKeysOf(all[index]) {
			am := all[index][alias]
			orDash := func(v string) catCell {
				if v == "" {
					return textCell("-")
				}
				return textCell(v)
			}
			filter := "-"
			if len(am.Filter) > 0 {
				filter = "*"
			}
			write := "-"
			if am.IsWriteIndex != nil {
				write = strconv.FormatBool(*am.IsWriteIndex)
			}
			cells = append(cells, []catCell{textCell(alias), textCell(index), textCell(filter), orDash(am.IndexRouting),
				orDash(am.SearchRouting), textCell(write)})
		}
	}
	return s.writeCat(w, r, aliasColumns, cells)
}

var countColumns = []catColumn{
	col("epoch", []string{"t", "time"}, "seconds since 1970-01-01 00:00:00", true),
	col("timestamp", []string{"ts", "hms", "hhmmss"}, "time in HH:MM:SS", false),
	col("count", []string{"dc", "docs.count", "docsCount"}, "the document count", true),
}

func (s *Server) catCount(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, catParams...); err != nil {
		return err
	}
	stats, err := s.svc.Stats(r.PathValue("index"))
	if err != nil {
		return err
	}
	var n int64
	for _, st := range stats {
		n += st.Docs
	}
	now := time.Now()
	return s.writeCat(w, r, countColumns, [][]catCell{{numCell(now.Unix()), textCell(now.UTC().Format("15:04:05")), numCell(n)}})
}

var allocationColumns = []catColumn{
	col("shards", []string{"s"}, "number of shards on node", true),
	col("disk.indices", []string{"di", "diskIndices"}, "disk used by indices", true),
	col("disk.used", []string{"du", "diskUsed"}, "disk used (total, not just indices)", true),
	col("disk.avail", []string{"da", "diskAvail"}, "disk available", true),
	col("disk.total", []string{"dt", "diskTotal"}, "total capacity of all volumes", true),
	col("disk.percent", []string{"dp", "diskPercent"}, "percent disk used", true),
	col("host", []string{"h"}, "host of node", false),
	col("ip", nil, "ip of node", false),
	col("node", []string{"n"}, "name of node", false),
}

// catAllocation is one row per node: its started shards and the bytes
// its indices hold (disk totals are not measured: empty).
func (s *Server) catAllocation(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, catParams...); err != nil {
		return err
	}
	rows, err := s.svc.ShardRows("")
	if err != nil {
		return err
	}
	var cells [][]catCell
	for _, n := range s.matchingNodes(orAll(r.PathValue("node_id"))) {
		var shards, bytes int64
		for _, row := range rows {
			if row.State == service.StateUnassigned || (row.Node != "" && row.Node != n.name) {
				continue
			}
			shards++
			if row.Bytes > 0 {
				bytes += row.Bytes
			}
		}
		cells = append(cells, []catCell{numCell(shards), bytesCell(bytes), {}, {}, {}, {}, textCell(n.host), textCell(n.host), textCell(n.name)})
	}
	return s.writeCat(w, r, allocationColumns, cells)
}

func orAll(filter string) string {
	if filter == "" {
		return "_all"
	}
	return filter
}

var managerColumns = []catColumn{
	col("id", nil, "node id", false),
	col("host", []string{"h"}, "host name", false),
	col("ip", nil, "ip address", false),
	col("node", []string{"n"}, "node name", false),
}

// catClusterManager is _cat/cluster_manager (and its older name
// _cat/master): the elected cluster manager.
func (s *Server) catClusterManager(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, catParams...); err != nil {
		return err
	}
	var cells [][]catCell
	leader := s.svc.NodeName()
	if s.svc.ClusterState() != nil {
		leader = s.svc.ClusterLeader()
	}
	for _, n := range s.matchingNodes("_all") {
		if n.name == leader {
			cells = append(cells, []catCell{textCell(n.id), textCell(n.host), textCell(n.host), textCell(n.name)})
		}
	}
	return s.writeCat(w, r, managerColumns, cells)
}

var nodeAttrColumns = []catColumn{
	col("node", nil, "node name", false),
	{name: "id", desc: "unique node id"},
	{name: "pid", desc: "process id", right: true},
	col("host", []string{"h"}, "host name", false),
	col("ip", []string{"i"}, "ip address", false),
	{name: "port", desc: "bound transport port", right: true},
	col("attr", []string{"attr.name"}, "attribute description", false),
	col("value", []string{"attr.value"}, "attribute value", false),
}

func (s *Server) catNodeAttrs(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, catParams...); err != nil {
		return err
	}
	var cells [][]catCell
	for _, n := range s.matchingNodes("_all") {
		_, port, _ := strings.Cut(n.transport, ":")
		cells = append(cells, []catCell{textCell(n.name), textCell(n.id), {}, textCell(n.host), textCell(n.host), textCell(port),
			textCell("shard_indexing_pressure_enabled"), textCell("true")})
	}
	return s.writeCat(w, r, nodeAttrColumns, cells)
}

var catTaskColumns = []catColumn{
	{name: "id", desc: "id of the task with the node"},
	col("action", []string{"ac"}, "task action", false),
	col("task_id", []string{"ti"}, "unique task id", false),
	col("parent_task_id", []string{"pti"}, "parent task id", false),
	col("type", []string{"ty"}, "task type", false),
	col("start_time", []string{"start"}, "start time in ms", true),
	col("timestamp", []string{"ts", "hms", "hhmmss"}, "start time in HH:MM:SS", false),
	col("running_time_ns", nil, "running time ns", true),
	col("running_time", []string{"time"}, "running time", true),
	col("node_id", []string{"ni"}, "unique node id", false),
	col("ip", []string{"i"}, "ip address", false),
	col("port", []string{"po"}, "bound transport port", true),
	col("node", []string{"n"}, "node name", false),
	col("version", []string{"v"}, "es version", false),
	col("x_opaque_id", []string{"x"}, "X-Opaque-ID header", false),
}

// catTasks lists the tasks running (an in-place split or merge).
func (s *Server) catTasks(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, append([]string{"actions", "detailed", "nodes", "parent_task_id"}, catParams...)...); err != nil {
		return err
	}
	var cells [][]catCell
	for _, t := range s.svc.Tasks() {
		st := t.Status()
		if st.Completed {
			continue
		}
		run := time.Since(t.Start)
		cells = append(cells, []catCell{textCell(strconv.FormatInt(t.Num, 10)), textCell(t.Action()), textCell(t.ID), textCell("-"),
			textCell("transport"), numCell(t.Start.UnixMilli()), textCell(t.Start.UTC().Format("15:04:05")), numCell(run.Nanoseconds()),
			textCell(run.String()), textCell(t.Node), textCell(s.ipAddr), textCell("9300"), textCell(s.svc.NodeName()),
			textCell(service.Version), textCell("-")})
	}
	return s.writeCat(w, r, catTaskColumns, cells)
}

var templateColumns = []catColumn{
	col("name", []string{"n"}, "template name", false),
	col("index_patterns", []string{"t"}, "template index patterns", false),
	col("order", []string{"o", "p"}, "template application order/priority number", true),
	col("version", []string{"v"}, "version", true),
	col("composed_of", []string{"c"}, "component templates comprising index template", false),
}

// catTemplates lists the composable index templates.
func (s *Server) catTemplates(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, catParams...); err != nil {
		return err
	}
	pattern := r.PathValue("name")
	var cells [][]catCell
	for _, t := range s.templates.list() {
		if pattern != "" && pattern != "*" && !service.GlobMatch(pattern, t.Name) {
			continue
		}
		version := catCell{}
		if t.Version != nil {
			version = numCell(*t.Version)
		}
		cells = append(cells, []catCell{textCell(t.Name), textCell("[" + strings.Join(t.IndexPatterns, ", ") + "]"),
			numCell(t.Priority), version, textCell("[" + strings.Join(t.ComposedOf, ", ") + "]")})
	}
	return s.writeCat(w, r, templateColumns, cells)
}

// emptyCat answers a _cat table that has no rows here, with its columns
// for help and h.
func (s *Server) emptyCat(cols []catColumn) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if _, err := params(r, catParams...); err != nil {
			return err
		}
		return s.writeCat(w, r, cols, nil)
	}
}

var (
	fielddataColumns = []catColumn{col("id", nil, "node id", false), col("host", []string{"h"}, "host name", false),
		col("ip", nil, "ip address", false), col("node", []string{"n"}, "node name", false),
		col("field", []string{"f"}, "field name", false), col("size", nil, "field data usage", true)}
	pendingTaskColumns = []catColumn{col("insertOrder", []string{"o"}, "task insertion order", true),
		col("timeInQueue", []string{"t"}, "how long task has been in queue", true),
		col("priority", []string{"p"}, "task priority", false), col("source", []string{"s"}, "task source", false)}
	pluginColumns = []catColumn{{name: "id", desc: "unique node id"}, col("name", []string{"n"}, "node name", false),
		col("component", []string{"c"}, "component", false), col("version", []string{"v"}, "component version", false),
		{name: "description", aliases: []string{"d"}, desc: "plugin details"}}
	repositoryColumns = []catColumn{col("id", []string{"repoId"}, "unique repository id", false),
		col("type", []string{"t"}, "repository type", false)}
	recoveryColumns = []catColumn{col("index", []string{"i", "idx"}, "index name", false),
		col("shard", []string{"s", "sh"}, "shard name", true), col("type", []string{"ty"}, "recovery type", false),
		col("stage", []string{"st"}, "recovery stage", false)}
	segmentColumns = []catColumn{col("index", []string{"i", "idx"}, "index name", false),
		col("shard", []string{"s", "sh"}, "shard name", true), col("prirep", []string{"p", "pr", "primaryOrReplica"}, "primary or replica", false),
		col("ip", nil, "ip of node where it lives", false), col("segment", []string{"seg"}, "segment name", false),
		col("docs.count", []string{"dc", "docsCount"}, "number of docs in segment", true)}
	threadPoolColumns = []catColumn{col("node_name", []string{"nn"}, "node name", false), col("name", []string{"n"}, "thread pool name", false),
		col("active", []string{"a"}, "number of active threads", true), col("queue", []string{"q"}, "number of tasks currently in queue", true),
		col("rejected", []string{"r"}, "number of rejected tasks", true)}
)

// sortedTemplateNames is the names of a template map in order.
func sortedTemplateNames(m map[string]*indexTemplate) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
