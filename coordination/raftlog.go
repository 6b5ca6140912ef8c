package coordination

import (
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/shardsplit/shardsplit/storage"
)

// raftLog is raft's storage: an in-memory raft.MemoryStorage that raft
// reads, in front of the node's KV store that makes it durable. Every Ready
// is written to the KV store (synced) before its messages leave the node
// and before its entries reach the memory storage, which is the order raft
// requires (raft's doc.go, "the application must ... persist").
//
// Keys: "raft/hs" the hard state, "raft/snap" the last snapshot (its
// metadata and the cluster state it holds), "raft/e/<index>" each entry
// above the snapshot.
type raftLog struct {
	kv  *storage.KV
	mem *raft.MemoryStorage
}

var (
	keyHardState = []byte("raft/hs")
	keySnapshot  = []byte("raft/snap")
	keyEntryLo   = []byte("raft/e/")
	keyEntryHi   = []byte("raft/e0") // '0' follows '/'
)

func entryKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), keyEntryLo...), index)
}

// openRaftLog loads what the KV store holds into a fresh memory storage.
func openRaftLog(kv *storage.KV) (*raftLog, error) {
	l := &raftLog{kv: kv, mem: raft.NewMemoryStorage()}
	if b, err := kv.Get(keySnapshot); err == nil {
		var snap pb.Snapshot
		if err := proto.Unmarshal(b, &snap); err != nil {
			return nil, fmt.Errorf("coordination: decode raft snapshot: %w", err)
		}
		if err := l.mem.ApplySnapshot(&snap); err != nil {
			return nil, fmt.Errorf("coordination: load raft snapshot: %w", err)
		}
	} else if !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	if b, err := kv.Get(keyHardState); err == nil {
		var hs pb.HardState
		if err := proto.Unmarshal(b, &hs); err != nil {
			return nil, fmt.Errorf("coordination: decode raft hard state: %w", err)
		}
		if err := l.mem.SetHardState(&hs); err != nil {
			return nil, fmt.Errorf("coordination: load raft hard state: %w", err)
		}
	} else if !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	first, _ := l.mem.FirstIndex()
	var ents []*pb.Entry
	err := kv.Scan(entryKey(first), keyEntryHi, func(_, v []byte) error {
		var e pb.Entry
		if err := proto.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("coordination: decode raft entry: %w", err)
		}
		ents = append(ents, &e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := 1; i < len(ents); i++ {
		if ents[i].GetIndex() != ents[i-1].GetIndex()+1 {
			return nil, fmt.Errorf("coordination: raft log has a hole between entries %d and %d", ents[i-1].GetIndex(), ents[i].GetIndex())
		}
	}
	if err := l.mem.Append(ents); err != nil {
		return nil, fmt.Errorf("coordination: load raft entries: %w", err)
	}
	return l, nil
}

// empty reports whether the log has never held anything: a node that must
// bootstrap or join.
func (l *raftLog) empty() bool {
	last, _ := l.mem.LastIndex()
	snap, _ := l.mem.Snapshot()
	return last == 0 && raft.IsEmptySnap(snap)
}

// save makes a Ready's snapshot, entries and hard state durable, then hands
// them to the memory storage. New entries replace any the log held from
// their first index on (a new leader overwrote an uncommitted tail).
func (l *raftLog) save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot) error {
	b := l.kv.NewBatch()
	if snap != nil && !raft.IsEmptySnap(snap) {
		data, err := proto.Marshal(snap)
		if err != nil {
			return fmt.Errorf("coordination: encode raft snapshot: %w", err)
		}
		b.Set(keySnapshot, data)
		b.DeleteRange(keyEntryLo, entryKey(snap.GetMetadata().GetIndex()+1))
	}
	if len(ents) > 0 {
		b.DeleteRange(entryKey(ents[0].GetIndex()), keyEntryHi)
		for _, e := range ents {
			data, err := proto.Marshal(e)
			if err != nil {
				return fmt.Errorf("coordination: encode raft entry: %w", err)
			}
			b.Set(entryKey(e.GetIndex()), data)
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		data, err := proto.Marshal(hs)
		if err != nil {
			return fmt.Errorf("coordination: encode raft hard state: %w", err)
		}
		b.Set(keyHardState, data)
	}
	if b.Empty() {
		return nil
	}
	if err := l.kv.Commit(b, true); err != nil {
		return fmt.Errorf("coordination: persist raft state: %w", err)
	}
	if snap != nil && !raft.IsEmptySnap(snap) {
		if err := l.mem.ApplySnapshot(snap); err != nil {
			return fmt.Errorf("coordination: apply raft snapshot: %w", err)
		}
	}
	if err := l.mem.Append(ents); err != nil {
		return fmt.Errorf("coordination: append raft entries: %w", err)
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		if err := l.mem.SetHardState(hs); err != nil {
			return fmt.Errorf("coordination: set raft hard state: %w", err)
		}
	}
	return nil
}

// snapshot records data as the state at applied index and drops the log
// up to it, durably. keep entries below it stay, so a follower a little
// behind catches up from the log rather than a snapshot.
func (l *raftLog) snapshot(index uint64, cs *pb.ConfState, data []byte, keep uint64) error {
	snap, err := l.mem.CreateSnapshot(index, cs, data)
	if errors.Is(err, raft.ErrSnapOutOfDate) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("coordination: create raft snapshot at %d: %w", index, err)
	}
	enc, err := proto.Marshal(snap)
	if err != nil {
		return fmt.Errorf("coordination: encode raft snapshot: %w", err)
	}
	compact := uint64(0)
	if index > keep {
		compact = index - keep
	}
	b := l.kv.NewBatch()
	b.Set(keySnapshot, enc)
	if compact > 0 {
		b.DeleteRange(keyEntryLo, entryKey(compact))
	}
	if err := l.kv.Commit(b, true); err != nil {
		return fmt.Errorf("coordination: persist raft snapshot: %w", err)
	}
	if compact > 0 {
		if first, _ := l.mem.FirstIndex(); compact > first {
			if err := l.mem.Compact(compact); err != nil && !errors.Is(err, raft.ErrCompacted) {
				return fmt.Errorf("coordination: compact raft log to %d: %w", compact, err)
			}
		}
	}
	return nil
}
