package coordination

import (
	"github.com/shardsplit/shardsplit/cluster"
)

// Message kinds of the cluster manager. Every body carries the sender's
// cluster uuid ("" before the cluster is bootstrapped): a node drops a
// message from another cluster, so two clusters whose nodes share
// addresses never mix their logs.
const (
	// KindHello is discovery: sent to seed addresses until the node has
	// bootstrapped or joined, answered with a hello.
	KindHello = "cm/hello"
	// KindRaft carries one raft message.
	KindRaft = "cm/raft"
	// KindJoin asks the leader to add the sender (a raft learner if it is
	// not a member yet) and to record it with its local copies.
	KindJoin = "cm/join"
	// KindJoinRefused answers a join the cluster refuses for good.
	KindJoinRefused = "cm/join_refused"
	// KindPropose carries a task to the leader.
	KindPropose = "cm/propose"
	// KindHeartbeat is a node's follower check, sent to the leader every
	// tick with the raft index it applied.
	KindHeartbeat = "cm/heartbeat"
	// KindHeartbeatAck answers a heartbeat: the leader's term and the
	// smallest index every node of the cluster has applied.
	KindHeartbeatAck = "cm/heartbeat_ack"
)

type hello struct {
	Cluster string `json:"cluster"`
	Name    string `json:"name"`
	ID      string `json:"id"`
	RaftID  uint64 `json:"raft_id"`
	Addr    string `json:"addr"`
	Manager bool   `json:"manager"`
	Reply   bool   `json:"reply,omitempty"`
}

type raftEnvelope struct {
	Cluster string `json:"cluster"`
	Data    []byte `json:"data"`
}

type joinRequest struct {
	Cluster string           `json:"cluster"`
	Node    cluster.NodeInfo `json:"node"`
}

type joinRefused struct {
	Cluster string `json:"cluster"`
	Reason  string `json:"reason"`
}

type proposeRequest struct {
	Cluster string `json:"cluster"`
	Entry   []byte `json:"entry"`
}

type heartbeat struct {
	Cluster string `json:"cluster"`
	Name    string `json:"name"`
	ID      string `json:"id"`
	Seq     uint64 `json:"seq"`
	Applied uint64 `json:"applied"`
}

type heartbeatAck struct {
	Cluster    string `json:"cluster"`
	Seq        uint64 `json:"seq"`
	Term       uint64 `json:"term"`
	MinApplied uint64 `json:"min_applied"`
}

// entry is what a normal raft entry holds: one task, the node and the
// request id that proposed it. Request ids make a task's effect happen
// once however often its proposal is retried (see dedup).
type entry struct {
	Req  string       `json:"req"`
	From string       `json:"from"`
	Task cluster.Task `json:"task"`
}
