package storage

import (
	"fmt"
	"maps"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// TestMergeTarget: a merge target made from two live siblings holds
// exactly their documents as of each one's S_i, and after each source's log
// is replayed from its own S_i it holds exactly the union of their
// documents; writes the catch-up must replay are ones made after the
// target was created. The larger sibling is the one checkpointed.
func TestMergeTarget(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout Layout) {
		e := openTestEngine(t, vfs.NewMem(), layout)
		defer e.Close()
		lo, hi := routing.Span{Start: 256, End: 320}, routing.Span{Start: 320, End: 384}
		a, _ := e.OpenShard(9, 2, []routing.Span{lo})
		b, _ := e.OpenShard(10, 2, []routing.Span{hi})
		byShard := map[*Shard][]Op{}
		for i, id := range idsInRoot(2, 1200) {
			op := opFor(id, OpIndex, fmt.Sprintf("v1-%d", i))
			if lo.Contains(op.Key) {
				byShard[a] = append(byShard[a], op)
			} else if len(byShard[b]) < 100 { // b is the smaller one
				byShard[b] = append(byShard[b], op)
			}
		}
		for s, ops := range byShard {
			if _, err := s.Write(ops, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []*Shard{a, b} {
			if err := s.st.db.Flush(); err != nil { // sizes are estimated from sstables
				t.Fatal(err)
			}
		}
		a.HoldLog()
		b.HoldLog()
		target, stats, err := e.CreateMergeTarget([]*Shard{b, a}, 11, routing.Span{Start: 256, End: 384})
		if err != nil {
			t.Fatal(err)
		}
		if layout == LayoutPerShard && (stats.Largest != a.ID() || stats.Docs != len(byShard[b])) {
			t.Errorf("largest %d, %d docs copied; want largest %d and %d copied", stats.Largest, stats.Docs, a.ID(), len(byShard[b]))
		}
		if stats.Seqs[0] != b.Seq() || stats.Seqs[1] != a.Seq() {
			t.Errorf("S = %v, want [%d %d]", stats.Seqs, b.Seq(), a.Seq())
		}
		// Writes after the target: updates and deletes on both sources.
		for s, ops := range byShard {
			var more []Op
			for i, op := range ops[:50] {
				op.Source = []byte(fmt.Sprintf("v2-%d", i))
				if i%5 == 0 {
					op.Kind, op.Source = OpDelete, nil
				}
				more = append(more, op)
			}
			if _, err := s.Write(more, nil); err != nil {
				t.Fatal(err)
			}
		}
		if layout == LayoutPerShard {
			if got := scanState(t, target); len(got) != len(byShard[a])+len(byShard[b]) {
				t.Errorf("target holds %d docs before catch-up, want %d", len(got), len(byShard[a])+len(byShard[b]))
			}
		}
		for i, s := range []*Shard{b, a} {
			if _, _, err := e.CatchUp(s, []*Shard{target}, stats.Seqs[i]); err != nil {
				t.Fatal(err)
			}
		}
		want := scanState(t, a)
		maps.Copy(want, scanState(t, b))
		if got := scanState(t, target); !equalState(got, want) {
			t.Errorf("target after catch-up: %d docs, sources %d", len(got), len(want))
		}
	})
}

// TestMergeTargetRefusesMixedKeyspaces: sources in different keyspaces
// cannot be one shard.
func TestMergeTargetRefusesMixedKeyspaces(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	a, _ := e.OpenShard(1, 1, []routing.Span{rootSpan(1)})
	b, _ := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if _, _, err := e.CreateMergeTarget([]*Shard{a, b}, 9, routing.Span{Start: 128, End: 384}); err == nil {
		t.Fatal("CreateMergeTarget across keyspaces succeeded")
	}
}
