package cluster_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	. "github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/routing"
)

// tb is what the checks need of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// apply applies t to s and checks what every Apply must keep: s unchanged,
// the result valid, the transition allowed. A refusal comes back as err.
func apply(tb tb, s *State, t Task) (*State, error) {
	tb.Helper()
	before := encode(tb, s)
	next, err := Apply(s, t)
	if after := encode(tb, s); after != before {
		tb.Fatalf("Apply(%s) modified its input state", t.Kind())
	}
	if err != nil {
		var re *RefusedError
		if !errors.As(err, &re) {
			tb.Fatalf("Apply(%s) = %v, want a *RefusedError or success", t.Kind(), err)
		}
		if next != nil {
			tb.Fatalf("Apply(%s) refused with %v but returned a state", t.Kind(), err)
		}
		return nil, err
	}
	if err := next.Validate(); err != nil {
		tb.Fatalf("after %s: %v", t.Kind(), err)
	}
	if err := CheckTransition(s, next, t); err != nil {
		tb.Fatalf("after %s: %v", t.Kind(), err)
	}
	return next, nil
}

func mustApply(tb tb, s *State, t Task) *State {
	tb.Helper()
	next, err := apply(tb, s, t)
	if err != nil {
		tb.Fatalf("Apply(%s) = %v, want success", t.Kind(), err)
	}
	return next
}

func encode(tb tb, s *State) string {
	tb.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		tb.Fatalf("encode: %v", err)
	}
	return string(b)
}

func node(name string) NodeInfo {
	return NodeInfo{Name: name, ID: "id-" + name, EphemeralID: "e1-" + name, TransportAddr: "127.0.0.1:93" + name[1:], HTTPAddr: "127.0.0.1:92" + name[1:]}
}

func bootstrap(tb testing.TB, names ...string) *State {
	tb.Helper()
	var nodes []NodeInfo
	for _, n := range names {
		nodes = append(nodes, node(n))
	}
	return mustApply(tb, &State{}, Task{Bootstrap: &Bootstrap{ClusterName: "c", ClusterUUID: "cluster-uuid", Nodes: nodes}})
}

// createTask creates an index whose replicas are rebuilt elsewhere at
// once when their node leaves (delayed_timeout 0); delayedTask keeps the
// default wait for the node to come back.
func createTask(name string, shards, replicas int) Task {
	t := delayedTask(name, shards, replicas, "0")
	return t
}

func delayedTask(name string, shards, replicas int, delayed string) Task {
	settings := map[string]string{
		"index.number_of_shards":   fmt.Sprint(shards),
		"index.number_of_replicas": fmt.Sprint(replicas),
	}
	if delayed != "" {
		settings[SettingDelayedTimeout] = delayed
	}
	return Task{CreateIndex: &CreateIndex{Name: name, UUID: "uuid-" + name, CreationDate: 1, Settings: settings}}
}

// startAll reports every initializing copy started until none is left.
func startAll(tb testing.TB, s *State) *State {
	tb.Helper()
	for range 100 {
		var todo []Task
		for c := range s.AllCopies() {
			if c.Copy.State == Initializing {
				todo = append(todo, Task{ShardStarted: &ShardStarted{Index: c.Index, Shard: c.Shard, AllocationID: c.Copy.AllocationID, PrimaryTerm: c.Term}})
			}
		}
		if len(todo) == 0 {
			return s
		}
		for _, t := range todo {
			s = mustApply(tb, s, t)
		}
	}
	tb.Fatal("copies kept initializing after 100 rounds of starts")
	return nil
}

// copyOn returns the copy of a shard on a node.
func copyOn(tb testing.TB, s *State, index string, shard routing.ShardID, node string) ShardCopy {
	tb.Helper()
	for _, c := range s.Indices[index].Copies[shard] {
		if c.Node == node {
			return c
		}
	}
	tb.Fatalf("[%s][%d] has no copy on %s: %+v", index, shard, node, s.Indices[index].Copies[shard])
	return ShardCopy{}
}

func primary(tb testing.TB, s *State, index string, shard routing.ShardID) ShardCopy {
	tb.Helper()
	p, ok := s.Primary(index, shard)
	if !ok {
		tb.Fatalf("[%s][%d] does not exist", index, shard)
	}
	return p
}

// replicas returns a shard's replica copies.
func replicas(s *State, index string, shard routing.ShardID) []ShardCopy {
	return slices.DeleteFunc(slices.Clone(s.Indices[index].Copies[shard]), func(c ShardCopy) bool { return c.Primary })
}
