package replication

import (
	"fmt"
	"slices"

	"github.com/shardsplit/shardsplit/storage"
)

// memStore is Store in memory, for the protocol's tests: documents by key,
// the retained history, and undo records above the global checkpoint.
type memStore struct {
	docs    map[string]storage.Doc
	history []Op // retained, in order
	undo    map[int64]undoRecord
	lcp     int64
	gcp     int64
}

type undoRecord struct {
	key  string
	prev *storage.Doc
}

func newMemStore() *memStore {
	return &memStore{docs: map[string]storage.Doc{}, undo: map[int64]undoRecord{}, lcp: NoOpsPerformed, gcp: NoOpsPerformed}
}

func memKey(d storage.Op) string { return fmt.Sprintf("%d/%d/%s", d.Root, d.Key, d.ID) }

func (s *memStore) LocalCheckpoint() int64 { return s.lcp }

func (s *memStore) Apply(ops []Op, undo bool) error {
	for i, op := range ops {
		if op.Seq != s.lcp+1+int64(i) {
			return fmt.Errorf("memstore: operation %d after local checkpoint %d", op.Seq, s.lcp+int64(i))
		}
	}
	for _, op := range ops {
		k := memKey(op.Doc)
		if undo {
			var prev *storage.Doc
			if d, ok := s.docs[k]; ok {
				prev = &d
			}
			s.undo[op.Seq] = undoRecord{key: k, prev: prev}
		}
		switch op.Doc.Kind {
		case storage.OpNoop:
		case storage.OpDelete:
			delete(s.docs, k)
		default:
			s.docs[k] = storage.Doc{Root: op.Doc.Root, Key: op.Doc.Key, ID: op.Doc.ID, Routing: op.Doc.Routing,
				Seq: uint64(op.Seq), Source: slices.Clone(op.Doc.Source)}
		}
		s.history = append(s.history, op)
		s.lcp = op.Seq
	}
	return nil
}

func (s *memStore) History(from, to int64, fn func(Op) error) error {
	for _, op := range s.history {
		if op.Seq >= from && op.Seq <= to {
			if err := fn(op); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *memStore) Trim(seq int64) error {
	for s.lcp > seq {
		u, ok := s.undo[s.lcp]
		if !ok {
			return fmt.Errorf("memstore: no undo record for %d", s.lcp)
		}
		if u.prev == nil {
			delete(s.docs, u.key)
		} else {
			s.docs[u.key] = *u.prev
		}
		delete(s.undo, s.lcp)
		s.history = slices.DeleteFunc(s.history, func(op Op) bool { return op.Seq == s.lcp })
		s.lcp--
	}
	return nil
}

func (s *memStore) SetGlobalCheckpoint(gcp int64) error {
	s.gcp = max(s.gcp, gcp)
	for seq := range s.undo {
		if seq <= s.gcp {
			delete(s.undo, seq)
		}
	}
	return nil
}

func (s *memStore) GlobalCheckpoint() int64 { return s.gcp }

func (s *memStore) TrimHistory(seq int64) error {
	s.history = slices.DeleteFunc(s.history, func(op Op) bool { return op.Seq <= seq })
	return nil
}

func (s *memStore) Get(op storage.Op) (storage.Doc, bool, error) {
	d, ok := s.docs[memKey(op)]
	return d, ok, nil
}
