package recovery

// Golden decisions (Pebble's version_edit_apply style): testdata/decide
// builds a table with edits, lists a journal, and prints what Decide does
// with it. Regenerate with -rewrite and review the diff like code.
//
//	table mode=partition|opensearch shards=N routing-shards=R
//	begin shard=P ways=N | commit shard=P | cancel shard=P     edits applied to the table
//	begin-merge sources=A,B | commit-merge target=T | cancel-merge target=T
//	decide                                                     input: one record per line:
//	  split=N stage=S parent=P [children=A,B]
//	  split=N kind=merge stage=S sources=A,B [target=T]

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
)

var stages = map[string]splitter.Stage{"begin": splitter.StageBegin, "reserved": splitter.StageReserved,
	"handoff": splitter.StageHandoff, "published": splitter.StagePublished, "done": splitter.StageDone,
	"aborting": splitter.StageAborting, "aborted": splitter.StageAborted}

func TestDecideGolden(t *testing.T) {
	var tab *routing.Table
	datadriven.RunTest(t, "testdata/decide", func(t *testing.T, td *datadriven.TestData) string {
		switch td.Cmd {
		case "table":
			var mode string
			var shards, rs int
			td.ScanArgs(t, "mode", &mode)
			td.ScanArgs(t, "shards", &shards)
			td.ScanArgs(t, "routing-shards", &rs)
			m, err := routing.ParseMode(mode)
			if err != nil {
				return err.Error()
			}
			if tab, err = routing.NewTable(m, routing.Settings{Shards: shards, RoutingShards: rs, PartitionSize: 1}); err != nil {
				return err.Error()
			}
			return describe(tab)
		case "begin", "commit", "cancel":
			var shard, ways int
			td.ScanArgs(t, "shard", &shard)
			e := routing.Edit{Shard: routing.ShardID(shard)}
			switch td.Cmd {
			case "begin":
				td.ScanArgs(t, "ways", &ways)
				e.Kind, e.Ways = routing.BeginSplit, ways
			case "commit":
				rec, _ := tab.Split(e.Shard)
				e.Kind, e.Children = routing.CommitSplit, childIDs(rec)
			case "cancel":
				e.Kind = routing.CancelSplit
			}
			next, err := routing.Apply(tab, e)
			if err != nil {
				return "error: " + err.Error()
			}
			tab = next
			return describe(tab)
		case "begin-merge", "commit-merge", "cancel-merge":
			var e routing.Edit
			switch td.Cmd {
			case "begin-merge":
				var srcs []string
				td.ScanArgs(t, "sources", &srcs)
				e.Kind = routing.BeginMerge
				for _, v := range srcs {
					var id routing.ShardID
					fmt.Sscan(v, &id)
					e.Sources = append(e.Sources, id)
				}
			case "commit-merge", "cancel-merge":
				var target int
				td.ScanArgs(t, "target", &target)
				e.Kind, e.Shard = routing.CommitMerge, routing.ShardID(target)
				if td.Cmd == "cancel-merge" {
					e.Kind = routing.CancelMerge
				}
			}
			next, err := routing.Apply(tab, e)
			if err != nil {
				return "error: " + err.Error()
			}
			tab = next
			return describe(tab)
		case "decide":
			records, err := parseRecords(td.Input)
			if err != nil {
				return "error: " + err.Error()
			}
			var b strings.Builder
			for _, d := range Decide(records, tab) {
				if d.Kind == splitter.KindMerge {
					target := routing.ShardID(0)
					if len(d.Targets) > 0 {
						target = d.Targets[0]
					}
					fmt.Fprintf(&b, "merge %d of %v into %d: %s cancel=%v delete=%v\n  why: %s\n", d.ID, d.Sources, target, d.Action, d.Cancel, d.Delete, d.Why)
					continue
				}
				fmt.Fprintf(&b, "split %d of %d: %s cancel=%v delete=%v\n  why: %s\n", d.ID, d.Sources[0], d.Action, d.Cancel, d.Delete, d.Why)
			}
			if b.Len() == 0 {
				return "nothing to do\n"
			}
			return b.String()
		}
		return fmt.Sprintf("unknown command %q", td.Cmd)
	})
}

func parseRecords(input string) ([]splitter.Record, error) {
	var out []splitter.Record
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		var r splitter.Record
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "split":
				fmt.Sscan(v, &r.ID)
			case "stage":
				s, ok := stages[v]
				if !ok {
					return nil, fmt.Errorf("unknown stage %q", v)
				}
				r.Stage = s
			case "parent", "target":
				var id routing.ShardID
				fmt.Sscan(v, &id)
				if k == "parent" {
					r.Sources = []routing.ShardID{id}
				} else if id != 0 {
					r.Targets = []routing.ShardID{id}
				}
			case "children", "sources":
				for _, c := range strings.Split(v, ",") {
					var id routing.ShardID
					fmt.Sscan(c, &id)
					if k == "sources" {
						r.Sources = append(r.Sources, id)
					} else {
						r.Targets = append(r.Targets, id)
					}
				}
			case "kind":
				if v != "merge" {
					return nil, fmt.Errorf("unknown kind %q", v)
				}
				r.Kind = splitter.KindMerge
			default:
				return nil, fmt.Errorf("unknown field %q", k)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// describe prints a table's leaves and splits.
func describe(t *routing.Table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d active %v", t.Version(), t.ActiveShards())
	for _, s := range t.Splits() {
		state := "committed"
		if s.InProgress {
			state = "in progress"
		}
		fmt.Fprintf(&b, "; split of %d %s %v", s.Parent, state, childIDs(s))
	}
	for _, m := range t.Merges() {
		state := "committed"
		if m.InProgress {
			state = "in progress"
		}
		fmt.Fprintf(&b, "; merge of %v into %d %s", m.SourceIDs(), m.Target, state)
	}
	return b.String() + "\n"
}
