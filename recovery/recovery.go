// Package recovery brings a data directory back to a state where every
// split either completed or never happened, after a crash at any instant.
//
// Decide is pure: from the journal and the persisted routing table (the
// commit point) it decides to roll each unfinished split back or forward
// and which shard stores to delete. Open is the thin driver: it opens the
// engine, reads the journal and the table, carries out the decisions,
// records their completion, trims every operation log (no split holds one
// after a restart) and opens the node. Every action is idempotent, so a
// crash during recovery is just another crash point: running Open again
// finishes the job.
//
// Decision table (last journal record of an unfinished split → action):
//
//	begin, reserved, aborting   roll back: cancel the reservation if the table has it; delete its children
//	handoff                     the table decides: the parent is a committed split parent → roll forward
//	                            (delete the parent), else roll back as above
//	published                   roll forward: delete the parent's store
//	done, aborted               nothing
//
// Merge records (splitter.KindMerge) follow the same table, with the
// target for the children and the sources for the parent:
//
//	begin, reserved, aborting   roll back: cancel the reservation (CancelMerge) if the table has it
//	                            for exactly these sources; delete the target
//	handoff                     the table decides: it commits the merge of exactly these sources into
//	                            the target → roll forward (delete the sources), else roll back
//	published                   roll forward: delete the sources' stores
//	done, aborted               nothing
//
// A split or merge is superseded when a later split (a higher split id) has records
// in the journal. Splits run one at a time, so a superseded split had ended
// in memory before the later one began, whatever its last durable record
// says: its reservation was already cancelled or committed, and its child
// ids may since have been reused. Recovery never acts on it as if it were
// in flight: it rolls forward only when its last record is handoff or
// published, the table commits its parent and no later split that reserved
// (its records name children) names the same parent (which could only have
// begun if this one did not commit; a later split refused before reserving,
// because this one was unfinished, consumed nothing);
// otherwise it is recorded aborted and nothing is undone (stores it left
// behind that no table names are orphans, removed as such), unless the
// table still holds a reservation naming exactly its children. Decisions
// are made in split order against the table as the earlier decisions leave
// it.
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

// Decision is the plan for one unfinished split or merge.
type Decision struct {
	ID      uint64 // the operation; 0: a reservation in the table that no journal record accounts for
	Kind    splitter.Kind
	Sources []routing.ShardID // a split's parent, a merge's sources
	Targets []routing.ShardID // a split's children, a merge's target (none: never reserved)
	Action  Action
	// Cancel: apply CancelSplit (of a merge: CancelMerge of the target) to
	// the table (the reservation is still in it).
	Cancel bool
	// Delete: shard stores to delete.
	Delete []routing.ShardID
	// Done is the journal stage that records the decision carried out.
	Done splitter.Stage
	Why  string
}

// Decide returns a decision for every unfinished split in the journal's
// records (oldest first), given the persisted table.
func Decide(records []splitter.Record, t *routing.Table) []Decision {
	last := splitter.Last(records)
	var out []Decision
	for i, r := range last {
		if r.Stage.Finished() {
			continue
		}
		later := laterSplits(last[i+1:], r)
		var d Decision
		if r.Kind == splitter.KindMerge {
			d = decideMerge(r, t, later)
		} else {
			d = decide(r, t, later)
		}
		if d.Cancel {
			t = cancelled(t, &d)
		}
		out = append(out, d)
	}
	// A reservation no unfinished split accounts for (a table whose rename
	// reached the disk although the write reported failure, after which
	// the split aborted and said so) is rolled back too: no split runs
	// after recovery, so nothing may stay in progress.
	for _, p := range t.InProgress() {
		rec, _ := t.Split(p)
		d := Decision{Sources: []routing.ShardID{p}, Targets: childIDs(rec), Action: RollBack, Cancel: true, Delete: childIDs(rec),
			Why: fmt.Sprintf("table v%d reserves a split of %d that no unfinished journal record accounts for", t.Version(), p)}
		t = cancelled(t, &d)
		out = append(out, d)
	}
	for _, target := range t.MergesInProgress() {
		d := Decision{Kind: splitter.KindMerge, Targets: []routing.ShardID{target}, Action: RollBack, Cancel: true, Delete: []routing.ShardID{target},
			Why: fmt.Sprintf("table v%d reserves a merge into %d that no unfinished journal record accounts for", t.Version(), target)}
		if rec, ok := t.Merge(target); ok {
			d.Sources = childIDs(routing.SplitRecord{Children: rec.Sources})
		}
		t = cancelled(t, &d)
		out = append(out, d)
	}
	return out
}

// cancelled returns t after the decision's cancel, as carryOut will write
// it (see cancelTable); a table that refuses is noted in the decision and
// left for carryOut to report.
func cancelled(t *routing.Table, d *Decision) *routing.Table {
	next, err := cancelTable(t, d.cancelEdit())
	if err != nil {
		d.Why += fmt.Sprintf("; CancelSplit refused: %v", err)
		return t
	}
	return next
}

// cancelTable applies a cancel two versions up: the version in
// between may have been published in memory before a crash (the commit of
// a handoff that never became durable) and reached routers, which adopt
// only strictly newer tables; no version number is ever reused.
func cancelTable(t *routing.Table, cancel routing.Edit) (*routing.Table, error) {
	bumped, err := routing.Bump(t)
	if err != nil {
		return nil, err
	}
	return routing.Apply(bumped, cancel)
}

// cancelEdit is the edit that forgets the decision's reservation.
func (d Decision) cancelEdit() routing.Edit {
	if d.Kind == splitter.KindMerge {
		return routing.Edit{Kind: routing.CancelMerge, Shard: d.Targets[0]}
	}
	return routing.Edit{Kind: routing.CancelSplit, Shard: d.Sources[0]}
}

// doneRecord is the journal record that says the decision was carried out.
func (d Decision) doneRecord(v routing.Version) splitter.Record {
	return splitter.Record{ID: d.ID, Kind: d.Kind, Stage: d.Done, Sources: d.Sources, Targets: d.Targets, Version: v}
}

// later says which splits and merges came after one in the journal.
type later struct {
	any        bool // some operation began after it: it had ended in memory
	sameParent bool // a later operation consumed one of its inputs (a split's parent, a merge's sources): it did not commit
}

func laterSplits(after []splitter.Record, r splitter.Record) later {
	var l later
	for _, o := range after {
		if o.ID > r.ID {
			l.any = true
			if !reserved(o) {
				// It never reserved (refused because this one was
				// unfinished, or cancelled before): it consumed nothing.
				continue
			}
			for _, id := range o.Sources {
				l.sameParent = l.sameParent || slices.Contains(r.Sources, id)
			}
		}
	}
	return l
}

// reserved reports whether an operation whose last record is r made its
// reservation: the machine names the targets in every record from the
// reservation on, its end included.
func reserved(r splitter.Record) bool { return len(r.Targets) > 0 }

// decideMerge is the decision table for one merge's last record.
func decideMerge(r splitter.Record, t *routing.Table, l later) Decision {
	d := Decision{ID: r.ID, Kind: splitter.KindMerge, Targets: slices.Clone(r.Targets), Sources: slices.Clone(r.Sources)}
	target := routing.ShardID(0)
	if reserved(r) {
		target = r.Targets[0]
	} else if !l.any {
		// A begin record: the reservation, if it was made, is the
		// in-progress merge of exactly these sources.
		if rec, ok := t.MergeOf(r.Sources[0]); ok && sameIDs(rec.SourceIDs(), r.Sources) {
			target = rec.Target
		}
	}
	rec, ok := t.Merge(target)
	ours := ok && target != 0 && sameIDs(rec.SourceIDs(), r.Sources)
	mine := ours && rec.InProgress
	committed := ours && !rec.InProgress && !l.sameParent &&
		(r.Stage == splitter.StagePublished || r.Stage == splitter.StageHandoff)
	switch {
	case committed:
		d.Action, d.Done = RollForward, splitter.StageDone
		d.Delete = slices.Clone(r.Sources)
		d.Why = fmt.Sprintf("last record %s and table v%d commits the merge into %d", r.Stage, t.Version(), target)
	case l.any && !mine:
		d.Action, d.Done = RollBack, splitter.StageAborted
		d.Why = fmt.Sprintf("last record %s, superseded by a later operation: it had ended before that one began and its ids may be reused; nothing to undo", r.Stage)
	default:
		d.Action, d.Done = RollBack, splitter.StageAborted
		if !l.any && reserved(r) {
			d.Delete = []routing.ShardID{target}
		}
		if mine {
			d.Cancel, d.Targets = true, []routing.ShardID{target}
			if !slices.Contains(d.Delete, target) {
				d.Delete = append(d.Delete, target)
			}
		}
		d.Why = fmt.Sprintf("last record %s and table v%d does not commit the merge", r.Stage, t.Version())
	}
	return d
}

// sameIDs reports whether two id lists hold the same ids, in any order.
func sameIDs(a, b []routing.ShardID) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// decide is the decision table for one split's last record.
func decide(r splitter.Record, t *routing.Table, l later) Decision {
	parent := r.Sources[0]
	d := Decision{ID: r.ID, Sources: []routing.ShardID{parent}, Targets: slices.Clone(r.Targets)}
	rec, reserved := t.Split(parent)
	inProgress := reserved && rec.InProgress
	// The table's reservation of the parent is this split's when the record
	// names its children, or when no later split could have made it.
	mine := inProgress && (!l.any || slices.Equal(childIDs(rec), r.Targets))
	committed := t.IsSplitParent(parent) && !l.sameParent &&
		(r.Stage == splitter.StagePublished || r.Stage == splitter.StageHandoff)
	switch {
	case committed:
		d.Action, d.Done = RollForward, splitter.StageDone
		d.Delete = []routing.ShardID{parent}
		d.Why = fmt.Sprintf("last record %s and table v%d commits the split", r.Stage, t.Version())
	case l.any && !mine:
		d.Action, d.Done = RollBack, splitter.StageAborted
		d.Why = fmt.Sprintf("last record %s, superseded by a later split: it had ended before that one began and its ids may be reused; nothing to undo", r.Stage)
	default:
		d.Action, d.Done = RollBack, splitter.StageAborted
		if !l.any {
			d.Delete = slices.Clone(r.Targets)
		}
		if mine {
			d.Cancel = true
			for _, c := range childIDs(rec) {
				if !slices.Contains(d.Delete, c) {
					d.Delete = append(d.Delete, c)
				}
			}
		}
		d.Why = fmt.Sprintf("last record %s and table v%d does not commit the split", r.Stage, t.Version())
	}
	return d
}

// childIDs returns a split record's child ids in table order.
func childIDs(rec routing.SplitRecord) []routing.ShardID {
	ids := make([]routing.ShardID, len(rec.Children))
	for i, c := range rec.Children {
		ids[i] = c.Shard
	}
	return ids
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
		s, err := n.Store(id)
		if err == nil {
			err = s.TrimLog()
		}
		if err != nil {
			_ = n.Close()
			return nil, nil, rep, fmt.Errorf("recovery: trim operation log of shard %d: %w", id, err)
		}
	}
	return n, j, rep, nil
}

// carryOut executes the decisions and journals their completion.
func carryOut(eng *storage.Engine, j *splitter.Journal, t *routing.Table, logger *zap.Logger) ([]Decision, *routing.Table, error) {
	decisions := Decide(j.Records(), t)
	for _, d := range decisions {
		logger.Info("recovering split or merge", zap.Uint64("op", d.ID), zap.Stringer("kind", d.Kind), zap.Stringer("action", d.Action), zap.String("why", d.Why))
		if d.Action == RollBack {
			// The shards that own the keys again keep numbering above every
			// write the deleted ones took (INV-11; shared layout).
			for _, id := range d.Sources {
				if err := eng.RaiseSeqTo(id, d.Delete); err != nil {
					return nil, nil, fmt.Errorf("%s %d: %w", d.Kind, d.ID, err)
				}
			}
		}
		for _, id := range d.Delete {
			if slices.Contains(t.ActiveShards(), id) {
				return nil, nil, fmt.Errorf("%s %d: refusing to delete shard %d, which table v%d names active", d.Kind, d.ID, id, t.Version())
			}
			if err := eng.DestroyShard(id); err != nil {
				return nil, nil, fmt.Errorf("%s %d: %w", d.Kind, d.ID, err)
			}
		}
		if d.Cancel {
			next, err := cancelTable(t, d.cancelEdit())
			if err != nil {
				return nil, nil, fmt.Errorf("%s %d: %w", d.Kind, d.ID, err)
			}
			if err := node.PersistTable(eng, next); err != nil {
				return nil, nil, err
			}
			t = next
		}
		if d.ID == 0 {
			continue // a reservation without a journal record: nothing to record
		}
		if err := j.Append(d.doneRecord(t.Version())); err != nil {
			return nil, nil, err
		}
	}
	return decisions, t, nil
}
