package splitter

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

func sampleJournal() []Record {
	return []Record{
		{ID: 1, Stage: StageBegin, Sources: []routing.ShardID{2}, Version: 1},
		{ID: 1, Stage: StageReserved, Sources: []routing.ShardID{2}, Version: 2, Targets: []routing.ShardID{8, 9}},
		{ID: 1, Stage: StageHandoff, Sources: []routing.ShardID{2}, Version: 2, Targets: []routing.ShardID{8, 9}},
	}
}

func TestJournalRoundTripAndDamage(t *testing.T) {
	enc, err := EncodeJournal(5, sampleJournal())
	if err != nil {
		t.Fatal(err)
	}
	next, got, err := DecodeJournal(enc)
	if err != nil {
		t.Fatal(err)
	}
	if next != 5 {
		t.Errorf("DecodeJournal next = %d, want 5", next)
	}
	if diff := cmp.Diff(sampleJournal(), got); diff != "" {
		t.Errorf("DecodeJournal(EncodeJournal(records)) differs (-want +got):\n%s", diff)
	}
	for cut := range len(enc) {
		if _, _, err := DecodeJournal(enc[:cut]); !errors.Is(err, ErrCorruptJournal) {
			t.Fatalf("truncated to %d bytes: %v, want ErrCorruptJournal", cut, err)
		}
	}
	for i := range enc {
		bad := slices.Clone(enc)
		bad[i] ^= 0x08
		if _, _, err := DecodeJournal(bad); !errors.Is(err, ErrCorruptJournal) {
			t.Fatalf("byte %d flipped: %v, want ErrCorruptJournal", i, err)
		}
	}
	if _, err := EncodeJournal(5, []Record{{ID: 1, Stage: StagePublished, Sources: []routing.ShardID{2}}}); err == nil {
		t.Errorf("a published record without targets was encoded")
	}
	if _, err := EncodeJournal(1, sampleJournal()); err == nil {
		t.Errorf("a record at or above the next split id was encoded")
	}
}

// A journal in format 2 (splits only, the next id persisted) still
// decodes.
func TestJournalReadsFormat2(t *testing.T) {
	data, err := os.ReadFile("testdata/journal-format2")
	if err != nil {
		t.Fatal(err)
	}
	next, got, err := DecodeJournal(data)
	if err != nil {
		t.Fatal(err)
	}
	want := append(sampleJournal(), Record{ID: 4, Stage: StageAborted, Sources: []routing.ShardID{1}, Version: 3})
	if diff := cmp.Diff(want, got); diff != "" || next != 5 {
		t.Errorf("DecodeJournal(format 2) = next %d, diff (-want +got):\n%s", next, diff)
	}
}

// A journal in format 3 (a kind byte, then one shard and one id list per
// record: a split's parent and children, a merge's target and sources)
// still decodes.
func TestJournalReadsFormat3(t *testing.T) {
	data, err := os.ReadFile("testdata/journal-format3")
	if err != nil {
		t.Fatal(err)
	}
	next, got, err := DecodeJournal(data)
	if err != nil {
		t.Fatal(err)
	}
	want := append(sampleJournal(),
		Record{ID: 2, Kind: KindMerge, Stage: StageBegin, Sources: []routing.ShardID{8, 9}, Version: 3},
		Record{ID: 2, Kind: KindMerge, Stage: StageReserved, Targets: []routing.ShardID{10}, Sources: []routing.ShardID{8, 9}, Version: 4},
		Record{ID: 2, Kind: KindMerge, Stage: StageAborted, Targets: []routing.ShardID{10}, Sources: []routing.ShardID{8, 9}, Version: 5},
	)
	if diff := cmp.Diff(want, got); diff != "" || next != 3 {
		t.Errorf("DecodeJournal(format 3) = next %d, diff (-want +got):\n%s", next, diff)
	}
}

// Merge records round-trip beside split records, and records of the wrong
// shape for their kind are refused.
func TestJournalMergeRecords(t *testing.T) {
	records := append(sampleJournal(),
		Record{ID: 2, Kind: KindMerge, Stage: StageBegin, Sources: []routing.ShardID{8, 9}, Version: 3},
		Record{ID: 2, Kind: KindMerge, Stage: StageReserved, Targets: []routing.ShardID{10}, Sources: []routing.ShardID{8, 9}, Version: 4},
	)
	enc, err := EncodeJournal(3, records)
	if err != nil {
		t.Fatal(err)
	}
	next, got, err := DecodeJournal(enc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(records, got); diff != "" || next != 3 {
		t.Errorf("DecodeJournal(EncodeJournal(merge records)) = next %d, diff (-want +got):\n%s", next, diff)
	}
	for i := range enc {
		bad := slices.Clone(enc)
		bad[i] ^= 0x08
		if _, _, err := DecodeJournal(bad); !errors.Is(err, ErrCorruptJournal) {
			t.Fatalf("byte %d flipped: %v, want ErrCorruptJournal", i, err)
		}
	}
	for _, bad := range []Record{
		{ID: 1, Kind: KindMerge, Stage: StageBegin, Sources: []routing.ShardID{8}},
		{ID: 1, Kind: KindMerge, Stage: StageReserved, Sources: []routing.ShardID{8, 9}},
		{ID: 1, Kind: KindMerge, Stage: StageHandoff, Sources: []routing.ShardID{8, 9}, Targets: []routing.ShardID{10, 11}},
		{ID: 1, Kind: KindSplit, Stage: StageBegin, Sources: []routing.ShardID{3, 4}},
		{ID: 1, Kind: KindSplit, Stage: StageBegin},
		{ID: 1, Kind: 7, Stage: StageBegin, Sources: []routing.ShardID{3}},
	} {
		if _, err := EncodeJournal(5, []Record{bad}); err == nil {
			t.Errorf("invalid record %v was encoded", bad)
		}
	}
}

// A journal in format 1 (splits only, no next id) still decodes; its next
// id is one above its highest.
func TestJournalReadsFormat1(t *testing.T) {
	data, err := os.ReadFile("testdata/journal-format1")
	if err != nil {
		t.Fatal(err)
	}
	next, got, err := DecodeJournal(data)
	if err != nil {
		t.Fatal(err)
	}
	want := append(sampleJournal(), Record{ID: 3, Stage: StageBegin, Sources: []routing.ShardID{4}, Version: 2})
	if diff := cmp.Diff(want, got); diff != "" || next != 4 {
		t.Errorf("DecodeJournal(format 1) = next %d, diff (-want +got):\n%s", next, diff)
	}
}

func TestLastRecordPerSplit(t *testing.T) {
	recs := append(sampleJournal(), Record{ID: 2, Stage: StageBegin, Sources: []routing.ShardID{3}}, Record{ID: 1, Stage: StageDone, Sources: []routing.ShardID{2}})
	last := Last(recs)
	if len(last) != 2 || last[0].Stage != StageDone || last[1].ID != 2 {
		t.Fatalf("Last = %v", last)
	}
}

// Split ids survive a journal that dropped every record: a reopened
// journal never hands out an id it handed out before.
func TestSplitIDsAreNeverReused(t *testing.T) {
	eng, err := storage.Open(storage.Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	j, _ := OpenJournal(eng)
	for range 3 {
		id := j.NewID()
		if err := j.Append(Record{ID: id, Stage: StageBegin, Sources: []routing.ShardID{0}}, Record{ID: id, Stage: StageAborted, Sources: []routing.ShardID{0}}); err != nil {
			t.Fatal(err)
		}
	}
	j2, err := OpenJournal(eng)
	if err != nil {
		t.Fatal(err)
	}
	if id := j2.NewID(); id != 4 {
		t.Fatalf("after three splits and a reopen, NewSplitID = %d, want 4", id)
	}
}

// A record whose write failed is not lost: the journal's next write
// carries it, in order, before the new record.
func TestFailedRecordIsWrittenNextTime(t *testing.T) {
	mem := vfs.NewMem()
	var fail atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if fail.Load() && op.Kind == errorfs.OpRename && strings.Contains(op.Path, JournalFile) {
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	})
	eng, err := storage.Open(storage.Options{Dir: "/data", FS: errorfs.Wrap(mem, inj), CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	j, _ := OpenJournal(eng)
	a := j.NewID()
	if err := j.Append(Record{ID: a, Stage: StageBegin, Sources: []routing.ShardID{0}}, Record{ID: a, Stage: StageAborting, Sources: []routing.ShardID{0}, Targets: []routing.ShardID{1, 2}}); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := j.Append(Record{ID: a, Stage: StageAborted, Sources: []routing.ShardID{0}}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append with the disk full = %v, want ENOSPC", err)
	}
	if !j.Dirty() {
		t.Fatalf("a failed write left the journal clean")
	}
	fail.Store(false)
	b := j.NewID()
	if err := j.Append(Record{ID: b, Stage: StageBegin, Sources: []routing.ShardID{0}}); err != nil {
		t.Fatal(err)
	}
	j2, _ := OpenJournal(eng)
	if got := j2.Unfinished(b); len(got) != 0 {
		t.Fatalf("after the next write, splits %v are unfinished on disk; the lost aborted record was not carried", got)
	}
}

// FuzzDecodeJournal: decoding never panics, and whatever decodes re-encodes
// (in the current format) to something that decodes to the same records.
func FuzzDecodeJournal(f *testing.F) {
	enc, _ := EncodeJournal(5, sampleJournal())
	f.Add(enc)
	empty, _ := EncodeJournal(1, nil)
	f.Add(empty)
	if old, err := os.ReadFile("testdata/journal-format1"); err == nil {
		f.Add(old)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		next, recs, err := DecodeJournal(data)
		if err != nil {
			return
		}
		re, err := EncodeJournal(next, recs)
		if err != nil {
			t.Fatalf("re-encoding: %v", err)
		}
		next2, recs2, err := DecodeJournal(re)
		if err != nil || next2 != next || !cmp.Equal(recs, recs2) {
			t.Fatalf("re-decoding differs (%v)", err)
		}
	})
}
