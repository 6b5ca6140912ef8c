package recovery

import (
	"fmt"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// CheckReport is what the invariant checker found.
type CheckReport struct {
	TableVersion routing.Version `json:"table_version"`
	Shards       int             `json:"active_shards"`
	Documents    int             `json:"documents"`
	Violations   []string        `json:"violations"`
}

// OK reports whether every invariant holds.
func (r CheckReport) OK() bool { return len(r.Violations) == 0 }

func (r *CheckReport) violate(format string, args ...any) {
	if len(r.Violations) < 100 {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

// Check verifies a recovered node: the table is valid (INV-1..5m) with no
// split or merge in progress; the journal has no unfinished split; every store holds
// only keys of its span (INV-6); every document is on the shard the table
// names, in exactly one live shard; every shard's sequence number is at
// least that of every document on it (INV-11). docs, if not nil, receives every
// document found (for callers that check contents).
func Check(n *node.Node, j *splitter.Journal, docs func(routing.ShardID, storage.Doc)) CheckReport {
	t := n.Table()
	r := CheckReport{TableVersion: t.Version(), Shards: len(t.ActiveShards())}
	if err := t.Validate(); err != nil {
		r.violate("table: %v", err)
	}
	if ip := t.InProgress(); len(ip) != 0 {
		r.violate("table v%d has splits in progress after recovery: %v", t.Version(), ip)
	}
	if ip := t.MergesInProgress(); len(ip) != 0 {
		r.violate("table v%d has merges in progress after recovery: %v", t.Version(), ip)
	}
	if j != nil {
		for _, rec := range splitter.Last(j.Records()) {
			if !rec.Stage.Finished() {
				r.violate("journal: %s %d left at %s", rec.Kind, rec.ID, rec.Stage)
			}
			if rec.Stage == splitter.StageDone && !committed(t, rec) {
				r.violate("journal: %s %d of %v into %v is done but table v%d does not record it", rec.Kind, rec.ID, rec.Sources, rec.Targets, t.Version())
			}
		}
	}
	for _, id := range t.ActiveShards() {
		s, ok := n.ShardStore(id)
		if !ok {
			r.violate("shard %d is active but has no store", id)
			continue
		}
		o, _ := t.Shard(id)
		// A keep-all child holds foreign keys until its cleanup ends
		// (storage/foreign.go); they are never read (every read is bounded
		// by the table's span), but only the durable marker excuses them (INV-10).
		if pending, err := s.ForeignPending(); err != nil || pending {
			if err != nil {
				r.violate("shard %d: %v", id, err)
			}
			continue
		}
		// Every keyspace, not only the root's span: in partition mode
		// every root shares keyspace 0, in opensearch mode each has its own.
		if n.Engine().Layout() == storage.LayoutShared {
			continue
		}
		switch k, err := s.CountKeysOutside(o.Span); {
		case err != nil:
			r.violate("shard %d: count keys outside its span: %v", id, err)
		case k != 0:
			r.violate("shard %d holds %d keys outside its span %s of keyspace %d", id, k, o.Span, t.Keyspace(o.Root))
		}
	}
	// INV-11: a shard numbers its next write above every document it holds
	// (a handoff that raised a child's or a merge target's sequence number
	// in memory only broke it across a restart).
	type top struct {
		seq uint64
		id  string
	}
	tops := map[routing.ShardID]top{}
	p, err := n.CheckPlacement(func(id routing.ShardID, d storage.Doc) {
		if d.Seq > tops[id].seq {
			tops[id] = top{d.Seq, d.ID}
		}
		if docs != nil {
			docs(id, d)
		}
	})
	for _, id := range t.ActiveShards() {
		if s, ok := n.ShardStore(id); ok && tops[id].seq > s.Seq() {
			r.violate("shard %d's sequence number %d is below that of its document %q (%d)", id, s.Seq(), tops[id].id, tops[id].seq)
		}
	}
	r.Documents = p.Documents
	for _, v := range p.Violations {
		r.violate("%s (table v%d)", v, t.Version())
	}
	if dropped := p.Duplicates + p.Misplaced - len(p.Violations); dropped > 0 {
		r.violate("%d more documents duplicated or misplaced", dropped)
	}
	if err != nil {
		r.violate("search: %v", err)
	}
	return r
}

// committed reports whether t records the commit of a done record's
// operation: a split of its parent, or a merge into its target.
func committed(t *routing.Table, rec splitter.Record) bool {
	if rec.Kind == splitter.KindMerge {
		if len(rec.Targets) != 1 {
			return false
		}
		m, ok := t.Merge(rec.Targets[0])
		return ok && !m.InProgress
	}
	return t.IsSplitParent(rec.Sources[0])
}
