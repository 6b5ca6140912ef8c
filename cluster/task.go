package cluster

import (
	"encoding/json"

	"github.com/shardsplit/shardsplit/routing"
)

// Task is one change to the cluster state: an entry of the cluster
// manager's log. It is a tagged union: exactly one field is non-nil.
type Task struct {
	Bootstrap      *Bootstrap      `json:"bootstrap,omitempty"`
	NodeJoined     *NodeJoined     `json:"node_joined,omitempty"`
	NodeLeft       *NodeLeft       `json:"node_left,omitempty"`
	CreateIndex    *CreateIndex    `json:"create_index,omitempty"`
	DeleteIndex    *DeleteIndex    `json:"delete_index,omitempty"`
	UpdateReplicas *UpdateReplicas `json:"update_replicas,omitempty"`
	ShardStarted   *ShardStarted   `json:"shard_started,omitempty"`
	ShardFailed    *ShardFailed    `json:"shard_failed,omitempty"`
	Reroute        *Reroute        `json:"reroute,omitempty"`
	SplitShard     *SplitShard     `json:"split_shard,omitempty"`
	SplitHandoff   *SplitHandoff   `json:"split_handoff,omitempty"`
	SplitCancel    *SplitCancel    `json:"split_cancel,omitempty"`
	SplitCut       *SplitCut       `json:"split_cut,omitempty"`
}

// Bootstrap is the first task of a cluster: its name, uuid and first nodes
// (cluster.initial_cluster_manager_nodes once they found each other).
type Bootstrap struct {
	ClusterName string     `json:"cluster_name"`
	ClusterUUID string     `json:"cluster_uuid"`
	Nodes       []NodeInfo `json:"nodes"`
}

// NodeJoined adds a node, or replaces the info of a node of the same name
// and id (JoinTaskExecutor). Node.Copies are the copies on its disk.
type NodeJoined struct {
	Node NodeInfo `json:"node"`
}

// NodeLeft removes a node (NodeRemovalClusterStateTaskExecutor): the
// failure detector lost it, or it shut down. EphemeralID, when set, names
// the incarnation that left: a NodeLeft for an earlier incarnation of a
// node that has since restarted and joined is stale.
type NodeLeft struct {
	Name        string `json:"name"`
	EphemeralID string `json:"ephemeral_id,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// CreateIndex creates an index (MetadataCreateIndexService). Settings are
// validated by the caller and include index.number_of_shards and
// index.number_of_replicas; index.number_of_routing_shards defaults to the
// number of shards.
type CreateIndex struct {
	Name         string            `json:"name"`
	UUID         string            `json:"uuid"`
	CreationDate int64             `json:"creation_date"`
	Settings     map[string]string `json:"settings"`
	Mappings     json.RawMessage   `json:"mappings,omitempty"`
}

// DeleteIndex deletes an index (MetadataDeleteIndexService). UUID, when
// set, must match: a delete meant for an index that was since recreated
// under the same name is refused.
type DeleteIndex struct {
	Name string `json:"name"`
	UUID string `json:"uuid,omitempty"`
}

// UpdateReplicas sets index.number_of_replicas
// (MetadataUpdateSettingsService).
type UpdateReplicas struct {
	Index    string `json:"index"`
	Replicas int    `json:"replicas"`
}

// ShardStarted reports that an initializing copy finished its recovery
// (ShardStateAction.shardStarted). PrimaryTerm is the term the copy was
// started under when it is a primary (0: not checked).
type ShardStarted struct {
	Index        string          `json:"index"`
	Shard        routing.ShardID `json:"shard"`
	AllocationID string          `json:"allocation_id"`
	PrimaryTerm  uint64          `json:"primary_term"`
}

// ShardFailed reports a failed copy (ShardStateAction.shardFailed). A
// copy that fails itself sends PrimaryTerm 0; a primary that could not
// replicate to a copy sends its own term, and the task is refused when the
// term is no longer the shard's (the sender is no longer primary).
// MarkStale removes the copy's id from the in-sync set.
type ShardFailed struct {
	Index        string          `json:"index"`
	Shard        routing.ShardID `json:"shard"`
	AllocationID string          `json:"allocation_id"`
	PrimaryTerm  uint64          `json:"primary_term"`
	MarkStale    bool            `json:"mark_stale"`
	Reason       string          `json:"reason,omitempty"`
}

// Reroute runs the allocator alone (RerouteService): after a failure left
// copies unassigned because they may not go back to the node they failed
// on in the same round, the cluster manager proposes one.
type Reroute struct {
	Reason string `json:"reason,omitempty"`
	// ExpireDelayed names nodes whose delayed replicas waited out their
	// index's delayed_timeout: they are built elsewhere from now on.
	ExpireDelayed []string `json:"expire_delayed,omitempty"`
}

// SplitShard begins the in-place split of a started shard into Children
// children (the routing table's begin-split edit; upstream's splitShard):
// the child ids are reserved; each child gets the parent's primary term,
// its primary initializes on the parent primary's node (IN_PLACE_SPLIT)
// and its replicas wait, unassigned, for it to start.
type SplitShard struct {
	Index    string          `json:"index"`
	Shard    routing.ShardID `json:"shard"`
	Children int             `json:"children"`
}

// SplitHandoff is the hand-off record and the commit of a split in one
// task: the parent primary blocked its writes at MaxSeq under ParentTerm,
// and every child copy holds them. The children replace the parent in the
// routing table and the parent's copies, term and in-sync set are removed.
type SplitHandoff struct {
	Index      string          `json:"index"`
	Shard      routing.ShardID `json:"shard"`
	ParentTerm uint64          `json:"parent_term"`
	MaxSeq     int64           `json:"max_seq"`
}

// SplitCut records the agreed cut of a split under the local strategy:
// the parent primary, under ParentTerm, proposes a sequence number every
// in-sync copy of the parent holds (its global checkpoint). Every copy of
// the parent builds its children from its own store once the cut is
// committed, and the parent primary retains its history above the cut
// for them.
type SplitCut struct {
	Index      string          `json:"index"`
	Shard      routing.ShardID `json:"shard"`
	ParentTerm uint64          `json:"parent_term"`
	Seq        int64           `json:"seq"`
}

// SplitCancel cancels a split in progress (the routing table's
// cancel-split edit): the children and their copies are removed; the
// parent serves on as before.
type SplitCancel struct {
	Index  string          `json:"index"`
	Shard  routing.ShardID `json:"shard"`
	Reason string          `json:"reason,omitempty"`
}

// Kind names the task's variant ("create-index"), or "invalid" when not
// exactly one is set.
func (t Task) Kind() string {
	kinds := []struct {
		set  bool
		name string
	}{
		{t.Bootstrap != nil, "bootstrap"},
		{t.NodeJoined != nil, "node-joined"},
		{t.NodeLeft != nil, "node-left"},
		{t.CreateIndex != nil, "create-index"},
		{t.DeleteIndex != nil, "delete-index"},
		{t.UpdateReplicas != nil, "update-replicas"},
		{t.ShardStarted != nil, "shard-started"},
		{t.ShardFailed != nil, "shard-failed"},
		{t.Reroute != nil, "reroute"},
		{t.SplitShard != nil, "split-shard"},
		{t.SplitHandoff != nil, "split-handoff"},
		{t.SplitCancel != nil, "split-cancel"},
		{t.SplitCut != nil, "split-cut"},
	}
	name := "invalid"
	n := 0
	for _, k := range kinds {
		if k.set {
			name = k.name
			n++
		}
	}
	if n != 1 {
		return "invalid"
	}
	return name
}
