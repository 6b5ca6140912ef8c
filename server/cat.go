package server

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/shardsplit/shardsplit/service"
)

// catColumn is a _cat column: its name, aliases, description, and whether
// it is shown by default and right-aligned.
type catColumn struct {
	name    string
	aliases []string
	desc    string
	def     bool
	right   bool
}

// catCell is a value: text, plus a number for sorting and unit scaling
// (bytes >= 0 for size columns).
type catCell struct {
	text  string
	num   *float64
	bytes *int64
}

func textCell(s string) catCell { return catCell{text: s} }

func numCell(n int64) catCell {
	f := float64(n)
	return catCell{text: strconv.FormatInt(n, 10), num: &f}
}

func bytesCell(n int64) catCell {
	if n < 0 {
		return catCell{}
	}
	f := float64(n)
	return catCell{text: FormatBytes(n), num: &f, bytes: &n}
}

// FormatBytes writes a size as OpenSearch's ByteSizeValue.toString does:
// the largest unit the value reaches, one decimal truncated, ".0" dropped
// (230b, 5.1kb, 1.2mb).
func FormatBytes(n int64) string {
	units := []struct {
		suffix string
		size   float64
	}{{"pb", 1 << 50}, {"tb", 1 << 40}, {"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}}
	for _, u := range units {
		if float64(n) >= u.size {
			return format1Decimals(float64(n)/u.size, u.suffix)
		}
	}
	return strconv.FormatInt(n, 10) + "b"
}

// format1Decimals is OpenSearch's Strings.format1Decimals: the first
// decimal digit of Java's Double.toString, without rounding, dropped if 0.
func format1Decimals(v float64, suffix string) string {
	p := strconv.FormatFloat(v, 'f', -1, 64)
	whole, frac, _ := strings.Cut(p, ".")
	if frac == "" || frac[0] == '0' {
		return whole + suffix
	}
	return whole + "." + frac[:1] + suffix
}

var byteUnits = map[string]int64{"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}

var catParams = []string{"format", "h", "help", "v", "s", "bytes", "local", "master_timeout", "cluster_manager_timeout",
	"time", "expand_wildcards", "pri", "health", "include_unloaded_segments", "full_id"}

// writeCat renders a _cat table: help, h (with aliases), s (sort, :asc or
// :desc), v (header), bytes (unit), format=json (values as strings).
func (s *Server) writeCat(w http.ResponseWriter, r *http.Request, cols []catColumn, rows [][]catCell) error {
	q, err := params(r, catParams...)
	if err != nil {
		return err
	}
	if help, _ := boolParam(q, "help", false); help {
		var b strings.Builder
		width := 0
		for _, c := range cols {
			width = max(width, len(c.name))
		}
		for _, c := range cols {
			fmt.Fprintf(&b, "%-*s | %s | %s\n", width, c.name, strings.Join(c.aliases, ","), c.desc)
		}
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = w.Write([]byte(b.String()))
		return nil
	}
	unit := int64(0)
	if b := q.Get("bytes"); b != "" {
		u, ok := byteUnits[b]
		if !ok {
			return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
				Reason: fmt.Sprintf("failed to parse [bytes] with value [%s]: unknown unit", b)}
		}
		unit = u
	}
	find := func(name string) int {
		for i, c := range cols {
			if c.name == name || containsStr(c.aliases, name) {
				return i
			}
		}
		return -1
	}
	// Columns to show, with the names the request used.
	type shown struct {
		idx  int
		name string
	}
	var show []shown
	if h := q.Get("h"); h != "" {
		for _, name := range strings.Split(h, ",") {
			name = strings.TrimSpace(name)
			if strings.Contains(name, "*") {
				for i, c := range cols {
					if service.GlobMatch(name, c.name) {
						show = append(show, shown{i, c.name})
					}
				}
				continue
			}
			i := find(name)
			if i < 0 {
				return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
					Reason: fmt.Sprintf("Unable to find column [%s] in the table", name)}
			}
			show = append(show, shown{i, name})
		}
	} else {
		for i, c := range cols {
			if c.def {
				show = append(show, shown{i, c.name})
			}
		}
	}
	// Sort.
	if sortBy := q.Get("s"); sortBy != "" {
		type key struct {
			idx  int
			desc bool
		}
		var keys []key
		for _, part := range strings.Split(sortBy, ",") {
			name, dir, _ := strings.Cut(strings.TrimSpace(part), ":")
			i := find(name)
			if i < 0 {
				return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
					Reason: fmt.Sprintf("Unable to sort by unknown sort key `%s`", name)}
			}
			keys = append(keys, key{i, dir == "desc"})
		}
		sort.SliceStable(rows, func(a, b int) bool {
			for _, k := range keys {
				x, y := rows[a][k.idx], rows[b][k.idx]
				c := 0
				switch {
				case x.num != nil && y.num != nil:
					if *x.num < *y.num {
						c = -1
					} else if *x.num > *y.num {
						c = 1
					}
				case x.num == nil && y.num != nil:
					c = 1 // empty cells last
				case x.num != nil && y.num == nil:
					c = -1
				default:
					c = strings.Compare(x.text, y.text)
				}
				if k.desc {
					c = -c
				}
				if c != 0 {
					return c < 0
				}
			}
			return false
		})
	}
	cellText := func(c catCell) string {
		if unit > 0 && c.bytes != nil {
			return strconv.FormatInt(*c.bytes/unit, 10)
		}
		return c.text
	}
	if q.Get("format") == "json" {
		out := make([]map[string]any, 0, len(rows))
		for _, row := range rows {
			m := map[string]any{}
			for _, sh := range show {
				if t := cellText(row[sh.idx]); t != "" {
					m[sh.name] = t
				} else {
					m[sh.name] = nil
				}
			}
			out = append(out, m)
		}
		s.writeJSON(w, r, http.StatusOK, out)
		return nil
	}
	if f := q.Get("format"); f != "" && f != "text" && f != "txt" {
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("format [%s] is not supported by shardsplit (text or json)", f)}
	}
	header, _ := boolParam(q, "v", false)
	widths := make([]int, len(show))
	table := [][]string{}
	if header {
		hr := make([]string, len(show))
		for i, sh := range show {
			hr[i] = sh.name
		}
		table = append(table, hr)
	}
	for _, row := range rows {
		tr := make([]string, len(show))
		for i, sh := range show {
			tr[i] = cellText(row[sh.idx])
		}
		table = append(table, tr)
	}
	for _, tr := range table {
		for i, c := range tr {
			widths[i] = max(widths[i], len(c))
		}
	}
	var b strings.Builder
	for ti, tr := range table {
		for i, c := range tr {
			if i > 0 {
				b.WriteByte(' ')
			}
			right := cols[show[i].idx].right && !(header && ti == 0)
			last := i == len(tr)-1
			switch {
			case right:
				fmt.Fprintf(&b, "%*s", widths[i], c)
			case last:
				b.WriteString(c)
			default:
				fmt.Fprintf(&b, "%-*s", widths[i], c)
			}
		}
		b.WriteByte('\n')
	}
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(b.String()))
	}
	return nil
}

var shardColumns = []catColumn{
	{"index", []string{"i", "idx"}, "index name", true, false},
	{"shard", []string{"s", "sh"}, "shard name", true, true},
	{"prirep", []string{"p", "pr", "primaryOrReplica"}, "primary or replica", true, false},
	{"state", []string{"st"}, "shard state", true, false},
	{"docs", []string{"d", "dc"}, "number of docs in shard", true, true},
	{"store", []string{"sto"}, "store size of shard (how much disk it uses)", true, true},
	{"ip", nil, "ip of node where it lives", true, false},
	{"id", nil, "unique id of node where it lives", false, false},
	{"node", []string{"n"}, "name of node where it lives", true, false},
	{"unassigned.reason", []string{"ur"}, "reason shard is unassigned", false, false},
	{"seq_no.max", []string{"sqm", "maxSeqNo"}, "max sequence number", false, true},
	{"seq_no.local_checkpoint", []string{"sql", "localCheckpoint"}, "local checkpoint", false, true},
	{"seq_no.global_checkpoint", []string{"sqg", "globalCheckpoint"}, "global checkpoint", false, true},
}

func (s *Server) catShards(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, catParams...); err != nil {
		return err
	}
	rows, err := s.svc.ShardRows(r.PathValue("index"))
	if err != nil {
		return err
	}
	var cells [][]catCell
	for _, row := range rows {
		pr := "r"
		if row.Primary {
			pr = "p"
		}
		c := []catCell{textCell(row.Index), numCell(int64(row.Shard)), textCell(pr), textCell(row.State), {}, {}, {}, {}, {}, {},
			{}, {}, {}}
		if row.State == service.StateUnassigned {
			reason := row.UnassignedReason
			if reason == "" {
				reason = "INDEX_CREATED"
			}
			c[9] = textCell(reason)
		} else {
			if row.Docs >= 0 {
				c[4] = numCell(row.Docs)
			}
			if row.Bytes >= 0 {
				c[5] = bytesCell(row.Bytes)
			}
			c[6], c[7], c[8] = textCell(s.ipAddr), textCell(s.svc.NodeID()), textCell(s.svc.NodeName())
			if row.Node != "" {
				c[7], c[8] = textCell(s.nodeIDOf(row.Node)), textCell(row.Node)
			}
		}
		if row.Node != "" && row.State == service.StateStarted {
			c[10], c[11], c[12] = numCell(row.SeqMax), numCell(row.LocalCheckpoint), numCell(row.GlobalCheckpoint)
		}
		cells = append(cells, c)
	}
	return s.writeCat(w, r, shardColumns, cells)
}

var indexColumns = []catColumn{
	{"health", []string{"h"}, "current health status", true, false},
	{"status", []string{"s"}, "open/close status", true, false},
	{"index", []string{"i", "idx"}, "index name", true, false},
	{"uuid", []string{"id"}, "index uuid", true, false},
	{"pri", []string{"p", "shards.primary", "shardsPrimary"}, "number of primary shards", true, true},
	{"rep", []string{"r", "shards.replica", "shardsReplica"}, "number of replica shards", true, true},
	{"docs.count", []string{"dc", "docsCount"}, "available docs", true, true},
	{"docs.deleted", []string{"dd", "docsDeleted"}, "deleted docs", true, true},
	{"store.size", []string{"ss", "storeSize"}, "store size of primaries & replicas", true, true},
	{"pri.store.size", nil, "store size of primaries", true, true},
}

func (s *Server) catIndices(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, catParams...); err != nil {
		return err
	}
	stats, err := s.svc.Stats(r.PathValue("index"))
	if err != nil {
		return err
	}
	var cells [][]catCell
	for _, st := range stats {
		cells = append(cells, []catCell{textCell(st.Health), textCell(st.Status), textCell(st.Name), textCell(st.UUID),
			numCell(int64(st.Primaries)), numCell(int64(st.Replicas)), numCell(st.Docs), numCell(0), bytesCell(st.Bytes), bytesCell(st.PriBytes)})
	}
	return s.writeCat(w, r, indexColumns, cells)
}

var nodeColumns = []catColumn{
	{"ip", []string{"i"}, "ip address", true, false},
	{"heap.percent", []string{"hp", "heapPercent"}, "used heap ratio", true, true},
	{"ram.percent", []string{"rp", "ramPercent"}, "used machine memory ratio", true, true},
	{"cpu", nil, "recent cpu usage", true, true},
	{"load_1m", []string{"l"}, "1m load avg", true, false},
	{"load_5m", []string{"l"}, "5m load avg", true, false},
	{"load_15m", []string{"l"}, "15m load avg", true, false},
	{"node.role", []string{"r", "role", "nodeRole"}, "m:master eligible node, d:data node, i:ingest node, -:coordinating node only", true, false},
	{"node.roles", []string{"rs", "all roles"}, "node roles", true, false},
	{"cluster_manager", []string{"m"}, "*:current cluster manager", true, false},
	{"name", []string{"n"}, "node name", true, false},
	{"id", []string{"nodeId"}, "unique node id", false, false},
	{"port", []string{"po"}, "bound transport port", false, false},
	{"http_address", []string{"http"}, "bound http address", false, false},
	{"version", []string{"v"}, "os version", false, false},
}

func (s *Server) catNodes(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, catParams...); err != nil {
		return err
	}
	if st := s.svc.ClusterState(); st != nil {
		return s.writeCat(w, r, nodeColumns, s.clusterNodeCells(st))
	}
	cells := [][]catCell{{textCell(s.ipAddr), numCell(int64(heapPercent())), {}, {}, {}, {}, {},
		textCell("dimr"), textCell(strings.Join(nodeRoles, ",")), textCell("*"), textCell(s.svc.NodeName()),
		textCell(s.svc.NodeID()), textCell("9300"), textCell(s.cfg.Addr), textCell(service.Version)}}
	return s.writeCat(w, r, nodeColumns, cells)
}

func (s *Server) catHelp(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	_, _ = w.Write([]byte("=^.^=\n/_cat/allocation\n/_cat/shards\n/_cat/shards/{index}\n/_cat/cluster_manager\n/_cat/nodes\n" +
		"/_cat/tasks\n/_cat/indices\n/_cat/indices/{index}\n/_cat/segments\n/_cat/segments/{index}\n/_cat/count\n" +
		"/_cat/count/{index}\n/_cat/recovery\n/_cat/recovery/{index}\n/_cat/health\n/_cat/pending_tasks\n/_cat/aliases\n" +
		"/_cat/aliases/{alias}\n/_cat/thread_pool\n/_cat/thread_pool/{thread_pools}\n/_cat/plugins\n/_cat/fielddata\n" +
		"/_cat/fielddata/{fields}\n/_cat/nodeattrs\n/_cat/repositories\n/_cat/templates\n"))
	return nil
}
