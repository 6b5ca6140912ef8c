package simkit

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

func sampled(keys ...string) *History { return &History{Sample: keys} }

// A read that returns a value no write ever wrote, or a value after a
// later acknowledged write replaced it, is not linearizable: the check
// must say Illegal, or a simulation would pass whatever it read.
func TestCheckCatchesAHistoryThatIsNotLinearizable(t *testing.T) {
	cases := map[string]func(h *History){
		"a value nobody wrote": func(h *History) {
			h.Write(1, "k", "v1", h.Now(), h.Now())
			h.Read(2, "k", "v9", h.Now(), h.Now())
		},
		"a stale read after an acknowledged overwrite": func(h *History) {
			h.Write(1, "k", "v1", h.Now(), h.Now())
			h.Write(1, "k", "v2", h.Now(), h.Now())
			h.Read(2, "k", "v1", h.Now(), h.Now())
		},
		"a deleted document read back": func(h *History) {
			h.Write(1, "k", "v1", h.Now(), h.Now())
			h.Write(1, "k", "", h.Now(), h.Now())
			h.Read(2, "k", "v1", h.Now(), h.Now())
		},
		"a value read before its write was called": func(h *History) {
			h.Read(2, "k", "v1", h.Now(), h.Now())
			h.Write(1, "k", "v1", h.Now(), Never)
		},
		"one key's violation among linearizable keys": func(h *History) {
			h.Write(1, "a", "a1", h.Now(), h.Now())
			h.Read(2, "a", "a1", h.Now(), h.Now())
			h.Write(1, "b", "b1", h.Now(), h.Now())
			h.Write(1, "b", "b2", h.Now(), h.Now())
			h.Read(2, "b", "b1", h.Now(), h.Now())
		},
	}
	for name, record := range cases {
		h := sampled("a", "b", "k")
		record(h)
		if got := h.Check(0); got != porcupine.Illegal {
			t.Errorf("%s: Check = %v, want Illegal", name, got)
		}
	}
}

// Histories a correct store can produce pass: overlapping operations in
// either order, and a write whose outcome is unknown taking effect late or
// never.
func TestCheckPassesALinearizableHistory(t *testing.T) {
	cases := map[string]func(h *History){
		"nothing written reads absent": func(h *History) {
			h.Read(1, "k", "", h.Now(), h.Now())
		},
		"a read overlapping a write sees the old value": func(h *History) {
			h.Write(1, "k", "v1", h.Now(), h.Now())
			w := h.Now()
			h.Read(2, "k", "v1", h.Now(), h.Now())
			h.Write(1, "k", "v2", w, h.Now())
		},
		"a write of unknown outcome never happens": func(h *History) {
			h.Write(1, "k", "v1", h.Now(), h.Now())
			h.Write(1, "k", "v2", h.Now(), Never)
			h.Read(2, "k", "v1", h.Now(), h.Now())
		},
		"a write of unknown outcome happens late": func(h *History) {
			h.Write(1, "k", "v1", h.Now(), Never)
			h.Read(2, "k", "", h.Now(), h.Now())
			h.Read(2, "k", "v1", h.Now(), h.Now())
		},
	}
	for name, record := range cases {
		h := sampled("k")
		record(h)
		if got := h.Check(0); got != porcupine.Ok {
			t.Errorf("%s: Check = %v, want Ok; history %v", name, got, h.Last(10))
		}
	}
}

// Only sampled keys are recorded: a violation on a key outside the sample
// is not the check's to see.
func TestHistoryRecordsOnlyTheSample(t *testing.T) {
	h := sampled("k")
	h.Write(1, "other", "v1", h.Now(), h.Now())
	h.Read(2, "other", "v9", h.Now(), h.Now())
	if len(h.Ops) != 0 {
		t.Fatalf("recorded %d operations on a key outside the sample", len(h.Ops))
	}
	h.Write(1, "k", "v1", h.Now(), h.Now())
	h.Read(2, "k", "v1", h.Now(), h.Now())
	if len(h.Ops) != 2 || h.Check(0) != porcupine.Ok {
		t.Fatalf("sampled key: %d operations, %v", len(h.Ops), h.Check(0))
	}
}

func TestLastDescribesTheLastOperations(t *testing.T) {
	h := sampled("k")
	h.Write(1, "k", "v1", h.Now(), h.Now())
	h.Write(1, "k", "", h.Now(), Never)
	h.Read(2, "k", "v1", h.Now(), h.Now())
	got := strings.Join(h.Last(2), "; ")
	want := `[3,4611686018427387904] c1 put(k, ""); [4,5] c2 get(k) -> "v1"`
	if got != want {
		t.Errorf("Last(2) = %s, want %s", got, want)
	}
	if n := len(h.Last(20)); n != 3 {
		t.Errorf("Last(20) of 3 operations has %d", n)
	}
}
