// Package recovery brings a data directory back to a state where every
// split either completed or never happened, after a crash at any instant.
//
// Decide is pure: from the last journal record of each split and the
// persisted routing table (the commit point) it decides to roll each
// unfinished split back or forward and which shard stores to delete. Open is
// the thin driver: it opens the engine, reads the journal and the table,
// carries out the decisions, records their completion, trims every
// operation log (no split holds one after a restart) and opens the node.
// Every action is idempotent, so a crash during recovery is just another
// crash point: running Open again finishes the job.
//
// Decision table (last journal record of a split → action):
//
//	begin               roll back: cancel the reservation if the table has it; delete its children
//	reserved, aborting  roll back: delete the children; cancel the reservation if still in the table
//	handoff             the table decides: CommitSplit persisted → roll forward (delete the parent),
//	                    else roll back as above
//	published           roll forward: delete the parent's store
//	done, aborted       nothing
//
// recovery imports routing, storage, node and splitter.
package recovery

import (
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// Action is what recovery does with an unfinished split.
type Action uint8

const (
	// RollBack: the split never happened; its children are deleted.
	RollBack Action = iota + 1
	// RollForward: the split completed; its parent is deleted.
	RollForward
)

func (a Action) String() string {
	switch a {
	case RollBack:
		return "roll-back"
	case RollForward:
		return "roll-forward"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Decision is the plan for one unfinished split.
type Decision struct {
	Split  uint64
	Parent routing.ShardID
	Action Action
	// Cancel: apply CancelSplit to the table (the reservation is still in it).
	Cancel bool
	// Delete: shard stores to delete.
	Delete []routing.ShardID
	// Done is the journal step that records the decision carried out.
	Done splitter.Step
	Why  string
}

// Decide returns a decision for every unfinished split in last (the last
// record of each split), given the persisted table.
func Decide(last []splitter.Record, t *routing.Table) []Decision {
	var out []Decision
	for _, r := range last {
		if r.Step.Finished() {
			continue
		}
		d := Decision{Split: r.Split, Parent: r.Parent}
		rec, reserved := t.Split(r.Parent)
		inProgress := reserved && rec.InProgress
		committed := t.IsSplitParent(r.Parent)
		switch {
		case r.Step == splitter.StepPublished || (r.Step == splitter.StepHandoff && committed):
			d.Action, d.Done = RollForward, splitter.StepDone
			d.Delete = []routing.ShardID{r.Parent}
			d.Why = fmt.Sprintf("last record %s and table v%d commits the split", r.Step, t.Version())
		default:
			d.Action, d.Done = RollBack, splitter.StepAborted
			d.Cancel = inProgress
			d.Delete = slices.Clone(r.Children)
			if inProgress {
				for _, c := range rec.Children {
					if !slices.Contains(d.Delete, c.Shard) {
						d.Delete = append(d.Delete, c.Shard)
					}
				}
			}
			d.Why = fmt.Sprintf("last record %s and table v%d does not commit the split", r.Step, t.Version())
		}
		out = append(out, d)
	}
	return out
}

// Report says what recovery did.
type Report struct {
	Table     routing.Version
	Decisions []Decision
}

// Open recovers the data directory of opts and opens its node. initial is
// the table of a new index (used only if the directory has none).
func Open(opts storage.Options, initial *routing.Table, logger *zap.Logger) (*node.Node, *splitter.Journal, Report, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	var rep Report
	eng, err := storage.Open(opts)
	if err != nil {
		return nil, nil, rep, err
	}
	fail := func(err error) (*node.Node, *splitter.Journal, Report, error) {
		_ = eng.Close()
		return nil, nil, rep, fmt.Errorf("recovery: %s: %w", opts.Dir, err)
	}
	j, err := splitter.OpenJournal(eng)
	if err != nil {
		return fail(err)
	}
	t, err := node.LoadTable(eng)
	if err != nil {
		return fail(err)
	}
	if t != nil {
		if rep.Decisions, t, err = carryOut(eng, j, t, logger); err != nil {
			return fail(err)
		}
		if _, err := removeOrphans(eng, t, logger); err != nil {
			return fail(err)
		}
	} else if err := storesWithoutTable(eng); err != nil {
		return fail(err)
	}
	n, err := node.Open(node.Config{Engine: eng, Table: initial, Logger: logger})
	if err != nil {
		return fail(err)
	}
	rep.Table = n.Table().Version()
	for _, id := range n.Table().ActiveShards() {
		s, _ := n.ShardStore(id)
		if err := s.TrimLog(); err != nil {
			_ = n.Close()
			return nil, nil, rep, fmt.Errorf("recovery: trim operation log of shard %d: %w", id, err)
		}
	}
	return n, j, rep, nil
}

// carryOut executes the decisions and journals their completion.
func carryOut(eng *storage.Engine, j *splitter.Journal, t *routing.Table, logger *zap.Logger) ([]Decision, *routing.Table, error) {
	decisions := Decide(splitter.Last(j.Records()), t)
	for _, d := range decisions {
		logger.Info("recovering split", zap.Uint64("split", d.Split), zap.Stringer("action", d.Action), zap.String("why", d.Why))
		for _, id := range d.Delete {
			if slices.Contains(t.ActiveShards(), id) {
				return nil, nil, fmt.Errorf("split %d: refusing to delete shard %d, which table v%d names active", d.Split, id, t.Version())
			}
			if err := eng.DestroyShard(id); err != nil {
				return nil, nil, fmt.Errorf("split %d: %w", d.Split, err)
			}
		}
		if d.Cancel {
			next, err := routing.Apply(t, routing.Edit{Kind: routing.CancelSplit, Shard: d.Parent})
			if err != nil {
				return nil, nil, fmt.Errorf("split %d: %w", d.Split, err)
			}
			if err := node.PersistTable(eng, next); err != nil {
				return nil, nil, err
			}
			t = next
		}
		if err := j.Append(splitter.Record{Split: d.Split, Step: d.Done, Parent: d.Parent, Version: t.Version()}); err != nil {
			return nil, nil, err
		}
	}
	return decisions, t, nil
}
