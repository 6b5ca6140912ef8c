package splitter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"slices"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// The split journal records every phase transition durably before its
// effects can become visible, so that recovery can tell, after a crash at
// any instant, which splits were in flight and how far they got. The
// routing table (persisted by the node) is the commit point: a split whose
// CommitSplit reached the table rolls forward, any other rolls back.
//
// The records come out of the Machine (Ready.Journal) in the order they
// must be written. The Journal keeps in memory every record the process
// decided on; each write persists all of them, so a record whose write
// failed (ENOSPC) is written with the next one, and a later split's begin
// record is never durable before an earlier split's end.
//
// File format (JournalFile in the data directory), replaced atomically on
// every write (a temporary file, fsync, rename, fsync of the directory), so
// a crash leaves either the old or the new journal, never a torn one:
//
//	format 3: "SSJL" | 3 u16 | next split id u64 | count u32 | record3... | crc32c u32 of all before
//	format 2: "SSJL" | 2 u16 | next split id u64 | count u32 | record... | crc32c u32 of all before
//	format 1: "SSJL" | 1 u16 | count u32 | record... | crc32c u32 of all before
//	record:   split u64 | stage u8 | parent u32 | version u64 | n u16 | n x child u32
//	record3:  split u64 | kind u8 | stage u8 | shard u32 | version u64 | n u16 | n x id u32
//	          kind 1 (split): shard = parent, ids = children
//	          kind 2 (merge): shard = target (0 before it is reserved), ids = sources
//
// Format 2 persists the next split id, so split ids are never reused, even
// after every record was dropped: a record names its split unambiguously.
// Format 3 adds the record kind, for merges; a merge is journaled under an
// id from the same sequence as splits (one operation at a time). Formats 1
// and 2 (splits only) are still read. The magic and format versions are
// part of the format; a new layout gets a new format version.

// JournalFile is the journal's name in the data directory.
const JournalFile = "SPLITLOG"

const (
	journalMagic    = "SSJL"
	journalFormatV1 = 1
	journalFormatV2 = 2
	journalFormat   = 3
	maxChildren     = 1 << 12
)

// Stage is a journaled point in a split's life.
type Stage uint8

const (
	// StageBegin: about to reserve (BeginSplit). Nothing exists yet.
	StageBegin Stage = iota + 1
	// StageReserved: the reservation is published; children will be made.
	StageReserved
	// StageHandoff: about to hand off; the commit may follow.
	StageHandoff
	// StagePublished: CommitSplit is durable; the parent will be retired.
	StagePublished
	// StageDone: the parent is retired; the split is finished.
	StageDone
	// StageAborting: about to delete the children and cancel.
	StageAborting
	// StageAborted: the children are gone and the reservation is cancelled
	// (or was never made).
	StageAborted
)

var stageNames = [...]string{StageBegin: "begin", StageReserved: "reserved", StageHandoff: "handoff",
	StagePublished: "published", StageDone: "done", StageAborting: "aborting", StageAborted: "aborted"}

func (s Stage) String() string {
	if int(s) < len(stageNames) && stageNames[s] != "" {
		return stageNames[s]
	}
	return fmt.Sprintf("Stage(%d)", uint8(s))
}

// Finished reports whether a split whose last record is s needs nothing.
func (s Stage) Finished() bool { return s == StageDone || s == StageAborted }

// RecordKind says what operation a record journals.
type RecordKind uint8

const (
	// KindSplit (the zero value, as every format 1 and 2 record): Parent
	// and Children.
	KindSplit RecordKind = iota
	// KindMerge: Target and Sources.
	KindMerge
)

func (k RecordKind) String() string {
	switch k {
	case KindSplit:
		return "split"
	case KindMerge:
		return "merge"
	}
	return fmt.Sprintf("RecordKind(%d)", uint8(k))
}

// Record is one journal record: of a split (Parent, Children) or of a
// merge (Target, Sources).
type Record struct {
	Split    uint64 // operation id (of a split or a merge): unique per data directory, never reused
	Kind     RecordKind
	Stage    Stage
	Parent   routing.ShardID
	Version  routing.Version   // the table version when the record was written
	Children []routing.ShardID // known from StageReserved on
	Target   routing.ShardID   // KindMerge: known from StageReserved on
	Sources  []routing.ShardID // KindMerge: always
}

func (r Record) String() string {
	if r.Kind == KindMerge {
		return fmt.Sprintf("merge %d %s sources=%v target=%d v%d", r.Split, r.Stage, r.Sources, r.Target, r.Version)
	}
	return fmt.Sprintf("split %d %s parent=%d children=%v v%d", r.Split, r.Stage, r.Parent, r.Children, r.Version)
}

func (r Record) validate() error {
	if r.Split == 0 {
		return fmt.Errorf("split id 0")
	}
	if r.Stage < StageBegin || r.Stage > StageAborted {
		return fmt.Errorf("unknown stage %d", r.Stage)
	}
	reservedOn := r.Stage == StageReserved || r.Stage == StageHandoff || r.Stage == StagePublished
	switch r.Kind {
	case KindSplit:
		if len(r.Children) > maxChildren {
			return fmt.Errorf("%d children", len(r.Children))
		}
		if reservedOn && len(r.Children) == 0 {
			return fmt.Errorf("%s record without children", r.Stage)
		}
		if r.Target != 0 || len(r.Sources) != 0 {
			return fmt.Errorf("split record with a merge's target or sources")
		}
	case KindMerge:
		if len(r.Sources) < 2 || len(r.Sources) > maxChildren {
			return fmt.Errorf("merge record with %d sources", len(r.Sources))
		}
		if reservedOn && r.Target == 0 {
			return fmt.Errorf("%s merge record without a target", r.Stage)
		}
		if r.Parent != 0 || len(r.Children) != 0 {
			return fmt.Errorf("merge record with a split's parent or children")
		}
	default:
		return fmt.Errorf("unknown record kind %d", r.Kind)
	}
	return nil
}

// same reports whether two records say the same thing (the version aside).
func (r Record) same(o Record) bool {
	return r.Split == o.Split && r.Kind == o.Kind && r.Stage == o.Stage && r.Parent == o.Parent &&
		slices.Equal(r.Children, o.Children) && r.Target == o.Target && slices.Equal(r.Sources, o.Sources)
}

// shardAndIDs returns what a record stores in its shard and id fields.
func (r Record) shardAndIDs() (routing.ShardID, []routing.ShardID) {
	if r.Kind == KindMerge {
		return r.Target, r.Sources
	}
	return r.Parent, r.Children
}

// ErrCorruptJournal marks a journal that failed its magic, format,
// length, checksum or record checks.
var ErrCorruptJournal = errors.New("splitter: corrupt split journal")

// EncodeJournal encodes records in the current format, with next as the
// next unused split id; each record is validated first.
func EncodeJournal(next uint64, records []Record) ([]byte, error) {
	b := append([]byte(journalMagic), 0, 0)
	binary.BigEndian.PutUint16(b[4:], journalFormat)
	b = binary.BigEndian.AppendUint64(b, next)
	b = binary.BigEndian.AppendUint32(b, uint32(len(records)))
	for _, r := range records {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("splitter: journal record %s: %w", r, err)
		}
		if r.Split >= next {
			return nil, fmt.Errorf("splitter: journal record %s: split id not below the next id %d", r, next)
		}
		shard, ids := r.shardAndIDs()
		b = binary.BigEndian.AppendUint64(b, r.Split)
		b = append(b, byte(r.Kind), byte(r.Stage))
		b = binary.BigEndian.AppendUint32(b, uint32(shard))
		b = binary.BigEndian.AppendUint64(b, uint64(r.Version))
		b = binary.BigEndian.AppendUint16(b, uint16(len(ids)))
		for _, c := range ids {
			b = binary.BigEndian.AppendUint32(b, uint32(c))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))), nil
}

// DecodeJournal decodes a journal of any format and returns the next
// unused split id with the records; every failure wraps ErrCorruptJournal,
// and every decoded record is validated again. A format 1 journal's next id
// is one above its highest record.
func DecodeJournal(data []byte) (uint64, []Record, error) {
	const minimum = 4 + 2 + 4 + 4
	if len(data) < minimum {
		return 0, nil, fmt.Errorf("%w: %d bytes is shorter than the %d-byte minimum", ErrCorruptJournal, len(data), minimum)
	}
	body := data[:len(data)-4]
	if string(body[:4]) != journalMagic {
		return 0, nil, fmt.Errorf("%w: bad magic %q", ErrCorruptJournal, body[:4])
	}
	format := binary.BigEndian.Uint16(body[4:])
	if format < journalFormatV1 || format > journalFormat {
		return 0, nil, fmt.Errorf("%w: format version %d, this build reads %d to %d", ErrCorruptJournal, format, journalFormatV1, journalFormat)
	}
	if got, want := crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)), binary.BigEndian.Uint32(data[len(data)-4:]); got != want {
		return 0, nil, fmt.Errorf("%w: checksum %08x, stored %08x", ErrCorruptJournal, got, want)
	}
	p := body[6:]
	next := uint64(0)
	if format >= journalFormatV2 {
		if len(p) < 8+4 {
			return 0, nil, fmt.Errorf("%w: header truncated", ErrCorruptJournal)
		}
		next, p = binary.BigEndian.Uint64(p), p[8:]
	}
	n := int(binary.BigEndian.Uint32(p))
	p = p[4:]
	recLen := 23 // split u64 | stage u8 | shard u32 | version u64 | n u16
	if format >= journalFormat {
		recLen++ // | kind u8
	}
	if n > len(p)/recLen {
		return 0, nil, fmt.Errorf("%w: %d records in %d bytes", ErrCorruptJournal, n, len(p))
	}
	records := make([]Record, 0, n)
	highest := uint64(0)
	for i := range n {
		if len(p) < recLen {
			return 0, nil, fmt.Errorf("%w: record %d truncated", ErrCorruptJournal, i)
		}
		r := Record{Split: binary.BigEndian.Uint64(p)}
		p = p[8:]
		if format >= journalFormat {
			r.Kind, p = RecordKind(p[0]), p[1:]
		}
		r.Stage = Stage(p[0])
		shard := routing.ShardID(binary.BigEndian.Uint32(p[1:]))
		r.Version = routing.Version(binary.BigEndian.Uint64(p[5:]))
		nc := int(binary.BigEndian.Uint16(p[13:]))
		p = p[15:]
		if len(p) < 4*nc {
			return 0, nil, fmt.Errorf("%w: record %d truncated", ErrCorruptJournal, i)
		}
		var ids []routing.ShardID
		for j := range nc {
			ids = append(ids, routing.ShardID(binary.BigEndian.Uint32(p[4*j:])))
		}
		p = p[4*nc:]
		if r.Kind == KindMerge {
			r.Target, r.Sources = shard, ids
		} else {
			r.Parent, r.Children = shard, ids
		}
		if err := r.validate(); err != nil {
			return 0, nil, fmt.Errorf("%w: record %d: %w", ErrCorruptJournal, i, err)
		}
		highest = max(highest, r.Split)
		records = append(records, r)
	}
	if len(p) != 0 {
		return 0, nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptJournal, len(p))
	}
	switch {
	case format == journalFormatV1:
		next = highest + 1
	case next <= highest:
		return 0, nil, fmt.Errorf("%w: next split id %d is not above record split %d", ErrCorruptJournal, next, highest)
	}
	return next, records, nil
}

// Journal is the split journal of one data directory. It is not safe for
// concurrent use: one driver runs one split at a time, and recovery runs
// before any driver.
//
// INVARIANTS:
//  1. records is every record the process decided on, in order; the file
//     holds a prefix-consistent older version of it while dirty is set.
//  2. next is above every split id ever handed out in this directory.
type Journal struct {
	eng     *storage.Engine
	records []Record
	next    uint64
	dirty   bool // records holds something the file does not
}

// OpenJournal reads the journal of an engine's data directory (an absent
// journal is empty). A damaged journal is an error naming the file.
func OpenJournal(eng *storage.Engine) (*Journal, error) {
	data, ok, err := eng.ReadFile(JournalFile)
	if err != nil {
		return nil, err
	}
	j := &Journal{eng: eng, next: 1}
	if !ok {
		return j, nil
	}
	if j.next, j.records, err = DecodeJournal(data); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(eng.Dir(), JournalFile), err)
	}
	return j, nil
}

// Records returns every record, oldest first.
func (j *Journal) Records() []Record { return slices.Clone(j.records) }

// NewSplitID returns an unused split id. It is made durable with the next
// write.
func (j *Journal) NewSplitID() uint64 {
	id := j.next
	j.next++
	j.dirty = true
	return id
}

// Unfinished returns the ids of splits whose last record is not an end,
// other than except.
func (j *Journal) Unfinished(except uint64) []uint64 {
	var ids []uint64
	for _, r := range Last(j.records) {
		if r.Split != except && !r.Stage.Finished() {
			ids = append(ids, r.Split)
		}
	}
	return ids
}

// Dirty reports whether a record the process decided on is not durable yet
// (its write failed; the next write carries it).
func (j *Journal) Dirty() bool { return j.dirty }

// Append adds records and writes the journal durably. A record that repeats
// its split's last record is not added again. Records of finished splits
// are dropped first (they need nothing from recovery), so the journal stays
// small. If the write fails the records stay decided: the next write (of
// any split) persists them, in order. With nothing new and nothing
// unwritten it writes nothing.
func (j *Journal) Append(records ...Record) error {
	for _, r := range records {
		if err := r.validate(); err != nil {
			return fmt.Errorf("splitter: journal record %s: %w", r, err)
		}
		if r.Split >= j.next {
			return fmt.Errorf("splitter: journal record %s: split id was not handed out (next is %d)", r, j.next)
		}
		if last, ok := j.last(r.Split); ok && last.same(r) {
			continue
		}
		j.records = append(j.records, r)
		j.dirty = true
	}
	if !j.dirty {
		return nil
	}
	kept := compact(j.records)
	data, err := EncodeJournal(j.next, kept)
	if err != nil {
		return err
	}
	if err := j.eng.WriteFileAtomic(JournalFile, data); err != nil {
		return fmt.Errorf("splitter: journal: %w", err)
	}
	j.records, j.dirty = kept, false
	return nil
}

// last returns the last record of a split.
func (j *Journal) last(split uint64) (Record, bool) {
	for i := len(j.records) - 1; i >= 0; i-- {
		if j.records[i].Split == split {
			return j.records[i], true
		}
	}
	return Record{}, false
}

// compact drops every record of a finished split but the newest finished
// split's own (a split being written keeps its records until its end is
// durable; after that the next write drops them).
func compact(records []Record) []Record {
	if len(records) == 0 {
		return nil
	}
	last := map[uint64]Stage{}
	for _, r := range records {
		last[r.Split] = r.Stage
	}
	newest := records[len(records)-1].Split
	kept := records[:0:0]
	for _, r := range records {
		if r.Split == newest || !last[r.Split].Finished() {
			kept = append(kept, r)
		}
	}
	return kept
}

// Last returns the last record of every split, in split-id order of first
// appearance.
func Last(records []Record) []Record {
	idx := map[uint64]int{}
	var out []Record
	for _, r := range records {
		if i, ok := idx[r.Split]; ok {
			out[i] = r
			continue
		}
		idx[r.Split] = len(out)
		out = append(out, r)
	}
	return out
}
