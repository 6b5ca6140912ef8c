package node

import (
	"errors"
	"fmt"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// The placement checker: every document exactly once, on the shard the
// table names for it. It is the one copy recovery, baseline, the
// experiments, the tests and splitdemo use. A document is its _id and its
// routing value: one _id indexed with two routing values that reach two
// shards is two documents, as in OpenSearch.

// Scan calls fn for every document of an index, naming the shard it was
// found on (Node.Search without the version, for instance).
type Scan func(fn func(routing.ShardID, storage.Doc) error) error

// PlacementKind is the kind of a placement violation.
type PlacementKind uint8

const (
	// Duplicate: the document (its _id and routing value) was found again
	// after its first copy.
	Duplicate PlacementKind = iota + 1
	// Misplaced: the document is on a shard the table does not name for it.
	Misplaced
	// MisKeyed: the document is on the shard the table names, under a
	// routing key (or keyspace) other than the one the table computes for
	// it, so a routed get cannot find it. Counted as misplaced.
	MisKeyed
)

func (k PlacementKind) String() string {
	switch k {
	case Duplicate:
		return "duplicate"
	case Misplaced:
		return "misplaced"
	case MisKeyed:
		return "mis-keyed"
	}
	return fmt.Sprintf("PlacementKind(%d)", uint8(k))
}

// PlacementViolation is one document found where it must not be.
type PlacementViolation struct {
	Kind  PlacementKind
	ID    string
	Shard routing.ShardID // where this copy was found
	// Other is, for a duplicate, the shard of the first copy; for a
	// misplaced document, the shard the table names.
	Other routing.ShardID
	// For a mis-keyed document: the keyspace and key it is stored under
	// and the ones the table computes.
	Keyspace, WantKeyspace routing.ShardID
	Key, WantKey           routing.Key
}

func (v PlacementViolation) String() string {
	switch v.Kind {
	case Duplicate:
		return fmt.Sprintf("document %s is on shards %d and %d", v.ID, v.Other, v.Shard)
	case MisKeyed:
		return fmt.Sprintf("document %s is on shard %d under keyspace %d key %d, the table names keyspace %d key %d",
			v.ID, v.Shard, v.Keyspace, v.Key, v.WantKeyspace, v.WantKey)
	}
	return fmt.Sprintf("document %s is on shard %d, the table names %d", v.ID, v.Shard, v.Other)
}

// MaxPlacementViolations bounds PlacementReport.Violations.
const MaxPlacementViolations = 100

// PlacementReport is what CheckPlacement found.
type PlacementReport struct {
	Table      routing.Version // the table checked against
	Documents  int             // documents scanned, duplicates included
	Duplicates int             // copies found after a document's first
	Misplaced  int             // documents on a shard (or under a key) the table does not name for them
	// SharedIDs counts the documents found on a shard that holds another
	// document of their _id (under another routing value). A write keeps
	// one per _id in a shard; only a merge brings two together (one from
	// each source, as OpenSearch's shrink does), so it is not a violation
	// here: callers that made no such merge may require none.
	SharedIDs int
	// Violations are the first MaxPlacementViolations, in scan order.
	Violations []PlacementViolation
}

// OK reports whether every document was found once, where the table names.
func (r PlacementReport) OK() bool { return r.Duplicates == 0 && r.Misplaced == 0 }

// Err is nil if r is OK and otherwise an ErrPlacement naming the first
// violation and the counts.
func (r PlacementReport) Err() error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("%w: table v%d, %d duplicates, %d misplaced of %d documents; first: %s",
		ErrPlacement, r.Table, r.Duplicates, r.Misplaced, r.Documents, r.Violations[0])
}

func (r *PlacementReport) violate(v PlacementViolation) {
	if len(r.Violations) < MaxPlacementViolations {
		r.Violations = append(r.Violations, v)
	}
}

// ErrPlacement marks an index holding a document twice or on the wrong
// shard.
var ErrPlacement = errors.New("node: documents not placed as the table names")

// ErrTableChanged marks a placement check whose table changed during the
// scan, so the scan is not comparable with one table.
var ErrTableChanged = errors.New("node: table changed during the placement check")

// CheckPlacement scans an index and checks every document against table t:
// each (id, routing value) exactly once, on the shard t.Route names, under
// the keyspace and routing key t computes for it (else a routed get misses
// it); and it counts documents sharing their _id with another on the same
// shard (PlacementReport.SharedIDs). onDoc, if not nil, is
// called for every document scanned (duplicates and misplaced ones too);
// the Doc's slices are only valid during the call. The error is the scan's;
// violations are in the report.
func CheckPlacement(t *routing.Table, scan Scan, onDoc func(routing.ShardID, storage.Doc)) (PlacementReport, error) {
	r := PlacementReport{Table: t.Version()}
	type doc struct{ id, routing string }
	type idOn struct {
		id    string
		shard routing.ShardID
	}
	seen := map[doc]routing.ShardID{}
	onShard := map[idOn]int{}
	err := scan(func(shard routing.ShardID, d storage.Doc) error {
		r.Documents++
		if first, dup := seen[doc{d.ID, d.Routing}]; dup {
			r.Duplicates++
			r.violate(PlacementViolation{Kind: Duplicate, ID: d.ID, Shard: shard, Other: first})
		} else {
			seen[doc{d.ID, d.Routing}] = shard
			switch onShard[idOn{d.ID, shard}]++; onShard[idOn{d.ID, shard}] {
			case 1:
			case 2:
				r.SharedIDs += 2
			default:
				r.SharedIDs++
			}
		}
		p, want := t.Route(d.ID, d.Routing)
		switch key, ks := t.KeyOf(p), t.Keyspace(p.Root); {
		case want != shard:
			r.Misplaced++
			r.violate(PlacementViolation{Kind: Misplaced, ID: d.ID, Shard: shard, Other: want})
		case d.Key != key || d.Root != ks:
			r.Misplaced++
			r.violate(PlacementViolation{Kind: MisKeyed, ID: d.ID, Shard: shard, Other: want,
				Keyspace: d.Root, WantKeyspace: ks, Key: d.Key, WantKey: key})
		}
		if onDoc != nil {
			onDoc(shard, d)
		}
		return nil
	})
	return r, err
}

// CheckPlacement checks the node's documents against its current table (see
// the function CheckPlacement). It fails with ErrTableChanged if a table was
// published during the scan.
func (n *Node) CheckPlacement(onDoc func(routing.ShardID, storage.Doc)) (PlacementReport, error) {
	t := n.Table()
	var searched routing.Version
	r, err := CheckPlacement(t, func(fn func(routing.ShardID, storage.Doc) error) error {
		var err error
		searched, err = n.Search(fn)
		return err
	}, onDoc)
	if err != nil {
		return r, fmt.Errorf("node: placement check: %w", err)
	}
	if searched != t.Version() {
		return r, fmt.Errorf("%w: v%d to v%d", ErrTableChanged, t.Version(), searched)
	}
	return r, nil
}
