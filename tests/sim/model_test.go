package sim

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/tests/simkit"
)

// writeModel is what the simulator needs of the model of acknowledged
// writes: internal/model, the project's one model, behind a small adapter
// that speaks the simulator's values (a document's source as a string, ""
// for absent).
type writeModel interface {
	// Begin records a write (value "" = delete) about to be sent.
	Begin(id, value string) *model.Write
	// Ack records that w was acknowledged; Fail that it returned an error
	// (it may or may not have happened). A write never ended was in flight
	// when the process died.
	Ack(w *model.Write)
	Fail(w *model.Write)
	// Admits reports whether id may hold found now (the last acknowledged
	// write or a later one whose outcome is unknown, by the register rule),
	// and what is allowed, for a finding's text.
	Admits(id, found string) (bool, string)
	// Settle starts a new node incarnation whose ids hold what recovery
	// found: unknown outcomes before it are decided.
	Settle(found map[string]string)
	// IDs returns every id known, sorted.
	IDs() []string
	// Observe records that a routed get returned found for id: the write
	// that set it happened, acknowledged or not, and must not be lost
	// afterwards (model.Observe).
	Observe(id, found string)
}

// sharedModel adapts internal/model. Each node incarnation gets a fresh
// model.Model loaded with what recovery found (model.Load), so that a
// write lost by a crash is not allowed back afterwards.
type sharedModel struct {
	m      *model.Model
	ids    map[string]bool
	writes map[string][]*model.Write // this incarnation's, per id, for Observe
}

func newSharedModel() *sharedModel {
	return &sharedModel{m: model.New(model.Options{}), ids: map[string]bool{},
		writes: map[string][]*model.Write{}}
}

func value(v string) model.Value {
	switch v {
	case "":
		return model.Absent
	case emptyDoc:
		return model.Doc(nil)
	}
	return model.Doc([]byte(v))
}

// emptyDoc is how the simulator's values name a document that is present
// with an empty source. The workload never writes one (a delete is ""), so
// the model allows it nowhere. Read as "", absent, a delete that left a
// document with an empty source behind (a tombstone that reads return)
// would go unseen (tests/sim/mutations/delete-leaves-empty-source.patch).
const emptyDoc = "\x00<document with an empty source>"

// readValue is the simulator's value of a document a read returned: its
// source, or emptyDoc if the source is empty (never "", which is absent).
func readValue(d storage.Doc) string {
	if len(d.Source) == 0 {
		return emptyDoc
	}
	return string(d.Source)
}

func (s *sharedModel) Begin(id, v string) *model.Write {
	s.ids[id] = true
	w := s.m.Attempt(id, value(v))
	s.writes[id] = append(s.writes[id], w)
	return w
}

// Observe finds the write of found (document values are unique: v1, v2,
// ...; a delete's absent names no write) and records that it was seen, a
// write that failed too: one whose WAL sync failed would stay readable
// until a crash lost it, which is why the node fails itself on such a
// write (tests.TestNoDirtyReadAfterAFailedWALSync).
func (s *sharedModel) Observe(id, found string) {
	v := value(found)
	if !v.Present() {
		return
	}
	ws := s.writes[id]
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i].Value() == v {
			s.m.Observe(ws[i])
			return
		}
	}
}

func (s *sharedModel) Ack(w *model.Write)  { s.m.Ack(w) }
func (s *sharedModel) Fail(w *model.Write) { s.m.Fail(w) }

func (s *sharedModel) Admits(id, found string) (bool, string) {
	allowed, err := s.m.Allowed(id, s.m.Latest())
	if err != nil {
		return false, err.Error()
	}
	f := value(found)
	for _, a := range allowed {
		if a.Admits(f) {
			return true, ""
		}
	}
	desc := make([]string, len(allowed))
	for i, a := range allowed {
		desc[i] = a.String()
	}
	return false, strings.Join(desc, " | ")
}

func (s *sharedModel) Settle(found map[string]string) {
	s.m = model.New(model.Options{})
	s.writes = map[string][]*model.Write{}
	for id := range s.ids {
		s.m.Load(id, value(found[id]))
	}
}

func (s *sharedModel) IDs() []string {
	out := make([]string, 0, len(s.ids))
	for id := range s.ids {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// history records porcupine operations on a sample of keys for one epoch
// (the life of one node between recoveries). Time is the simulator's op
// counter: an operation the simulator makes whole takes two ticks (call,
// return), one it starts and ends later calls now at its start. A write
// whose outcome is unknown never returns (it may take effect at any later
// point, or never).
type history struct{ simkit.History }

// start begins an epoch whose sampled keys hold the given values.
func (h *history) start(values map[string]string) {
	h.Ops = h.Ops[:0]
	for _, k := range h.Sample {
		at := h.Now()
		h.Write(-1, k, values[k], at, at)
	}
}

func (h *history) write(client int, key, value string, acked bool) {
	if !h.Sampled(key) {
		return
	}
	call, ret := h.Now(), h.Now()
	if !acked {
		ret = simkit.Never
	}
	h.Write(client, key, value, call, ret)
}

// writeFrom records a write called at call (an earlier Now) that returns
// now.
func (h *history) writeFrom(call int64, client int, key, value string, acked bool) {
	if !h.Sampled(key) {
		return
	}
	ret := h.Now()
	if !acked {
		ret = simkit.Never
	}
	h.Write(client, key, value, call, ret)
}

func (h *history) read(client int, key, value string) {
	if !h.Sampled(key) {
		return
	}
	call, ret := h.Now(), h.Now()
	h.Read(client, key, value, call, ret)
}

// check runs porcupine on the epoch's history.
func (h *history) check() error {
	if len(h.Ops) == 0 {
		return nil
	}
	if h.Check(0) != porcupine.Ok {
		return fmt.Errorf("porcupine: history of %d operations on keys %v is not linearizable; last: %v", len(h.Ops), h.Sample, h.Last(20))
	}
	return nil
}
