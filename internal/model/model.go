// Package model is the one model of acknowledged writes: it records, per
// document id, every write attempted and how it ended, on a logical clock,
// and answers which states an id may be in at a cut of that clock — after a
// crash, or now. Check compares the model with the documents an index holds.
//
// # The rule
//
// A write is attempted at an instant (before it is sent) and ends at a later
// one: acknowledged (it happened), failed (it returned an error: it may or
// may not have happened, but it is over), or never (in flight when the
// process died, or still running). An id behaves as a register, so at a cut
// the id may hold the value of write W if and only if
//
//   - W was attempted by the cut, and
//   - no write acknowledged by the cut was attempted after W ended.
//
// It may hold its initial state (absent, or a loaded document) if and only
// if no write was acknowledged by the cut. A write a read was seen to return
// (Observe) counts as acknowledged from that read on: it happened. This is the linearizable
// register's rule: a write that must be ordered after W and is known to have
// happened hides W; writes in flight and failed writes hide nothing, since
// they may not have happened. With one writer per id (each writer owning its
// ids and sending one write at a time) it reduces to "the last acknowledged
// write, or any write attempted after it"; with concurrent writers to one id
// it also admits a write acknowledged before the last one but overlapping
// it, which a register may order last.
//
// # Cuts
//
// A Cut names two instants: every write acknowledged at or before Acked must
// show, and a write attempted at or after Attempted cannot. For a crash,
// read Now before taking the crashed image and again after: the image is
// taken between the two readings, so Cut{Acked: before, Attempted: after}
// holds whatever happened in between. At the end of a run, Latest is the
// cut of every write recorded so far.
//
// A Model is safe for concurrent use. Its clock ticks under one mutex, so
// instants are ordered as the calls were.
package model

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"

	"github.com/shardsplit/shardsplit/internal/invariants"
)

// Instant is a reading of the model's logical clock. Every Attempt, Ack,
// Fail and Observe ticks it; 0 is before everything.
type Instant uint64

// Value is the state of one id: absent, or a document known by the digest
// of its source, or (for loaded data the model does not know byte for byte)
// some document. The zero Value is Absent.
type Value struct {
	kind   valueKind
	digest uint64
}

type valueKind uint8

const (
	kindAbsent valueKind = iota
	kindDoc
	kindAnyDoc
)

// Absent is the state of an id never written, or deleted.
var Absent = Value{}

// AnyDoc is "some document": the state of a loaded document whose source
// the model was not told. It admits any present document.
var AnyDoc = Value{kind: kindAnyDoc}

// Doc is a document with this source.
func Doc(source []byte) Value { return DocDigest(Digest(source)) }

// DocDigest is a document whose source has this Digest.
func DocDigest(d uint64) Value { return Value{kind: kindDoc, digest: d} }

// Digest is the FNV-64a hash the model keeps of a source.
func Digest(source []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(source)
	return h.Sum64()
}

// Present reports whether v is a document.
func (v Value) Present() bool { return v.kind != kindAbsent }

// Admits reports whether found, a state read from an index, is v.
func (v Value) Admits(found Value) bool {
	if v.kind == kindAnyDoc {
		return found.Present()
	}
	return v == found
}

func (v Value) String() string {
	switch v.kind {
	case kindDoc:
		return fmt.Sprintf("doc:%016x", v.digest)
	case kindAnyDoc:
		return "doc:any"
	}
	return "absent"
}

// Write is one attempted write, the handle Ack and Fail take.
type Write struct {
	id        string
	value     Value
	attempted Instant
	ended     Instant // 0 while in flight
	acked     bool
	observed  Instant // a read returned its value before it was acknowledged (Observe); 0 if none
}

// Value is the state w sets its id to.
func (w *Write) Value() Value { return w.value }

// Cut is a point of the model's history at which states are asked: writes
// acknowledged at or before Acked must show; writes attempted after
// Attempted cannot. Acked <= Attempted.
type Cut struct {
	Acked, Attempted Instant
}

// At is the cut of one instant.
func At(t Instant) Cut { return Cut{Acked: t, Attempted: t} }

// ErrCut marks a cut the model cannot answer: one with Acked after
// Attempted, or (in a compact model) one before writes it dropped.
var ErrCut = errors.New("model: cut cannot be answered")

// Options configure a Model.
type Options struct {
	// Compact drops a write as soon as an acknowledgement hides it at every
	// later cut, so memory is bounded by the ids and the writes not yet
	// hidden. A compact model answers only cuts whose Acked is at or after
	// its last acknowledgement (Latest); a long load that only checks the
	// end wants it, a crash test that checks earlier cuts does not.
	Compact bool
}

// Model is the record of every write, per id. The zero value is not usable;
// call New.
type Model struct {
	mu      sync.Mutex
	clock   Instant
	ids     map[string]*history
	compact bool
	horizon Instant // compact: the earliest Acked a cut may have
}

// history is one id's initial state and writes, in attempt order.
type history struct {
	initial Value
	writes  []*Write
}

// New returns an empty model.
func New(opts Options) *Model {
	return &Model{ids: map[string]*history{}, compact: opts.Compact}
}

func (m *Model) hist(id string) *history {
	h := m.ids[id]
	if h == nil {
		h = &history{}
		m.ids[id] = h
	}
	return h
}

// Load sets id's initial state, its state before every write (a document
// loaded before the run). It may be called at any time; the default is
// Absent.
func (m *Model) Load(id string, v Value) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hist(id).initial = v
}

// Attempt records that a write setting id to v (Absent for a delete) is
// about to be sent; call it before sending. The returned handle is ended by
// Ack or Fail, or never (in flight).
func (m *Model) Attempt(id string, v Value) *Write {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clock++
	w := &Write{id: id, value: v, attempted: m.clock}
	h := m.hist(id)
	h.writes = append(h.writes, w)
	return w
}

// Ack records that w was acknowledged: it happened.
func (m *Model) Ack(w *Write) { m.end(w, true) }

// Fail records that w returned an error: it may or may not have happened,
// but it is over and cannot happen later.
func (m *Model) Fail(w *Write) { m.end(w, false) }

func (m *Model) end(w *Write, acked bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.ended != 0 {
		_ = invariants.AssertionFailedf("model: write to %s attempted at %d ended twice", w.id, w.attempted)
		return
	}
	m.clock++
	w.ended, w.acked = m.clock, acked
	if acked && m.compact {
		// Every cut from now on has Acked >= w.ended, so w hides every write
		// that ended before w was attempted.
		h := m.ids[w.id]
		h.writes = slices.DeleteFunc(h.writes, func(x *Write) bool { return x.ended != 0 && x.ended < w.attempted })
		m.horizon = w.ended
	}
}

// Observe records that a read returned w's value before w was
// acknowledged (in flight, or failed). A linearizable read orders w before
// itself, so w happened: from this instant on w counts as acknowledged at
// every cut, hiding what it would hide and never to be lost. Without it a
// read of a write that a crash then rolled back (a dirty read: the value a
// client saw vanishes) passed every check, since an unacknowledged write
// may always be absent. Observe of an acknowledged write changes nothing.
func (m *Model) Observe(w *Write) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.observed != 0 || (w.acked && w.ended != 0) {
		return
	}
	m.clock++
	w.observed = m.clock
}

// Now reads the clock.
func (m *Model) Now() Instant {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.clock
}

// Latest is the cut of every write recorded so far.
func (m *Model) Latest() Cut { return At(m.Now()) }

// IDs returns every id the model knows (loaded or written), sorted.
func (m *Model) IDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.ids))
	for id := range m.ids {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Allowed returns the states id may be in at cut c (see the package
// comment), without repeats: the initial state first if allowed, then
// writes in attempt order.
func (m *Model) Allowed(id string, c Cut) ([]Value, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.validCut(c); err != nil {
		return nil, err
	}
	return m.allowed(m.ids[id], c), nil
}

func (m *Model) validCut(c Cut) error {
	if c.Acked > c.Attempted {
		return fmt.Errorf("%w: acked %d after attempted %d", ErrCut, c.Acked, c.Attempted)
	}
	if c.Acked < m.horizon {
		return fmt.Errorf("%w: acked %d before %d, the compact model's last acknowledgement", ErrCut, c.Acked, m.horizon)
	}
	return nil
}

func (m *Model) allowed(h *history, c Cut) []Value {
	if h == nil {
		return []Value{Absent}
	}
	// hide: the latest attempt among writes acknowledged by the cut; a
	// write that ended before it is hidden.
	var hide Instant
	acked := false
	for _, w := range h.writes {
		if w.acked && w.ended <= c.Acked || w.observed != 0 && w.observed <= c.Acked {
			acked = true
			hide = max(hide, w.attempted)
		}
	}
	var out []Value
	if !acked {
		out = append(out, h.initial)
	}
	for _, w := range h.writes {
		if w.attempted > c.Attempted || (w.ended != 0 && w.ended < hide) {
			continue
		}
		if !slices.Contains(out, w.value) {
			out = append(out, w.value)
		}
	}
	return out
}

// Mismatch is one id whose state found in the index is not allowed.
type Mismatch struct {
	ID      string
	Found   Value
	Allowed []Value
}

func (x Mismatch) String() string {
	s := make([]string, len(x.Allowed))
	for i, v := range x.Allowed {
		s[i] = v.String()
	}
	return fmt.Sprintf("%s: found %s, allowed %s", x.ID, x.Found, strings.Join(s, " | "))
}

// MaxMismatches bounds Report.Mismatches.
const MaxMismatches = 100

// Report is what Check found. Every id checked is in exactly one of OK,
// Lost, Unexpected and Wrong.
type Report struct {
	Checked    int // ids checked: every id the model knows or the index holds
	Lost       int // absent, but must be a document (an acknowledged write or a loaded document is missing)
	Unexpected int // a document, but must be absent (never written, or deleted)
	Wrong      int // a document with a value no allowed write has (stale, or from nowhere)
	// Mismatches are the first MaxMismatches failing ids in id order.
	Mismatches []Mismatch
}

// OK reports whether every id is in an allowed state.
func (r Report) OK() bool { return r.Lost == 0 && r.Unexpected == 0 && r.Wrong == 0 }

// Check compares the model at cut c with found, the state of every document
// in the index (an id not in found is absent). Every id the model knows and
// every id found is checked.
func (m *Model) Check(c Cut, found map[string]Value) (Report, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var r Report
	if err := m.validCut(c); err != nil {
		return r, err
	}
	var bad []string
	check := func(id string, h *history) {
		r.Checked++
		f := found[id]
		allowed := m.allowed(h, c)
		for _, a := range allowed {
			if a.Admits(f) {
				return
			}
		}
		bad = append(bad, id)
		switch {
		case !f.Present():
			r.Lost++
		case !slices.ContainsFunc(allowed, Value.Present):
			r.Unexpected++
		default:
			r.Wrong++
		}
	}
	for id, h := range m.ids {
		check(id, h)
	}
	for id := range found {
		if _, known := m.ids[id]; !known {
			check(id, nil)
		}
	}
	slices.Sort(bad)
	for _, id := range bad[:min(len(bad), MaxMismatches)] {
		r.Mismatches = append(r.Mismatches, Mismatch{ID: id, Found: found[id], Allowed: m.allowed(m.ids[id], c)})
	}
	return r, nil
}
