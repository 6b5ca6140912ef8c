package clusternode

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"

	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// fileStore is a CopyStore for the node's tests: documents and history in
// memory, the whole of it rewritten to one file in its directory after
// every change (so a crash keeps what was applied, and a checkpoint is a
// copy of that file).
type fileStore struct {
	fs   storage.FS
	dir  string
	data fileStoreData
}

type fileStoreData struct {
	Docs    map[string]storage.Doc `json:"docs"`
	History []replication.Op       `json:"history"`
	Undo    map[int64][]undoEntry  `json:"undo"`
	LCP     int64                  `json:"lcp"`
	GCP     int64                  `json:"gcp"`
}

type undoEntry struct {
	Key  string       `json:"key"`
	Prev *storage.Doc `json:"prev"`
}

const fileStoreName = "store.json"

type fileStores struct{ fs storage.FS }

func (o fileStores) RecoveryDir(dir string, shard routing.ShardID) string { return dir }

func (o fileStores) Open(dir string, shard, keyspace routing.ShardID, spans []routing.Span) (CopyStore, error) {
	s := &fileStore{fs: o.fs, dir: dir, data: fileStoreData{Docs: map[string]storage.Doc{}, Undo: map[int64][]undoEntry{},
		LCP: replication.NoOpsPerformed, GCP: replication.NoOpsPerformed}}
	f, err := o.fs.Open(filepath.Join(dir, fileStoreName))
	if err != nil {
		return s, s.save()
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &s.data); err != nil {
		return nil, err
	}
	if s.data.Undo == nil {
		s.data.Undo = map[int64][]undoEntry{}
	}
	return s, nil
}

func (s *fileStore) save() error {
	b, _ := json.Marshal(s.data)
	tmp := filepath.Join(s.dir, fileStoreName+".tmp")
	f, err := s.fs.Create(tmp, storage.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return s.fs.Rename(tmp, filepath.Join(s.dir, fileStoreName))
}

func key(d storage.Op) string { return fmt.Sprintf("%d/%d/%s", d.Root, d.Key, d.ID) }

func (s *fileStore) LocalCheckpoint() int64 { return s.data.LCP }

func (s *fileStore) Apply(ops []replication.Op, undo bool) error {
	for i, op := range ops {
		if op.Seq != s.data.LCP+1+int64(i) {
			return fmt.Errorf("filestore: operation %d after %d", op.Seq, s.data.LCP+int64(i))
		}
	}
	for _, op := range ops {
		k := key(op.Doc)
		if undo {
			var prev *storage.Doc
			if d, ok := s.data.Docs[k]; ok {
				prev = &d
			}
			s.data.Undo[op.Seq] = []undoEntry{{Key: k, Prev: prev}}
		}
		switch op.Doc.Kind {
		case storage.OpNoop:
		case storage.OpDelete:
			delete(s.data.Docs, k)
		default:
			s.data.Docs[k] = storage.Doc{Root: op.Doc.Root, Key: op.Doc.Key, ID: op.Doc.ID, Routing: op.Doc.Routing,
				Seq: uint64(op.Seq) + 1, Source: op.Doc.Source}
		}
		s.data.History = append(s.data.History, op)
		s.data.LCP = op.Seq
	}
	return s.save()
}

func (s *fileStore) History(from, to int64, fn func(replication.Op) error) error {
	for _, op := range s.data.History {
		if op.Seq >= from && op.Seq <= to {
			if err := fn(op); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *fileStore) Trim(seq int64) error {
	for s.data.LCP > seq {
		us, ok := s.data.Undo[s.data.LCP]
		if !ok {
			return fmt.Errorf("filestore: no undo record for %d", s.data.LCP)
		}
		for _, u := range us {
			if u.Prev == nil {
				delete(s.data.Docs, u.Key)
			} else {
				s.data.Docs[u.Key] = *u.Prev
			}
		}
		delete(s.data.Undo, s.data.LCP)
		last := s.data.LCP
		s.data.History = slices.DeleteFunc(s.data.History, func(op replication.Op) bool { return op.Seq == last })
		s.data.LCP--
	}
	return s.save()
}

func (s *fileStore) GlobalCheckpoint() int64 { return s.data.GCP }

func (s *fileStore) SetGlobalCheckpoint(gcp int64) error {
	s.data.GCP = max(s.data.GCP, gcp)
	for seq := range s.data.Undo {
		if seq <= s.data.GCP {
			delete(s.data.Undo, seq)
		}
	}
	return nil
}

func (s *fileStore) TrimHistory(seq int64) error {
	s.data.History = slices.DeleteFunc(s.data.History, func(op replication.Op) bool { return op.Seq <= seq })
	return nil
}

func (s *fileStore) Get(op storage.Op) (storage.Doc, bool, error) {
	d, ok := s.data.Docs[key(op)]
	return d, ok, nil
}

func (s *fileStore) Scan(fn func(storage.Doc) error) error {
	keys := make([]string, 0, len(s.data.Docs))
	for k := range s.data.Docs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := fn(s.data.Docs[k]); err != nil {
			return err
		}
	}
	return nil
}

func (s *fileStore) Checkpoint(dir string) (int64, error) {
	if err := s.fs.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	snap := &fileStore{fs: s.fs, dir: dir, data: s.data}
	snap.data.Undo = map[int64][]undoEntry{}
	return s.data.LCP, snap.save()
}

func (s *fileStore) Close() error { return nil }

func (o fileStores) OpenChild(dir string, from CopyStore, parent, child, keyspace routing.ShardID, span routing.Span) (CopyStore, error) {
	if _, err := from.Checkpoint(dir); err != nil {
		return nil, err
	}
	cs, err := o.Open(dir, child, keyspace, []routing.Span{span})
	if err != nil {
		return nil, err
	}
	s := cs.(*fileStore)
	for k, d := range s.data.Docs {
		if d.Root != keyspace || !span.Contains(d.Key) {
			delete(s.data.Docs, k)
		}
	}
	s.data.History = nil
	return s, s.save()
}
