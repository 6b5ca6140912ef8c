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
// File format (JournalFile in the data directory), replaced atomically on
// every append (write a temporary file, fsync, rename, fsync the directory),
// so a crash leaves either the old or the new journal, never a torn one:
//
//	"SSJL" | format u16 | count u32 | record... | crc32c u32 of all before
//	record: split u64 | step u8 | parent u32 | version u64 | n u16 | n x child u32
//
// The magic and format version are part of the format; a new layout gets a
// new format version.

// JournalFile is the journal's name in the data directory.
const JournalFile = "SPLITLOG"

const (
	journalMagic  = "SSJL"
	journalFormat = 1
	maxChildren   = 1 << 12
)

// Step is a journaled phase transition.
type Step uint8

const (
	// StepBegin: about to reserve (BeginSplit). Nothing exists yet.
	StepBegin Step = iota + 1
	// StepReserved: the reservation is published; children will be made.
	StepReserved
	// StepHandoff: about to hand off; the publish (the commit point) may follow.
	StepHandoff
	// StepPublished: CommitSplit is durable; the parent will be retired.
	StepPublished
	// StepDone: the parent is retired; the split is finished.
	StepDone
	// StepAborting: about to delete the children and cancel.
	StepAborting
	// StepAborted: the children are gone and the reservation is cancelled.
	StepAborted
)

var stepNames = [...]string{StepBegin: "begin", StepReserved: "reserved", StepHandoff: "handoff",
	StepPublished: "published", StepDone: "done", StepAborting: "aborting", StepAborted: "aborted"}

func (s Step) String() string {
	if int(s) < len(stepNames) && stepNames[s] != "" {
		return stepNames[s]
	}
	return fmt.Sprintf("Step(%d)", uint8(s))
}

// Finished reports whether a split whose last record is s needs nothing.
func (s Step) Finished() bool { return s == StepDone || s == StepAborted }

// Record is one journal record.
type Record struct {
	Split    uint64 // split id: unique per data directory
	Step     Step
	Parent   routing.ShardID
	Version  routing.Version   // the table version when the record was written
	Children []routing.ShardID // known from StepReserved on
}

func (r Record) String() string {
	return fmt.Sprintf("split %d %s parent=%d children=%v v%d", r.Split, r.Step, r.Parent, r.Children, r.Version)
}

func (r Record) validate() error {
	if r.Step < StepBegin || r.Step > StepAborted {
		return fmt.Errorf("unknown step %d", r.Step)
	}
	if len(r.Children) > maxChildren {
		return fmt.Errorf("%d children", len(r.Children))
	}
	if (r.Step == StepReserved || r.Step == StepHandoff || r.Step == StepPublished) && len(r.Children) == 0 {
		return fmt.Errorf("%s record without children", r.Step)
	}
	return nil
}

// ErrCorruptJournal marks a journal that failed its magic, format,
// length, checksum or record checks.
var ErrCorruptJournal = errors.New("splitter: corrupt split journal")

// EncodeJournal encodes records; each is validated first.
func EncodeJournal(records []Record) ([]byte, error) {
	b := append([]byte(journalMagic), 0, 0)
	binary.BigEndian.PutUint16(b[4:], journalFormat)
	b = binary.BigEndian.AppendUint32(b, uint32(len(records)))
	for _, r := range records {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("splitter: journal record %s: %w", r, err)
		}
		b = binary.BigEndian.AppendUint64(b, r.Split)
		b = append(b, byte(r.Step))
		b = binary.BigEndian.AppendUint32(b, uint32(r.Parent))
		b = binary.BigEndian.AppendUint64(b, uint64(r.Version))
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.Children)))
		for _, c := range r.Children {
			b = binary.BigEndian.AppendUint32(b, uint32(c))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))), nil
}

// DecodeJournal decodes a journal; every failure wraps ErrCorruptJournal,
// and every decoded record is validated again.
func DecodeJournal(data []byte) ([]Record, error) {
	const header = 4 + 2 + 4
	if len(data) < header+4 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the %d-byte minimum", ErrCorruptJournal, len(data), header+4)
	}
	body := data[:len(data)-4]
	if string(body[:4]) != journalMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorruptJournal, body[:4])
	}
	if v := binary.BigEndian.Uint16(body[4:]); v != journalFormat {
		return nil, fmt.Errorf("%w: format version %d, this build reads %d", ErrCorruptJournal, v, journalFormat)
	}
	if got, want := crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)), binary.BigEndian.Uint32(data[len(data)-4:]); got != want {
		return nil, fmt.Errorf("%w: checksum %08x, stored %08x", ErrCorruptJournal, got, want)
	}
	n := int(binary.BigEndian.Uint32(body[6:]))
	p := body[header:]
	if n > len(p)/23 {
		return nil, fmt.Errorf("%w: %d records in %d bytes", ErrCorruptJournal, n, len(p))
	}
	records := make([]Record, 0, n)
	for i := range n {
		if len(p) < 23 {
			return nil, fmt.Errorf("%w: record %d truncated", ErrCorruptJournal, i)
		}
		r := Record{Split: binary.BigEndian.Uint64(p), Step: Step(p[8]), Parent: routing.ShardID(binary.BigEndian.Uint32(p[9:])),
			Version: routing.Version(binary.BigEndian.Uint64(p[13:]))}
		nc := int(binary.BigEndian.Uint16(p[21:]))
		p = p[23:]
		if len(p) < 4*nc {
			return nil, fmt.Errorf("%w: record %d truncated", ErrCorruptJournal, i)
		}
		for j := range nc {
			r.Children = append(r.Children, routing.ShardID(binary.BigEndian.Uint32(p[4*j:])))
		}
		p = p[4*nc:]
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("%w: record %d: %w", ErrCorruptJournal, i, err)
		}
		records = append(records, r)
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptJournal, len(p))
	}
	return records, nil
}

// Journal is the split journal of one data directory. It is not safe for
// concurrent use: one driver runs one split at a time.
type Journal struct {
	eng     *storage.Engine
	records []Record
	nextID  uint64
}

// OpenJournal reads the journal of an engine's data directory (an absent
// journal is empty). A damaged journal is an error naming the file.
func OpenJournal(eng *storage.Engine) (*Journal, error) {
	data, ok, err := eng.ReadFile(JournalFile)
	if err != nil {
		return nil, err
	}
	j := &Journal{eng: eng, nextID: 1}
	if !ok {
		return j, nil
	}
	if j.records, err = DecodeJournal(data); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(eng.Dir(), JournalFile), err)
	}
	for _, r := range j.records {
		j.nextID = max(j.nextID, r.Split+1)
	}
	return j, nil
}

// Records returns every record, oldest first.
func (j *Journal) Records() []Record { return slices.Clone(j.records) }

// NewSplitID returns an unused split id.
func (j *Journal) NewSplitID() uint64 {
	id := j.nextID
	j.nextID++
	return id
}

// Append records r durably. Records of finished splits other than r's are
// dropped first (they need nothing from recovery), so the journal stays
// small.
func (j *Journal) Append(r Record) error {
	kept := j.records[:0:0]
	last := map[uint64]Step{}
	for _, old := range j.records {
		last[old.Split] = old.Step
	}
	for _, old := range j.records {
		if old.Split == r.Split || !last[old.Split].Finished() {
			kept = append(kept, old)
		}
	}
	kept = append(kept, r)
	data, err := EncodeJournal(kept)
	if err != nil {
		return err
	}
	if err := j.eng.WriteFileAtomic(JournalFile, data); err != nil {
		return fmt.Errorf("splitter: journal %s: %w", r, err)
	}
	j.records = kept
	return nil
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
