package splitter

import (
	"fmt"

	"github.com/shardsplit/shardsplit/routing"
)

// mergeParts: N sources, adjacent leaves of one root, into one target
// that owns the union of their spans.
type mergeParts struct{}

func (mergeParts) check(p Plan) error {
	if len(p.Sources) < 2 {
		return fmt.Errorf("a merge has two sources or more; the plan names %v", p.Sources)
	}
	return nil
}

func (mergeParts) reservation(t *routing.Table, p Plan) ([]routing.Leaf, bool, bool) {
	if len(p.Sources) == 0 {
		return nil, false, false
	}
	rec, ok := t.MergeOf(p.Sources[0])
	if !ok {
		return nil, false, false
	}
	return []routing.Leaf{{Shard: rec.Target, Span: rec.Span()}}, rec.InProgress, true
}

// build makes the target from the live sources
// (storage.Engine.CreateMergeTarget: a checkpoint of the largest, the
// others' documents copied in), each source read at its own S_i.
func (mergeParts) build(o *Operation, targets []routing.Leaf) ([]uint64, error) {
	if len(targets) != 1 {
		return nil, fmt.Errorf("a merge has one target; the table reserves %v", leafIDs(targets))
	}
	target, stats, err := o.d.n.Engine().CreateMergeTarget(o.sources, targets[0].Shard, targets[0].Span)
	if err != nil {
		return nil, err
	}
	o.addTarget(target)
	o.report.Linked += stats.Linked
	o.report.Copied += stats.Copied
	return stats.Seqs, nil
}

func (mergeParts) committed(*Operation) error { return nil }
