package experiment

import (
	"fmt"

	"github.com/shardsplit/shardsplit/internal/loadgen"
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

func (v *Verification) example(format string, args ...any) {
	if len(v.Examples) < 10 {
		v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
	}
}

// Verify scans the index and checks, against table t: every document is on
// the shard t names for it, exactly once; every id the load acknowledged is
// in the state of its last acknowledged write, or of the write in flight
// after it; every loaded document the load never touched is still there.
func Verify(t *routing.Table, s Searcher, d *Dataset, load *loadgen.Result) (Verification, error) {
	var v Verification
	found := map[string]storage.Doc{}
	err := s.Search(func(shard routing.ShardID, doc storage.Doc) error {
		v.Documents++
		if _, dup := found[doc.ID]; dup {
			v.Duplicates++
			v.example("%s found twice", doc.ID)
		}
		doc.Source = append([]byte(nil), doc.Source...)
		found[doc.ID] = doc
		if _, want := t.Route(doc.ID, doc.Routing); want != shard {
			v.Misplaced++
			v.example("%s on shard %d, table v%d names %d", doc.ID, shard, t.Version(), want)
		}
		return nil
	})
	if err != nil {
		return v, fmt.Errorf("experiment: verify: %w", err)
	}
	initial := d.InitialIDs()
	for id, st := range load.Model {
		v.Checked++
		doc, ok := found[id]
		if !stateMatches(st, doc, ok, hasID(initial, id)) {
			v.Lost++
			v.example("%s: found=%v, last acknowledged write deleted=%v acked=%v", id, ok, st.Deleted, st.Acked)
		}
	}
	for id := range initial {
		if _, touched := load.Model[id]; touched {
			continue
		}
		v.Checked++
		if _, ok := found[id]; !ok {
			v.Lost++
			v.example("loaded document %s is missing", id)
		}
	}
	for id := range found {
		if _, inModel := load.Model[id]; !inModel && !hasID(initial, id) {
			v.Unexpected++
			v.example("%s exists but was never written", id)
		}
	}
	return v, nil
}

func hasID(m map[string]string, id string) bool { _, ok := m[id]; return ok }

// stateMatches accepts the state of the last acknowledged write, or of the
// write in flight after it. An id never acknowledged keeps its loaded state.
func stateMatches(st *loadgen.State, doc storage.Doc, found, loaded bool) bool {
	ok := func(deleted bool, hash uint64) bool {
		if deleted {
			return !found
		}
		return found && loadgen.HashSource(doc.Source) == hash
	}
	var base bool
	switch {
	case st.Acked:
		base = ok(st.Deleted, st.Hash)
	case loaded:
		base = found // untouched by an acknowledged write: still the loaded document
	default:
		base = !found
	}
	if base {
		return true
	}
	if in := st.Inflight; in != nil {
		return ok(in.Delete, loadgen.HashSource(in.Source))
	}
	return false
}
