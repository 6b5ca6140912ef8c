package splitter

import (
	"errors"
	"fmt"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// kindParts are what a split and a merge do their own way; everything
// else (the machine, the journal, the fence, the replay, the publish, the
// commit, the cleanup, the cancel) is one protocol over sources and
// targets.
type kindParts interface {
	// check refuses a plan that is not of the kind's shape (checkBegin).
	check(p Plan) error
	// reservation returns the targets t reserves for the plan (their ids
	// and spans), and whether the reservation is still in progress.
	reservation(t *routing.Table, p Plan) (targets []routing.Leaf, inProgress, ok bool)
	// build makes the targets from the live sources, whose logs are held,
	// adds each one made to o (o.addTarget), and returns for each source
	// the sequence number the targets reflect.
	build(o *Operation, targets []routing.Leaf) ([]uint64, error)
	// committed starts what the kind leaves for after the commit, before
	// the sources are retired (retried with the cleanup).
	committed(o *Operation) error
}

func partsOf(k Kind) kindParts {
	if k == KindMerge {
		return mergeParts{}
	}
	return splitParts{}
}

// splitParts: one source, the parent, into N children that each own a
// part of its span.
type splitParts struct{}

func (splitParts) check(p Plan) error {
	if p.Kind != KindSplit {
		return fmt.Errorf("unknown operation kind %d", p.Kind)
	}
	if len(p.Sources) != 1 {
		return fmt.Errorf("a split has one parent; the plan names %v", p.Sources)
	}
	return nil
}

func (splitParts) reservation(t *routing.Table, p Plan) ([]routing.Leaf, bool, bool) {
	rec, ok := t.Split(p.Parent())
	return rec.Children, rec.InProgress, ok
}

// build holds the parent's compactions (wasted work from here; a cancel
// gives them back), then makes every child from the live parent
// (storage.Engine.CreateChildren: excised or keep-all, Config.ChildBuild).
// S is the lowest sequence number any child reflects; replaying from there
// is harmless for the others (entries are applied in order).
func (splitParts) build(o *Operation, children []routing.Leaf) ([]uint64, error) {
	d, parent := o.d, o.sources[0]
	d.n.Engine().HoldCompactions(parent)
	o.holdsCompactions = true
	specs := make([]storage.ChildSpec, len(children))
	for i, c := range children {
		specs[i] = storage.ChildSpec{Shard: c.Shard, Span: c.Span}
	}
	made, stats, err := d.n.Engine().CreateChildren(parent, specs, d.cfg.ChildBuild, !d.cfg.SerialChildren)
	// Every child made is the split's, also when a sibling failed: the
	// cancel that follows a failure removes them with the rest.
	for _, child := range made {
		if child != nil {
			o.addTarget(child)
		}
	}
	if err != nil {
		return nil, err
	}
	seq := uint64(0)
	for i, st := range stats {
		o.report.Linked += st.Linked
		o.report.Copied += st.Copied
		o.report.ChildStats = append(o.report.ChildStats, st)
		if i == 0 || st.Seq < seq {
			seq = st.Seq
		}
	}
	return []uint64{seq}, nil
}

// committed starts the keep-all children's deletion of their foreign
// documents in the background (the split does not wait for it; a crash
// before it ends redoes it on open).
func (splitParts) committed(o *Operation) error {
	for _, c := range o.targets {
		if _, err := o.d.n.Engine().StartForeignCleanup(c); err != nil && !errors.Is(err, storage.ErrShardClosed) {
			return fmt.Errorf("start foreign cleanup of child %d: %w", c.ID(), err)
		}
	}
	return nil
}
