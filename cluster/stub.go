// Package cluster: a stand-in with the agreed API, replaced by the real
// package when its branch lands.
package cluster

import (
	"encoding/json"
	"fmt"

	"github.com/shardsplit/shardsplit/routing"
)

type ShardState string
type RecoverySource string

const (
	Unassigned   ShardState = "UNASSIGNED"
	Initializing ShardState = "INITIALIZING"
	Started      ShardState = "STARTED"
)

type NodeInfo struct {
	Name          string      `json:"name"`
	ID            string      `json:"id"`
	RaftID        uint64      `json:"raft_id"`
	TransportAddr string      `json:"transport_addr"`
	HTTPAddr      string      `json:"http_addr"`
	Manager       bool        `json:"manager"`
	Incarnation   string      `json:"incarnation"`
	Copies        []LocalCopy `json:"copies,omitempty"`
}
type LocalCopy struct {
	IndexUUID    string          `json:"index_uuid"`
	Shard        routing.ShardID `json:"shard"`
	AllocationID string          `json:"allocation_id"`
}
type IndexMeta struct {
	Name string `json:"name"`
}
type State struct {
	ClusterName string              `json:"cluster_name"`
	ClusterUUID string              `json:"cluster_uuid"`
	Version     uint64              `json:"version"`
	Nodes       map[string]NodeInfo `json:"nodes"`
	Indices     map[string]*IndexMeta
}
type Bootstrap struct {
	ClusterName string     `json:"cluster_name"`
	ClusterUUID string     `json:"cluster_uuid"`
	Nodes       []NodeInfo `json:"nodes,omitempty"`
}
type NodeJoined struct {
	Node NodeInfo `json:"node"`
}
type NodeLeft struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}
type Task struct {
	Bootstrap  *Bootstrap  `json:"bootstrap,omitempty"`
	NodeJoined *NodeJoined `json:"node_joined,omitempty"`
	NodeLeft   *NodeLeft   `json:"node_left,omitempty"`
}
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return e.Reason }

func (s *State) Clone() *State {
	b, _ := json.Marshal(s)
	var c State
	_ = json.Unmarshal(b, &c)
	if c.Nodes == nil {
		c.Nodes = map[string]NodeInfo{}
	}
	return &c
}

func Apply(s *State, t Task) (*State, error) {
	c := s.Clone()
	switch {
	case t.Bootstrap != nil:
		if c.ClusterUUID != "" {
			return nil, &RefusedError{"already bootstrapped"}
		}
		c.ClusterName, c.ClusterUUID = t.Bootstrap.ClusterName, t.Bootstrap.ClusterUUID
	case c.ClusterUUID == "":
		return nil, &RefusedError{"not bootstrapped"}
	case t.NodeJoined != nil:
		if o, ok := c.Nodes[t.NodeJoined.Node.Name]; ok && o.ID != t.NodeJoined.Node.ID {
			return nil, &RefusedError{fmt.Sprintf("a node named [%s] with id [%s] is already in the cluster", o.Name, o.ID)}
		}
		c.Nodes[t.NodeJoined.Node.Name] = t.NodeJoined.Node
	case t.NodeLeft != nil:
		if _, ok := c.Nodes[t.NodeLeft.Name]; !ok {
			return nil, &RefusedError{"no such node"}
		}
		delete(c.Nodes, t.NodeLeft.Name)
	default:
		return nil, &RefusedError{"empty task"}
	}
	c.Version++
	return c, nil
}
