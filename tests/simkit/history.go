package simkit

import (
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Never is the return time of a write whose outcome is unknown: it may take
// effect at any later point, or never.
const Never = int64(1) << 62

// History records porcupine register operations on a sample of keys, the
// simulator's operation counter as its time. Each simulation decides when
// its operations are called and return (Now); History records them and
// checks them against the per-key register (a delete writes "").
type History struct {
	// Sample is the keys recorded; operations on other keys are dropped.
	Sample []string
	// Ops is every operation recorded, in the order recorded.
	Ops   []porcupine.Operation
	clock int64
}

// Sampled reports whether key's operations are recorded.
func (h *History) Sampled(key string) bool { return slices.Contains(h.Sample, key) }

// Now advances the history's clock and returns it: every call and return
// time is a distinct Now.
func (h *History) Now() int64 {
	h.clock++
	return h.clock
}

// Write records that client wrote value to key (a delete writes ""),
// called at call and returning at ret (Never if its outcome is unknown),
// if key is sampled.
func (h *History) Write(client int, key, value string, call, ret int64) {
	if !h.Sampled(key) {
		return
	}
	h.Ops = append(h.Ops, porcupine.Operation{ClientId: client, Input: regInput{key: key, write: true, value: value},
		Call: call, Output: "", Return: ret})
}

// Read records that client read value from key ("" for absent), called at
// call and returning at ret, if key is sampled.
func (h *History) Read(client int, key, value string, call, ret int64) {
	if !h.Sampled(key) {
		return
	}
	h.Ops = append(h.Ops, porcupine.Operation{ClientId: client, Input: regInput{key: key}, Call: call,
		Output: value, Return: ret})
}

// Check runs porcupine on the history, giving up after timeout (0: no
// limit, so never porcupine.Unknown).
func (h *History) Check(timeout time.Duration) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(registerModel, h.Ops, timeout)
}

// Last describes the last n operations recorded, one "[call,return] cN op"
// each, for a finding's text.
func (h *History) Last(n int) []string {
	var desc []string
	for _, op := range h.Ops[max(0, len(h.Ops)-n):] {
		desc = append(desc, fmt.Sprintf("[%d,%d] c%d %s", op.Call, op.Return, op.ClientId,
			registerModel.DescribeOperation(op.Input, op.Output)))
	}
	return desc
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
