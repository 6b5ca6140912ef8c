package recovery

import (
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/shardsplit/shardsplit/storage"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
)

// TestDecideTable checks every row of the decision table in the package doc.
func TestDecideTable(t *testing.T) {
	t0, _ := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	reserved, _ := routing.Apply(t0, routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
	committed, _ := routing.Apply(reserved, routing.Edit{Kind: routing.CommitSplit, Shard: 0, Children: []routing.ShardID{2, 3}})
	children := []routing.ShardID{2, 3}
	tests := []struct {
		name   string
		step   splitter.Stage
		table  *routing.Table
		action Action
		cancel bool
		delete []routing.ShardID
	}{
		{"begin, not reserved", splitter.StageBegin, t0, RollBack, false, nil},
		{"begin, reserved", splitter.StageBegin, reserved, RollBack, true, children},
		{"reserved", splitter.StageReserved, reserved, RollBack, true, children},
		{"aborting, already cancelled", splitter.StageAborting, t0, RollBack, false, children},
		{"handoff, not committed", splitter.StageHandoff, reserved, RollBack, true, children},
		{"handoff, committed", splitter.StageHandoff, committed, RollForward, false, []routing.ShardID{0}},
		{"published", splitter.StagePublished, committed, RollForward, false, []routing.ShardID{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := splitter.Record{ID: 7, Stage: tt.step, Sources: []routing.ShardID{0}}
			if tt.step != splitter.StageBegin {
				rec.Targets = children
			}
			ds := Decide([]splitter.Record{rec}, tt.table)
			if len(ds) != 1 {
				t.Fatalf("Decide = %v", ds)
			}
			d := ds[0]
			if d.Action != tt.action || d.Cancel != tt.cancel || !slices.Equal(d.Delete, tt.delete) {
				t.Errorf("Decide(%s) = %s cancel=%v delete=%v, want %s cancel=%v delete=%v", tt.step, d.Action, d.Cancel, d.Delete,
					tt.action, tt.cancel, tt.delete)
			}
		})
	}
	for _, s := range []splitter.Stage{splitter.StageDone, splitter.StageAborted} {
		if ds := Decide([]splitter.Record{{ID: 1, Stage: s}}, t0); len(ds) != 0 {
			t.Errorf("Decide(%s) = %v, want nothing", s, ds)
		}
	}
}

// TestCorruptFilesNameThemselves: a damaged table or journal stops
// recovery with an error naming the file, never silently trusted.
func TestCorruptFilesNameThemselves(t *testing.T) {
	for _, file := range []string{"TABLE", splitter.JournalFile} {
		t.Run(file, func(t *testing.T) {
			fs := vfs.NewMem()
			tab, _ := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
			opts := storage.Options{Dir: "/data", FS: fs}
			n, j, _, err := Open(opts, tab, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Append(splitter.Record{ID: j.NewID(), Stage: splitter.StageBegin, Sources: []routing.ShardID{0}, Version: 1}); err != nil {
				t.Fatal(err)
			}
			_ = n.Close()
			f, err := fs.OpenReadWrite("/data/"+file, vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0xff, 0xff}, 8); err != nil {
				t.Fatal(err)
			}
			_ = f.Close()
			_, _, _, err = Open(opts, tab, nil)
			if err == nil || !strings.Contains(err.Error(), "/data/"+file) {
				t.Fatalf("Open with a damaged %s = %v, want an error naming the file", file, err)
			}
			t.Logf("%v", err)
		})
	}
}
