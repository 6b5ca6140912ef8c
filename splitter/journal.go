package splitter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"sync"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// The journal records every phase transition of a split or merge durably
// before its effects can become visible, so that recovery can tell, after
// a crash at any instant, which operations were in flight and how far they
// got. The routing table (persisted by the node) is the commit point: an
// operation whose commit edit reached the table rolls forward, any other
// rolls back.
//
// The records come out of the Machine (Ready.Journal) in the order they
// must be written. The Journal keeps in memory every record the process
// decided on; each write persists all of them, so a record whose write
// failed (ENOSPC) is written with the next one, and a later operation's
// begin record is never durable before an earlier operation's end.
//
// File format (JournalFile in the data directory), replaced atomically on
// every write (a temporary file, fsync, rename, fsync of the directory), so
// a crash leaves either the old or the new journal, never a torn one:
//
//	format 4: "SSJL" | 4 u16 | next id u64 | count u32 | record4... | crc32c u32 of all before
//	record4:  id u64 | kind u8 | stage u8 | version u64 | ns u16 | ns x source u32 | nt u16 | nt x target u32
//
// Older formats are still read (their records decode to the same shape):
//
//	format 3: "SSJL" | 3 u16 | next id u64 | count u32 | record3... | crc32c u32 of all before
//	format 2: "SSJL" | 2 u16 | next id u64 | count u32 | record... | crc32c u32 of all before
//	format 1: "SSJL" | 1 u16 | count u32 | record... | crc32c u32 of all before
//	record:   id u64 | stage u8 | parent u32 | version u64 | n u16 | n x child u32 (a split)
//	record3:  id u64 | kind u8 | stage u8 | shard u32 | version u64 | n u16 | n x id u32
//	          kind 0 (split): shard = the source (parent), ids = the targets (children)
//	          kind 1 (merge): shard = the target (0 before it is reserved), ids = the sources
//
// Formats 2 and up persist the next operation id, so ids are never reused,
// even after every record was dropped: a record names its operation
// unambiguously (format 1's next id is one above its highest record).
// Splits and merges share one id sequence (one operation at a time). The
// magic and format versions are part of the format; a new layout gets a
// new format version.

// JournalFile is the journal's name in the data directory.
const JournalFile = "SPLITLOG"

const (
	journalMagic    = "SSJL"
	journalFormatV1 = 1
	journalFormatV2 = 2
	journalFormatV3 = 3
	journalFormat   = 4
	maxShardIDs     = 1 << 12
)

// Stage is a journaled point in an operation's life.
type Stage uint8

const (
	// StageBegin: about to reserve. Nothing exists yet.
	StageBegin Stage = iota + 1
	// StageReserved: the reservation is published; the targets will be made.
	StageReserved
	// StageHandoff: about to hand off; the commit may follow.
	StageHandoff
	// StagePublished: the commit edit is durable; the sources will be retired.
	StagePublished
	// StageDone: the sources are retired; the operation is finished.
	StageDone
	// StageAborting: about to delete the targets and cancel.
	StageAborting
	// StageAborted: the targets are gone and the reservation is cancelled
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

// Finished reports whether an operation whose last record is s needs
// nothing.
func (s Stage) Finished() bool { return s == StageDone || s == StageAborted }

// Record is one journal record of a split or a merge.
type Record struct {
	ID      uint64 // operation id: unique per data directory, never reused
	Kind    Kind
	Stage   Stage
	Version routing.Version   // the table version when the record was written
	Sources []routing.ShardID // always: a split's parent, a merge's sources
	Targets []routing.ShardID // from StageReserved on: a split's children, a merge's target
}

func (r Record) String() string {
	return fmt.Sprintf("%s %d %s sources=%v targets=%v v%d", r.Kind, r.ID, r.Stage, r.Sources, r.Targets, r.Version)
}

func (r Record) validate() error {
	if r.ID == 0 {
		return fmt.Errorf("operation id 0")
	}
	if r.Stage < StageBegin || r.Stage > StageAborted {
		return fmt.Errorf("unknown stage %d", r.Stage)
	}
	if len(r.Sources) > maxShardIDs || len(r.Targets) > maxShardIDs {
		return fmt.Errorf("%d sources, %d targets", len(r.Sources), len(r.Targets))
	}
	reservedOn := r.Stage == StageReserved || r.Stage == StageHandoff || r.Stage == StagePublished
	if reservedOn && len(r.Targets) == 0 {
		return fmt.Errorf("%s record without targets", r.Stage)
	}
	switch r.Kind {
	case KindSplit:
		if len(r.Sources) != 1 {
			return fmt.Errorf("split record with %d sources", len(r.Sources))
		}
	case KindMerge:
		if len(r.Sources) < 2 {
			return fmt.Errorf("merge record with %d sources", len(r.Sources))
		}
		if len(r.Targets) > 1 {
			return fmt.Errorf("merge record with %d targets", len(r.Targets))
		}
	default:
		return fmt.Errorf("unknown record kind %d", r.Kind)
	}
	return nil
}

// same reports whether two records say the same thing (the version aside).
func (r Record) same(o Record) bool {
	return r.ID == o.ID && r.Kind == o.Kind && r.Stage == o.Stage &&
		slices.Equal(r.Sources, o.Sources) && slices.Equal(r.Targets, o.Targets)
}

// ErrCorruptJournal marks a journal that failed its magic, format,
// length, checksum or record checks.
var ErrCorruptJournal = errors.New("splitter: corrupt split journal")

// EncodeJournal encodes records in the current format, with next as the
// next unused operation id; each record is validated first.
func EncodeJournal(next uint64, records []Record) ([]byte, error) {
	b := append([]byte(journalMagic), 0, 0)
	binary.BigEndian.PutUint16(b[4:], journalFormat)
	b = binary.BigEndian.AppendUint64(b, next)
	b = binary.BigEndian.AppendUint32(b, uint32(len(records)))
	for _, r := range records {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("splitter: journal record %s: %w", r, err)
		}
		if r.ID >= next {
			return nil, fmt.Errorf("splitter: journal record %s: id not below the next id %d", r, next)
		}
		b = binary.BigEndian.AppendUint64(b, r.ID)
		b = append(b, byte(r.Kind), byte(r.Stage))
		b = binary.BigEndian.AppendUint64(b, uint64(r.Version))
		b = appendIDs(b, r.Sources)
		b = appendIDs(b, r.Targets)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))), nil
}

func appendIDs(b []byte, ids []routing.ShardID) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(ids)))
	for _, id := range ids {
		b = binary.BigEndian.AppendUint32(b, uint32(id))
	}
	return b
}

// DecodeJournal decodes a journal of any format and returns the next
// unused operation id with the records; every failure wraps
// ErrCorruptJournal, and every decoded record is validated again.
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
	d := decoder{p: body[6:]}
	next := uint64(0)
	if format >= journalFormatV2 {
		next = d.u64()
	}
	n := int(d.u32())
	// The shortest record is 22 bytes (format 4 with no ids).
	if d.err != nil || n > len(d.p)/22 {
		return 0, nil, fmt.Errorf("%w: %d records in %d bytes", ErrCorruptJournal, n, len(d.p))
	}
	records := make([]Record, 0, n)
	highest := uint64(0)
	for i := range n {
		r := d.record(format)
		if d.err != nil {
			return 0, nil, fmt.Errorf("%w: record %d truncated", ErrCorruptJournal, i)
		}
		if err := r.validate(); err != nil {
			return 0, nil, fmt.Errorf("%w: record %d: %w", ErrCorruptJournal, i, err)
		}
		highest = max(highest, r.ID)
		records = append(records, r)
	}
	if len(d.p) != 0 {
		return 0, nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptJournal, len(d.p))
	}
	switch {
	case format == journalFormatV1:
		next = highest + 1
	case next <= highest:
		return 0, nil, fmt.Errorf("%w: next id %d is not above record id %d", ErrCorruptJournal, next, highest)
	}
	return next, records, nil
}

// decoder reads big-endian fields; a read past the end sets err and
// returns zeros.
type decoder struct {
	p   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || len(d.p) < n {
		d.err = io.ErrUnexpectedEOF
		return make([]byte, n)
	}
	b := d.p[:n]
	d.p = d.p[n:]
	return b
}

func (d *decoder) u8() uint8   { return d.take(1)[0] }
func (d *decoder) u16() uint16 { return binary.BigEndian.Uint16(d.take(2)) }
func (d *decoder) u32() uint32 { return binary.BigEndian.Uint32(d.take(4)) }
func (d *decoder) u64() uint64 { return binary.BigEndian.Uint64(d.take(8)) }

func (d *decoder) ids() []routing.ShardID {
	n := int(d.u16())
	if d.err != nil || len(d.p) < 4*n {
		d.err = io.ErrUnexpectedEOF
		return nil
	}
	var ids []routing.ShardID
	for range n {
		ids = append(ids, routing.ShardID(d.u32()))
	}
	return ids
}

// record reads one record of the given format into the one shape.
func (d *decoder) record(format uint16) Record {
	r := Record{ID: d.u64()}
	if format >= journalFormatV3 {
		r.Kind = Kind(d.u8())
	}
	r.Stage = Stage(d.u8())
	if format >= journalFormat {
		r.Version = routing.Version(d.u64())
		r.Sources, r.Targets = d.ids(), d.ids()
		return r
	}
	shard := routing.ShardID(d.u32())
	r.Version = routing.Version(d.u64())
	ids := d.ids()
	switch {
	case r.Kind != KindMerge:
		r.Sources, r.Targets = []routing.ShardID{shard}, ids
	case shard != 0:
		r.Sources, r.Targets = ids, []routing.ShardID{shard}
	default: // a merge's begin record: no target yet
		r.Sources = ids
	}
	return r
}

// Journal is the journal of one data directory. It is safe for concurrent
// use: the operation a driver runs appends while a request that the driver
// refuses (one operation at a time) reads it; recovery runs before any
// driver.
//
// INVARIANTS:
//  1. records is every record the process decided on, in order; the file
//     holds a prefix-consistent older version of it while dirty is set.
//  2. next is above every operation id ever handed out in this directory.
type Journal struct {
	eng *storage.Engine

	mu      sync.Mutex // guards everything below; held across a write
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
func (j *Journal) Records() []Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.records)
}

// NewID returns an unused operation id. It is made durable with the next
// write.
func (j *Journal) NewID() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	id := j.next
	j.next++
	j.dirty = true
	return id
}

// Unfinished returns the ids of operations whose last record is not an
// end, other than except.
func (j *Journal) Unfinished(except uint64) []uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	var ids []uint64
	for _, r := range Last(j.records) {
		if r.ID != except && !r.Stage.Finished() {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// Dirty reports whether a record the process decided on is not durable yet
// (its write failed; the next write carries it).
func (j *Journal) Dirty() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.dirty
}

// Append adds records and writes the journal durably. A record that repeats
// its operation's last record is not added again. Records of finished
// operations are dropped first (they need nothing from recovery), so the
// journal stays small. If the write fails the records stay decided: the
// next write (of any operation) persists them, in order. With nothing new
// and nothing unwritten it writes nothing.
func (j *Journal) Append(records ...Record) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, r := range records {
		if err := r.validate(); err != nil {
			return fmt.Errorf("splitter: journal record %s: %w", r, err)
		}
		if r.ID >= j.next {
			return fmt.Errorf("splitter: journal record %s: id was not handed out (next is %d)", r, j.next)
		}
		if last, ok := j.last(r.ID); ok && last.same(r) {
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

// last returns the last record of an operation.
func (j *Journal) last(id uint64) (Record, bool) {
	for i := len(j.records) - 1; i >= 0; i-- {
		if j.records[i].ID == id {
			return j.records[i], true
		}
	}
	return Record{}, false
}

// compact drops every record of a finished operation but the newest
// finished operation's own (an operation being written keeps its records
// until its end is durable; after that the next write drops them).
func compact(records []Record) []Record {
	if len(records) == 0 {
		return nil
	}
	last := map[uint64]Stage{}
	for _, r := range records {
		last[r.ID] = r.Stage
	}
	newest := records[len(records)-1].ID
	kept := records[:0:0]
	for _, r := range records {
		if r.ID == newest || !last[r.ID].Finished() {
			kept = append(kept, r)
		}
	}
	return kept
}

// Last returns the last record of every operation, in order of first
// appearance.
func Last(records []Record) []Record {
	idx := map[uint64]int{}
	var out []Record
	for _, r := range records {
		if i, ok := idx[r.ID]; ok {
			out[i] = r
			continue
		}
		idx[r.ID] = len(out)
		out = append(out, r)
	}
	return out
}
