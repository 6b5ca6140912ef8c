package cluster_test

import (
	"errors"
	"testing"

	. "github.com/shardsplit/shardsplit/cluster"
)

// TestValidateCatchesBrokenStates breaks one invariant at a time on a
// clone of a green state.
func TestValidateCatchesBrokenStates(t *testing.T) {
	green := green3(t) // [i][0]: primary n1, replica n3; [i][1]: primary n2, replica n1
	for _, tc := range []struct {
		name    string
		breakIt func(s *State)
	}{
		{"two primaries", func(s *State) { s.Indices["i"].Copies[0][1].Primary = true }},
		{"two copies on a node", func(s *State) { s.Indices["i"].Copies[0][1].Node = "n1" }},
		{"a copy on a node not in the cluster", func(s *State) { delete(s.Nodes, "n3") }},
		{"a started copy not in sync", func(s *State) { s.Indices["i"].InSync[0] = s.Indices["i"].InSync[0][:1] }},
		{"a copy missing", func(s *State) { s.Indices["i"].Copies[0] = s.Indices["i"].Copies[0][:1] }},
		{"a shard missing its term", func(s *State) { delete(s.Indices["i"].PrimaryTerms, 1) }},
		{"an assigned primary at term 0", func(s *State) { s.Indices["i"].PrimaryTerms[1] = 0 }},
		{"an allocation id used twice", func(s *State) {
			s.Indices["i"].Copies[1][1].AllocationID = s.Indices["i"].Copies[0][0].AllocationID
		}},
		{"an unassigned copy with a node", func(s *State) {
			s.Indices["i"].Copies[0][1].State = Unassigned
			s.Indices["i"].Copies[0][1].UnassignedReason = ReasonNodeLeft
		}},
		{"a replica started beside an unassigned primary", func(s *State) {
			s.Indices["i"].Copies[0][0] = ShardCopy{Primary: true, State: Unassigned, RecoverySource: ExistingStore, UnassignedReason: ReasonNodeLeft}
		}},
		{"a node's disk missing a copy assigned to it", func(s *State) {
			n := s.Nodes["n3"]
			n.Copies = nil
			s.Nodes["n3"] = n
		}},
		{"two nodes with one id", func(s *State) {
			n := s.Nodes["n2"]
			n.ID = "id-n1"
			s.Nodes["n2"] = n
		}},
		{"in-sync ids out of order", func(s *State) {
			in := s.Indices["i"].InSync[0]
			in[0], in[1] = in[1], in[0]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := green.Clone()
			tc.breakIt(s)
			if err := s.Validate(); !errors.Is(err, ErrInvalidState) {
				t.Errorf("Validate() = %v, want ErrInvalidState", err)
			}
		})
	}
	if err := green.Validate(); err != nil {
		t.Fatalf("the green state itself: %v", err)
	}
}

// TestCheckTransitionCatchesBrokenSteps breaks one rule between two states.
func TestCheckTransitionCatchesBrokenSteps(t *testing.T) {
	prev := green3(t)
	reroute := Task{Reroute: &Reroute{}}
	for _, tc := range []struct {
		name    string
		task    Task
		breakIt func(s *State)
	}{
		{"a term went back", reroute, func(s *State) { s.Indices["i"].PrimaryTerms[0] = 0 }},
		{"an id joined the in-sync set without a start", reroute, func(s *State) {
			s.Indices["i"].InSync[0] = append(s.Indices["i"].InSync[0], "zzz")
		}},
		{"a replica was promoted without a new term", reroute, func(s *State) {
			cs := s.Indices["i"].Copies[0]
			cs[0].Primary, cs[1].Primary = false, true
		}},
		{"an index changed under its old version", reroute, func(s *State) {
			s.Indices["i"].Version--
			s.Indices["i"].Settings = map[string]string{"x": "y"}
		}},
		{"an index vanished", reroute, func(s *State) { delete(s.Indices, "i") }},
		{"the version did not grow by one", reroute, func(s *State) { s.Version++ }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, err := Apply(prev, tc.task)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckTransition(prev, next, tc.task); err != nil {
				t.Fatalf("before breaking it: %v", err)
			}
			next = next.Clone()
			tc.breakIt(next)
			if err := CheckTransition(prev, next, tc.task); !errors.Is(err, ErrInvalidState) {
				t.Errorf("CheckTransition = %v, want ErrInvalidState", err)
			}
		})
	}
}
