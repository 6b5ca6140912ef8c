package experiment

import (
	"fmt"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Searcher scans every document of an index once, naming its shard.
type Searcher interface {
	Search(fn func(routing.ShardID, storage.Doc) error) error
}

// Verification compares an index with the load's model.
type Verification struct {
	Documents  int // documents found
	Checked    int // ids whose state was checked
	Lost       int // acknowledged writes (or untouched loaded documents) missing or stale
	Duplicates int // documents found on more than one shard
	Misplaced  int // documents on a shard the table does not name for them
	Unexpected int // documents that should not exist
	Examples   []string
}

// OK reports whether nothing was lost, duplicated, misplaced or unexpected.
func (v Verification) OK() bool {
	return v.Lost == 0 && v.Duplicates == 0 && v.Misplaced == 0 && v.Unexpected == 0
}

const maxExamples = 10

func (v *Verification) example(s fmt.Stringer) {
	if len(v.Examples) < maxExamples {
		v.Examples = append(v.Examples, s.String())
	}
}

// Verify scans the index and checks, against table t, with
// node.CheckPlacement: every document is on the shard t names for it,
// exactly once. Then, with the load's model (load.Model, into which it loads
// the dataset's documents as their initial state): every id is in a state
// the model allows at the load's end — its last acknowledged write or a
// write that may have landed after it, and a loaded document the load never
// acknowledged a write for is still there, with the source it was loaded
// with.
func Verify(t *routing.Table, s Searcher, d *Dataset, load *loadgen.Result) (Verification, error) {
	var v Verification
	found := map[string]model.Value{}
	p, err := node.CheckPlacement(t, s.Search, func(_ routing.ShardID, doc storage.Doc) {
		found[doc.ID] = model.Doc(doc.Source)
	})
	if err != nil {
		return v, fmt.Errorf("experiment: verify: %w", err)
	}
	v.Documents, v.Duplicates, v.Misplaced = p.Documents, p.Duplicates, p.Misplaced
	for _, x := range p.Violations {
		v.example(x)
	}
	m := load.Model
	// Each loaded document's own source, drawn again from the load's seed:
	// loaded as AnyDoc, a split or merge that rewrote a document the load
	// never touched (a merge copies the smaller sources' documents) could
	// change its contents unseen.
	d.InitialDocs(func(id string, digest uint64) { m.Load(id, model.DocDigest(digest)) })
	r, err := m.Check(m.Latest(), found)
	if err != nil {
		return v, fmt.Errorf("experiment: verify: %w", err)
	}
	v.Checked, v.Lost, v.Unexpected = r.Checked, r.Lost+r.Wrong, r.Unexpected
	for _, x := range r.Mismatches {
		v.example(x)
	}
	return v, nil
}
