package service

import (
	"sort"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Shard states as _cat/shards shows them.
const (
	StateStarted      = "STARTED"
	StateSplitting    = "SPLITTING" // a parent being split in place (OpenSearch #21120)
	StateMerging      = "MERGING"   // a source of an in-place merge (our extension: OpenSearch has no merge)
	StateInitializing = "INITIALIZING"
	StateUnassigned   = "UNASSIGNED"
)

// ShardRow is one shard copy.
type ShardRow struct {
	Index   string
	UUID    string
	Shard   routing.ShardID
	Primary bool
	State   string
	Docs    int64 // -1: unknown (unassigned)
	Bytes   int64 // -1: unknown
	// On a cluster: the copy's node ("" unassigned) and allocation id, its
	// sequence-number checkpoints (-1 unknown), and why it is unassigned.
	Node, AllocationID                        string
	SeqMax, LocalCheckpoint, GlobalCheckpoint int64
	UnassignedReason                          string
}

// ShardRows returns one row per shard copy of the indices: active primaries
// STARTED (SPLITTING while an in-place split of them runs, MERGING while an
// in-place merge of them runs), the children of a running split and the
// target of a running merge INITIALIZING, and number_of_replicas
// UNASSIGNED replicas per primary (one node cannot host them).
func (s *Service) ShardRows(expr string) ([]ShardRow, error) {
	s.syncCluster()
	names, err := s.Resolve(expr, IndicesOptions{})
	if err != nil {
		return nil, err
	}
	if s.cl != nil {
		return s.clusterShardRows(names)
	}
	var rows []ShardRow
	for _, name := range names {
		ix, ok := s.index(name)
		m, mok := s.Meta(name)
		if !ok || !mok {
			continue
		}
		replicas := atoi(m.Settings, SettingReplicas, 0)
		t, docs, err := ix.countDocs()
		if err != nil {
			if !s.owns(name, ix) {
				continue // deleted while it was counted
			}
			return nil, err
		}
		states := map[routing.ShardID]string{}
		var children []routing.ShardID // and merge targets
		for _, p := range t.InProgress() {
			states[p] = StateSplitting
			sp, _ := t.Split(p)
			for _, c := range sp.Children {
				children = append(children, c.Shard)
			}
		}
		for _, target := range t.MergesInProgress() {
			m, _ := t.Merge(target)
			for _, id := range m.SourceIDs() {
				states[id] = StateMerging
			}
			children = append(children, target)
		}
		add := func(id routing.ShardID, state string, withReplicas bool) {
			row := ShardRow{Index: name, UUID: m.UUID, Shard: id, Primary: true, State: state, Docs: docs[id], Bytes: ix.shardBytes(id)}
			if state == StateInitializing {
				row.Docs = -1 // being built: OpenSearch shows no count either
			}
			rows = append(rows, row)
			if withReplicas {
				for range replicas {
					rows = append(rows, ShardRow{Index: name, UUID: m.UUID, Shard: id, State: StateUnassigned, Docs: -1, Bytes: -1})
				}
			}
		}
		for _, id := range t.ActiveShards() {
			st := StateStarted
			if ms, ok := states[id]; ok {
				st = ms
			}
			add(id, st, true)
		}
		for _, id := range children {
			add(id, StateInitializing, false)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Index != rows[j].Index {
			return rows[i].Index < rows[j].Index
		}
		return rows[i].Shard < rows[j].Shard
	})
	return rows, nil
}

// countDocs counts each active shard's documents through node.Search, which
// holds every shard against retirement while it reads (a store read
// directly could be destroyed under the reader by a split's cleanup). It
// returns the table the count was made under, retrying a few times if a
// split published meanwhile.
func (ix *Index) countDocs() (*routing.Table, map[routing.ShardID]int64, error) {
	for attempt := 0; ; attempt++ {
		t := ix.node.Table()
		docs := map[routing.ShardID]int64{}
		v, err := ix.node.Search(func(id routing.ShardID, _ storage.Doc) error { docs[id]++; return nil })
		if err != nil {
			return nil, nil, AsError(err)
		}
		if v == t.Version() || attempt == 3 {
			return t, docs, nil
		}
	}
}

// shardBytes is the size of a shard's store directory (per-shard layout;
// 0 in the shared layout, where shards share one store). It reads the
// filesystem only, so a store deleted meanwhile just counts less.
func (ix *Index) shardBytes(id routing.ShardID) int64 {
	if ix.node.Engine().Layout() != storage.LayoutPerShard {
		return 0
	}
	u, err := storage.DirUsage(ix.node.Engine().ShardDir(id))
	if err != nil {
		return 0
	}
	return u.Live
}

// IndexStats summarises an index for _cat/indices and health.
type IndexStats struct {
	Name      string
	UUID      string
	Health    string // green, yellow
	Status    string // open
	Primaries int
	Replicas  int
	Docs      int64
	Bytes     int64 // all copies (the primaries: replicas are unassigned)
	PriBytes  int64
	// Active and Initializing count primaries (active includes splitting
	// parents and merging sources; initializing: the children of running
	// splits and the targets of running merges).
	Active, Initializing, Unassigned int
}

// Stats returns per-index statistics.
func (s *Service) Stats(expr string) ([]IndexStats, error) {
	rows, err := s.ShardRows(expr)
	if err != nil {
		return nil, err
	}
	names, err := s.Resolve(expr, IndicesOptions{})
	if err != nil {
		return nil, err
	}
	byName := map[string]*IndexStats{}
	var out []IndexStats
	for _, n := range names {
		m, ok := s.Meta(n)
		if !ok {
			continue
		}
		byName[n] = &IndexStats{Name: n, UUID: m.UUID, Health: "green", Status: "open", Replicas: atoi(m.Settings, SettingReplicas, 0)}
	}
	for _, r := range rows {
		st := byName[r.Index]
		if st == nil {
			continue
		}
		// A single node's rows are its primaries and its unassigned
		// replicas; a cluster's are every copy.
		primary := r.Primary || s.cl == nil
		switch r.State {
		case StateStarted, StateSplitting, StateMerging:
			st.Active++
			if primary {
				st.Primaries++
				st.Docs += r.Docs
				st.PriBytes += r.Bytes
			}
			st.Bytes += r.Bytes
		case StateInitializing:
			st.Initializing++
			if s.cl != nil && r.Primary {
				st.Health = worseHealth(st.Health, "red")
			}
		case StateUnassigned:
			st.Unassigned++
			if s.cl != nil && r.Primary {
				st.Health = worseHealth(st.Health, "red")
			} else {
				st.Health = worseHealth(st.Health, "yellow")
			}
		}
	}
	for _, n := range names {
		if st := byName[n]; st != nil {
			out = append(out, *st)
		}
	}
	return out, nil
}

// worseHealth is the worse of two health statuses.
func worseHealth(a, b string) string {
	rank := map[string]int{"green": 0, "yellow": 1, "red": 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}
