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
//	format 2: "SSJL" | 2 u16 | next split id u64 | count u32 | record... | crc32c u32 of all before
//	format 1: "SSJL" | 1 u16 | count u32 | record... | crc32c u32 of all before
//	record:   split u64 | stage u8 | parent u32 | version u64 | n u16 | n x child u32
//
// Format 2 persists the next split id, so split ids are never reused, even
// after every record was dropped: a record names its split unambiguously.
// Format 1 journals (written before split ids were persisted) are still
// read. The magic and format versions are part of the format; a new layout
// gets a new format version.

// JournalFile is the journal's name in the data directory.
const JournalFile = "SPLITLOG"

const (
	journalMagic    = "SSJL"
	journalFormatV1 = 1
	journalFormat   = 2
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

// Record is one journal record.
type Record struct {
	Split    uint64 // split id: unique per data directory, never reused
	Stage    Stage
	Parent   routing.ShardID
	Version  routing.Version   // the table version when the record was written
	Children []routing.ShardID // known from StageReserved on
}

func (r Record) String() string {
	return fmt.Sprintf("split %d %s parent=%d children=%v v%d", r.Split, r.Stage, r.Parent, r.Children, r.Version)
}

func (r Record) validate() error {
	if r.Split == 0 {
		return fmt.Errorf("split id 0")
	}
	if r.Stage < StageBegin || r.Stage > StageAborted {
		return fmt.Errorf("unknown stage %d", r.Stage)
	}
	if len(r.Children) > maxChildren {
		return fmt.Errorf("%d children", len(r.Children))
	}
	if (r.Stage == StageReserved || r.Stage == StageHandoff || r.Stage == StagePublished) && len(r.Children) == 0 {
		return fmt.Errorf("%s record without children", r.Stage)
	}
	return nil
}

// same reports whether two records say the same thing (the version aside).
func (r Record) same(o Record) bool {
	return r.Split == o.Split && r.Stage == o.Stage && r.Parent == o.Parent && slices.Equal(r.Children, o.Children)
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
		b = binary.BigEndian.AppendUint64(b, r.Split)
		b = append(b, byte(r.Stage))
		b = binary.BigEndian.AppendUint32(b, uint32(r.Parent))
		b = binary.BigEndian.AppendUint64(b, uint64(r.Version))
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.Children)))
		for _, c := range r.Children {
			b = binary.BigEndian.AppendUint32(b, uint32(c))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))), nil
}

// DecodeJournal decodes a journal of either format and returns the next
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
	if format != journalFormat && format != journalFormatV1 {
		return 0, nil, fmt.Errorf("%w: format version %d, this build reads %d and %d", ErrCorruptJournal, format, journalFormatV1, journalFormat)
	}
	if got, want := crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)), binary.BigEndian.Uint32(data[len(data)-4:]); got != want {
		return 0, nil, fmt.Errorf("%w: checksum %08x, stored %08x", ErrCorruptJournal, got, want)
	}
	p := body[6:]
	next := uint64(0)
	if format == journalFormat {
		if len(p) < 8+4 {
			return 0, nil, fmt.Errorf("%w: header truncated", ErrCorruptJournal)
		}
		next, p = binary.BigEndian.Uint64(p), p[8:]
	}
	n := int(binary.BigEndian.Uint32(p))
	p = p[4:]
	if n > len(p)/23 {
		return 0, nil, fmt.Errorf("%w: %d records in %d bytes", ErrCorruptJournal, n, len(p))
	}
	records := make([]Record, 0, n)
	highest := uint64(0)
	for i := range n {
		if len(p) < 23 {
			return 0, nil, fmt.Errorf("%w: record %d truncated", ErrCorruptJournal, i)
		}
		r := Record{Split: binary.BigEndian.Uint64(p), Stage: Stage(p[8]), Parent: routing.ShardID(binary.BigEndian.Uint32(p[9:])),
			Version: routing.Version(binary.BigEndian.Uint64(p[13:]))}
		nc := int(binary.BigEndian.Uint16(p[21:]))
		p = p[23:]
		if len(p) < 4*nc {
			return 0, nil, fmt.Errorf("%w: record %d truncated", ErrCorruptJournal, i)
		}
		for j := range nc {
			r.Children = append(r.Children, routing.ShardID(binary.BigEndian.Uint32(p[4*j:])))
		}
		p = p[4*nc:]
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
