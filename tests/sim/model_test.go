package sim

import (
	"fmt"
	"slices"
	"sort"

	"github.com/anishathalye/porcupine"
)

// writeModel is what the simulator needs of a model of acknowledged writes.
// It is an interface so that the shared model (internal/model, being built
// on another branch) can replace regModel without touching the simulator.
//
// TODO(sim): switch to internal/model once it lands on main.
type writeModel interface {
	// Begin records a write (value "" = delete) about to be sent.
	Begin(id, value string) *pendingWrite
	// Ack records that w was acknowledged; Fail that its outcome is unknown
	// (it may or may not have been applied, now or after a crash).
	Ack(w *pendingWrite)
	Fail(w *pendingWrite)
	// Allowed returns the values a read of id may return now: the last
	// acknowledged write, or any write after it whose outcome is unknown.
	Allowed(id string) []string
	// Settle fixes id's state to value after a checked recovery: unknown
	// outcomes before it are decided.
	Settle(id, value string)
	// IDs returns every id ever written, sorted.
	IDs() []string
}

// pendingWrite is one write as the model sees it.
type pendingWrite struct {
	id, value string
}

// regModel is a per-id register model: the last acknowledged value and the
// values of later writes whose outcome is unknown.
type regModel struct {
	ids map[string]*regState
}

type regState struct {
	value     string   // last acknowledged (or settled) value; "" = absent
	uncertain []string // writes after it that failed: applied or not
}

func newRegModel() *regModel { return &regModel{ids: map[string]*regState{}} }

func (m *regModel) state(id string) *regState {
	s, ok := m.ids[id]
	if !ok {
		s = &regState{}
		m.ids[id] = s
	}
	return s
}

func (m *regModel) Begin(id, value string) *pendingWrite {
	m.state(id)
	return &pendingWrite{id: id, value: value}
}

func (m *regModel) Ack(w *pendingWrite) {
	s := m.state(w.id)
	s.value, s.uncertain = w.value, nil
}

func (m *regModel) Fail(w *pendingWrite) {
	s := m.state(w.id)
	if !slices.Contains(s.uncertain, w.value) {
		s.uncertain = append(s.uncertain, w.value)
	}
}

func (m *regModel) Allowed(id string) []string {
	s, ok := m.ids[id]
	if !ok {
		return []string{""}
	}
	return append([]string{s.value}, s.uncertain...)
}

func (m *regModel) Settle(id, value string) {
	s := m.state(id)
	s.value, s.uncertain = value, nil
}

func (m *regModel) IDs() []string {
	out := make([]string, 0, len(m.ids))
	for id := range m.ids {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// regInput is a porcupine register operation on one key.
type regInput struct {
	key   string
	write bool
	value string
}

// registerModel is the per-key register porcupine checks (a delete writes
// ""). Partitioned by key, so each key is checked on its own.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(regInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		if in.write {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		if in.write {
			return fmt.Sprintf("put(%s, %q)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %q", in.key, output)
	},
}

// history records porcupine operations on a sample of keys for one epoch
// (the life of one node between recoveries). Time is the simulator's op
// counter; a write whose outcome is unknown never returns (it may take
// effect at any later point, or never).
type history struct {
	sample []string
	ops    []porcupine.Operation
	clock  int64
}

const never = int64(1) << 62

func (h *history) sampled(key string) bool { return slices.Contains(h.sample, key) }

// start begins an epoch whose sampled keys hold the given values.
func (h *history) start(values map[string]string) {
	h.ops = h.ops[:0]
	for _, k := range h.sample {
		h.clock++
		h.ops = append(h.ops, porcupine.Operation{ClientId: -1, Input: regInput{key: k, write: true, value: values[k]},
			Call: h.clock, Output: "", Return: h.clock})
	}
}

func (h *history) write(client int, key, value string, acked bool) {
	if !h.sampled(key) {
		return
	}
	h.clock += 2
	ret := h.clock
	if !acked {
		ret = never
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: regInput{key: key, write: true, value: value},
		Call: h.clock - 1, Output: "", Return: ret})
}

func (h *history) read(client int, key, value string) {
	if !h.sampled(key) {
		return
	}
	h.clock += 2
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: regInput{key: key}, Call: h.clock - 1,
		Output: value, Return: h.clock})
}

// check runs porcupine on the epoch's history.
func (h *history) check() error {
	if len(h.ops) == 0 {
		return nil
	}
	if !porcupine.CheckOperations(registerModel, h.ops) {
		var desc []string
		for _, op := range h.ops {
			desc = append(desc, fmt.Sprintf("[%d,%d] c%d %s", op.Call, op.Return, op.ClientId,
				registerModel.DescribeOperation(op.Input, op.Output)))
		}
		if len(desc) > 20 {
			desc = desc[len(desc)-20:]
		}
		return fmt.Errorf("porcupine: history of %d operations on keys %v is not linearizable; last: %v", len(h.ops), h.sample, desc)
	}
	return nil
}
