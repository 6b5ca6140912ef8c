package routing

// Golden files for Apply (Pebble's internal/manifest version_edit_apply
// style): testdata/apply/* define a table, apply edits one at a time and
// print the table that results or the error. Regenerate with -rewrite and
// review the diff like code.
//
// Commands:
//
//	define mode=partition|opensearch shards=N routing-shards=R [partition-size=P]
//	apply begin-split shard=S ways=N
//	apply begin-split shard=S points=(K1,K2,...)   split points in display units
//	apply commit-split shard=S children=(C1,C2,...)
//	apply cancel-split shard=S
//	apply begin-merge sources=(A,B,...)
//	apply commit-merge shard=T [sources=(A,B,...)]
//	apply cancel-merge shard=T
//	lookup key=K [root=R]       K in display units; root defaults to K's root (partition mode) or 0
//	lookup id=X [routing=Y]     route a document
//	table
//
// A refused edit prints the error (OpenSearch's exception class and message
// for the rules OpenSearch enforces) and leaves the table as it was.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

func TestApplyDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/apply", func(t *testing.T, path string) {
		var tab *Table
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			if td.Cmd != "define" && tab == nil {
				td.Fatalf(t, "%s before define", td.Cmd)
			}
			switch td.Cmd {
			case "define":
				next, err := defineTable(t, td)
				if err != nil {
					return formatError(err) // the previous table stays
				}
				tab = next
				return formatTable(tab)
			case "apply":
				next, err := Apply(tab, parseEdit(t, td, tab.Mode()))
				if err != nil {
					return formatError(err)
				}
				if _, err := Decode(next.Encode()); err != nil {
					td.Fatalf(t, "the table does not round-trip: %v", err)
				}
				tab = next
				return formatTable(tab)
			case "lookup":
				return lookup(t, td, tab)
			case "table":
				return formatTable(tab)
			}
			td.Fatalf(t, "unknown command %q", td.Cmd)
			return ""
		})
	})
}

func defineTable(t *testing.T, td *datadriven.TestData) (*Table, error) {
	var modeName string
	s := Settings{PartitionSize: 1}
	td.ScanArgs(t, "mode", &modeName)
	td.ScanArgs(t, "shards", &s.Shards)
	td.ScanArgs(t, "routing-shards", &s.RoutingShards)
	td.MaybeScanArgs(t, "partition-size", &s.PartitionSize)
	mode, err := ParseMode(modeName)
	if err != nil {
		td.Fatalf(t, "%v", err)
	}
	return NewTable(mode, s)
}

// parseEdit reads "apply <kind> shard=S ..." into an Edit. Split points are
// read in display units (partitions, or signed hashes in opensearch mode);
// they are converted with Mode.KeyOf, which accepts any value in the key
// space so that Apply, not the parser, judges them.
func parseEdit(t *testing.T, td *datadriven.TestData, mode Mode) Edit {
	if len(td.CmdArgs) == 0 {
		td.Fatalf(t, "apply needs an edit kind")
	}
	var e Edit
	switch kind := td.CmdArgs[0].Key; kind {
	case "begin-split":
		e.Kind = BeginSplit
	case "commit-split":
		e.Kind = CommitSplit
	case "cancel-split":
		e.Kind = CancelSplit
	case "begin-merge":
		e.Kind = BeginMerge
	case "commit-merge":
		e.Kind = CommitMerge
	case "cancel-merge":
		e.Kind = CancelMerge
	default:
		td.Fatalf(t, "unknown edit kind %q", kind)
	}
	var shard uint32
	if e.Kind != BeginMerge {
		td.ScanArgs(t, "shard", &shard)
	}
	e.Shard = ShardID(shard)
	if arg, ok := td.Arg("sources"); ok {
		for _, v := range arg.Vals {
			e.Sources = append(e.Sources, ShardID(parseInt(t, td, v)))
		}
	}
	td.MaybeScanArgs(t, "ways", &e.Ways)
	if arg, ok := td.Arg("points"); ok {
		for _, v := range arg.Vals {
			k, err := mode.KeyOf(parseInt(t, td, v))
			if err != nil {
				td.Fatalf(t, "%v", err)
			}
			e.Points = append(e.Points, k)
		}
	}
	if arg, ok := td.Arg("children"); ok {
		for _, v := range arg.Vals {
			e.Children = append(e.Children, ShardID(parseInt(t, td, v)))
		}
	}
	return e
}

func parseInt(t *testing.T, td *datadriven.TestData, v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		td.Fatalf(t, "%v", err)
	}
	return n
}

// lookup prints the shard that owns a key (or a document) with and without
// descending into an in-progress split.
func lookup(t *testing.T, td *datadriven.TestData, tab *Table) string {
	var p Placement
	if td.HasArg("id") {
		var id, routing string
		td.ScanArgs(t, "id", &id)
		td.MaybeScanArgs(t, "routing", &routing)
		p = tab.Settings().Place(id, routing)
	} else {
		var v int64
		td.ScanArgs(t, "key", &v)
		k, err := tab.Mode().KeyOf(v)
		if err != nil {
			td.Fatalf(t, "%v", err)
		}
		// A placement whose key is k: the partition in partition mode, the
		// sum in opensearch mode.
		p = Placement{Partition: uint32(k), Sum: int32(uint32(k) ^ signBias)}
		if tab.Mode() == ModePartition {
			p.Root = ShardID(uint32(k) / uint32(tab.Settings().Factor()))
		}
		if td.HasArg("root") {
			var root uint32
			td.ScanArgs(t, "root", &root)
			p.Root = ShardID(root)
		}
		if int(p.Root) >= tab.Settings().Shards {
			return fmt.Sprintf("error: root %d of %d\n", p.Root, tab.Settings().Shards)
		}
	}
	k := tab.Mode().Display(uint64(tab.KeyOf(p)))
	return fmt.Sprintf("root %d key %d: shard %d, with in-progress children %d\n",
		p.Root, k, tab.Lookup(p), tab.LookupInProgress(p))
}

// formatError prints an *Error as OpenSearch's exception class and message,
// anything else as its text.
func formatError(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return fmt.Sprintf("error: %s: %s\n", e.Exception, e.Message)
	}
	return fmt.Sprintf("error: %v\n", err)
}

// formatTable prints a table for a golden file: version, mode, settings,
// the leaves of each root with their spans (half-open, in display units)
// and every split record.
func formatTable(tab *Table) string {
	var b strings.Builder
	s := tab.Settings()
	fmt.Fprintf(&b, "v%d %s shards=%d routing-shards=%d", tab.Version(), tab.Mode(), s.Shards, s.RoutingShards)
	if s.PartitionSize != 1 {
		fmt.Fprintf(&b, " partition-size=%d", s.PartitionSize)
	}
	fmt.Fprintf(&b, " max-shard-id=%d\n", tab.MaxShardID())
	for r := range s.Shards {
		fmt.Fprintf(&b, "root %d: %s\n", r, formatLeaves(tab.Mode(), tab.Leaves(ShardID(r))))
	}
	for _, sp := range tab.Splits() {
		state := "committed"
		if sp.InProgress {
			state = "in progress"
		}
		fmt.Fprintf(&b, "split %d (root %d) %s: %s\n", sp.Parent, sp.Root, state, formatLeaves(tab.Mode(), sp.Children))
	}
	for _, m := range tab.Merges() {
		state := "committed"
		if m.InProgress {
			state = "in progress"
		}
		fmt.Fprintf(&b, "merge into %d[%d,%d) (root %d) %s: %s\n", m.Target, tab.Mode().Display(m.Span().Start),
			tab.Mode().Display(m.Span().End), m.Root, state, formatLeaves(tab.Mode(), m.Sources))
	}
	return b.String()
}

func formatLeaves(m Mode, leaves []Leaf) string {
	parts := make([]string, len(leaves))
	for i, l := range leaves {
		parts[i] = fmt.Sprintf("%d[%d,%d)", l.Shard, m.Display(l.Span.Start), m.Display(l.Span.End))
	}
	return strings.Join(parts, " ")
}
