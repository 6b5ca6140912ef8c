package splitter

import (
	"errors"
	"slices"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

func sampleJournal() []Record {
	return []Record{
		{Split: 1, Step: StepBegin, Parent: 2, Version: 1},
		{Split: 1, Step: StepReserved, Parent: 2, Version: 2, Children: []routing.ShardID{8, 9}},
		{Split: 1, Step: StepHandoff, Parent: 2, Version: 2, Children: []routing.ShardID{8, 9}},
	}
}

func TestJournalRoundTripAndDamage(t *testing.T) {
	enc, err := EncodeJournal(sampleJournal())
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeJournal(enc)
	if err != nil || len(got) != 3 || !slices.Equal(got[2].Children, []routing.ShardID{8, 9}) || got[1].Step != StepReserved {
		t.Fatalf("DecodeJournal = %v, %v", got, err)
	}
	for cut := range len(enc) {
		if _, err := DecodeJournal(enc[:cut]); !errors.Is(err, ErrCorruptJournal) {
			t.Fatalf("truncated to %d bytes: %v, want ErrCorruptJournal", cut, err)
		}
	}
	for i := range enc {
		bad := slices.Clone(enc)
		bad[i] ^= 0x08
		if _, err := DecodeJournal(bad); !errors.Is(err, ErrCorruptJournal) {
			t.Fatalf("byte %d flipped: %v, want ErrCorruptJournal", i, err)
		}
	}
	if _, err := EncodeJournal([]Record{{Split: 1, Step: StepPublished, Parent: 2}}); err == nil {
		t.Errorf("a published record without children was encoded")
	}
}

func TestLastRecordPerSplit(t *testing.T) {
	recs := append(sampleJournal(), Record{Split: 2, Step: StepBegin, Parent: 3}, Record{Split: 1, Step: StepDone, Parent: 2})
	last := Last(recs)
	if len(last) != 2 || last[0].Step != StepDone || last[1].Split != 2 {
		t.Fatalf("Last = %v", last)
	}
}

// FuzzDecodeJournal: decoding never panics, and whatever decodes re-encodes
// to the same bytes.
func FuzzDecodeJournal(f *testing.F) {
	enc, _ := EncodeJournal(sampleJournal())
	f.Add(enc)
	empty, _ := EncodeJournal(nil)
	f.Add(empty)
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := DecodeJournal(data)
		if err != nil {
			return
		}
		re, err := EncodeJournal(recs)
		if err != nil || string(re) != string(data) {
			t.Fatalf("re-encoding differs (%v)", err)
		}
	})
}
