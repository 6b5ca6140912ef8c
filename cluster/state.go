package cluster

import (
	"encoding/json"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/shardsplit/shardsplit/routing"
)

// ShardState is a copy's state in the routing table, named as OpenSearch's
// ShardRoutingState. RELOCATING and the split's SPLITTING are not modelled
// yet.
type ShardState string

const (
	Unassigned   ShardState = "UNASSIGNED"
	Initializing ShardState = "INITIALIZING"
	Started      ShardState = "STARTED"
)

// RecoverySource says where an initializing copy gets its data from, named
// as OpenSearch's RecoverySource.Type. A started copy has none (OpenSearch
// drops it on start).
type RecoverySource string

const (
	// EmptyStore: a primary of a shard that was never active (its in-sync
	// set is empty) starts empty.
	EmptyStore RecoverySource = "EMPTY_STORE"
	// ExistingStore: a primary opens the copy a node has on disk, whose
	// allocation id is in the in-sync set, under that same id.
	ExistingStore RecoverySource = "EXISTING_STORE"
	// Peer: a replica is built from the primary by peer recovery.
	Peer RecoverySource = "PEER"
	// InPlaceSplit: a child primary of a split is built on the parent
	// primary's node from a checkpoint of the parent's store, then follows
	// the parent's operations until the hand-off (the in-place split's
	// recovery source upstream).
	//
	// Under the local strategy a child replica is built the same way on a
	// parent replica's node, from that replica's store.
	InPlaceSplit RecoverySource = "IN_PLACE_SPLIT"
)

// Unassigned reasons, as OpenSearch's UnassignedInfo.Reason.
const (
	ReasonIndexCreated     = "INDEX_CREATED"
	ReasonNodeLeft         = "NODE_LEFT"
	ReasonReplicaAdded     = "REPLICA_ADDED"
	ReasonAllocationFailed = "ALLOCATION_FAILED"
	ReasonPrimaryFailed    = "PRIMARY_FAILED"
)

// Allocation statuses of an unassigned copy, as OpenSearch's
// UnassignedInfo.AllocationStatus values (their JSON spelling). Health
// reads them: a primary the allocator could not place is red.
const (
	StatusNoAttempt        = "no_attempt"
	StatusDecidersNo       = "decider_no"
	StatusNoValidShardCopy = "no_valid_shard_copy"
)

// NodeInfo is a member of the cluster (OpenSearch's DiscoveryNode). Every
// node holds data (OpenSearch's default roles); Manager marks the
// cluster-manager-eligible ones (raft voters).
type NodeInfo struct {
	Name string `json:"name"`
	// ID is the node's persistent id, kept in its data directory.
	ID string `json:"id"`
	// EphemeralID changes on every start of the node's process, as
	// DiscoveryNode's ephemeral id: a join with the same name and ID and
	// another EphemeralID is a restart (the copies the node held are gone
	// from memory and fail), a join with the same EphemeralID is a retry.
	EphemeralID   string `json:"ephemeral_id,omitempty"`
	RaftID        uint64 `json:"raft_id"`
	TransportAddr string `json:"transport_addr"`
	HTTPAddr      string `json:"http_addr"`
	Manager       bool   `json:"manager"`
	// Copies are the shard copies on the node's disk, at most one per
	// shard, sorted by index uuid and shard: what the node reported when
	// it joined (copies of indices the cluster does not have dropped), and
	// then what the allocator put there (a copy it initializes on the node
	// replaces the node's entry for that shard). PrimaryShardAllocator's
	// view of "which node holds which copy".
	Copies []LocalCopy `json:"copies,omitempty"`
}

// LocalCopy is one shard copy on a node's disk.
type LocalCopy struct {
	IndexUUID    string          `json:"index_uuid"`
	Shard        routing.ShardID `json:"shard"`
	AllocationID string          `json:"allocation_id"`
	// Primary reports that the copy was a primary when the node last had
	// it open; PrimaryShardAllocator prefers such a copy.
	Primary bool `json:"primary,omitempty"`
}

// ShardCopy is one entry of the routing table (OpenSearch's ShardRouting
// with its UnassignedInfo).
type ShardCopy struct {
	// AllocationID identifies an assigned copy; "" while unassigned (an
	// unassigned ShardRouting has no allocation id).
	AllocationID   string         `json:"allocation_id,omitempty"`
	Node           string         `json:"node,omitempty"` // node name; "" when unassigned
	Primary        bool           `json:"primary"`
	State          ShardState     `json:"state"`
	RecoverySource RecoverySource `json:"recovery_source,omitempty"`
	// UnassignedReason and UnassignedDetails say why the copy was last
	// unassigned (UnassignedInfo's reason and message); they stay while the
	// copy initializes and are cleared when it starts.
	UnassignedReason  string `json:"unassigned_reason,omitempty"`
	UnassignedDetails string `json:"unassigned_details,omitempty"`
	// FailedAllocations counts the failures since the copy was last active
	// (UnassignedInfo.getNumFailedAllocations).
	FailedAllocations int `json:"failed_allocations,omitempty"`
	// AllocationStatus is the allocator's last word on an unassigned copy.
	AllocationStatus string `json:"allocation_status,omitempty"`
	// LastNode is the node a replica was on when that node left
	// (UnassignedInfo.lastAllocatedNodeId), and Delayed that it waits for
	// that node to come back rather than be built elsewhere, until the
	// index's index.unassigned.node_left.delayed_timeout runs out
	// (DelayedAllocationService): a node that restarts gets its copies
	// back, rebuilt by peer recovery.
	LastNode string `json:"last_allocated_node,omitempty"`
	Delayed  bool   `json:"delayed,omitempty"`
}

// Active reports whether the copy serves (STARTED; RELOCATING later).
func (c ShardCopy) Active() bool { return c.State == Started }

// Assigned reports whether the copy is on a node.
func (c ShardCopy) Assigned() bool { return c.State != Unassigned }

// IndexMeta is an index: its metadata (OpenSearch's IndexMetadata) and its
// routing table (IndexRoutingTable) in one value.
//
// INVARIANTS (Validate): PrimaryTerms, InSync and Copies have exactly the
// shards of the routing table (its active shards and the children of its
// splits in progress; 0..Shards-1 while nothing was split); each shard has
// one primary copy and Replicas replica copies; InSync lists are sorted and
// never empty once a copy of the shard was active; Splits are the table's
// splits in progress.
type IndexMeta struct {
	Name         string `json:"name"`
	UUID         string `json:"uuid"`
	CreationDate int64  `json:"creation_date"`
	// Settings are the index's settings in flat form ("index.number_of_shards").
	Settings      map[string]string `json:"settings"`
	Mappings      json.RawMessage   `json:"mappings,omitempty"`
	Shards        int               `json:"number_of_shards"`
	Replicas      int               `json:"number_of_replicas"`
	RoutingShards int               `json:"routing_num_shards"`
	// PrimaryTerms: 0 until the shard's first primary initializes.
	PrimaryTerms map[routing.ShardID]uint64 `json:"primary_terms"`
	// InSync are the in-sync allocation ids: the copies a primary may be
	// chosen from.
	InSync map[routing.ShardID][]string    `json:"in_sync_allocations"`
	Copies map[routing.ShardID][]ShardCopy `json:"copies"`
	// Routing is the index's routing table (routing.Table.Encode) once a
	// split began; nil: the table its settings derive, shards
	// 0..Shards-1 (Table).
	Routing []byte `json:"routing,omitempty"`
	// Splits are the splits in progress, by parent shard (upstream's
	// SplitShardsMetadata): the children are reserved in Routing and have
	// copies, the parent serves their ranges until the hand-off.
	Splits map[routing.ShardID]ShardSplit `json:"splits,omitempty"`
	// Handoffs are the hand-off records of the splits committed, by
	// parent: from this record on the parent has no copy, and its ranges
	// are its children's.
	Handoffs map[routing.ShardID]Handoff `json:"handoffs,omitempty"`
	// Version counts changes to the index (its metadata or its copies).
	Version uint64 `json:"version"`
}

// ShardIDs returns the index's shards, ascending: those with copies (the
// routing table's active shards and the children of splits in progress).
func (im *IndexMeta) ShardIDs() []routing.ShardID {
	return slices.Sorted(maps.Keys(im.Copies))
}

// ServingShards returns the shards that own routing ranges, ascending:
// every shard but the children of splits in progress.
func (im *IndexMeta) ServingShards() []routing.ShardID {
	ids := im.ShardIDs()
	if len(im.Splits) == 0 {
		return ids
	}
	return slices.DeleteFunc(ids, func(id routing.ShardID) bool { _, child := im.SplitOf(id); return child })
}

// SplitOf returns the parent whose split in progress has child id.
func (im *IndexMeta) SplitOf(id routing.ShardID) (routing.ShardID, bool) {
	for _, p := range slices.Sorted(maps.Keys(im.Splits)) {
		if slices.Contains(im.Splits[p].Children, id) {
			return p, true
		}
	}
	return 0, false
}

// Table returns the index's routing table: Routing decoded, or the table
// its settings derive (index.number_of_shards,
// index.number_of_routing_shards, index.routing_partition_size,
// index.shardsplit.mode).
func (im *IndexMeta) Table() (*routing.Table, error) {
	if im.Routing != nil {
		return routing.Decode(im.Routing)
	}
	atoi := func(k string, def int) int {
		if v, err := strconv.Atoi(im.Settings[k]); err == nil {
			return v
		}
		return def
	}
	s, err := routing.NewSettings(im.Name, im.Shards, im.RoutingShards, atoi("index.routing_partition_size", 0))
	if err != nil {
		return nil, err
	}
	mode := routing.ModePartition
	if v := im.Settings["index.shardsplit.mode"]; v != "" {
		if mode, err = routing.ParseMode(v); err != nil {
			return nil, err
		}
	}
	return routing.NewTable(mode, s)
}

// Split phases: what the children of a split in progress wait for.
type SplitPhase string

const (
	// SplitCatchingUp: a child primary is initializing (built from the
	// parent's checkpoint, catching up with the parent's stream).
	SplitCatchingUp SplitPhase = "CATCHING_UP"
	// SplitRecoveringReplicas: every child primary started; a child
	// replica is not.
	SplitRecoveringReplicas SplitPhase = "RECOVERING_REPLICAS"
	// SplitReady: every child copy started and in its child's in-sync
	// set; the parent primary may block writes and hand off.
	SplitReady SplitPhase = "READY"
)

// ShardSplit is a split in progress.
type ShardSplit struct {
	// Children are the reserved child ids, ascending by range.
	Children []routing.ShardID `json:"children"`
	Phase    SplitPhase        `json:"phase"`
	// Strategy is how the children get replicas
	// (index.shardsplit.replica_split).
	Strategy string `json:"strategy"`
	// Cut, under the local strategy, is the agreed sequence number every
	// copy of the parent holds (at most every in-sync copy's local
	// checkpoint when the parent primary proposed it, SplitCut): each
	// copy builds its children from its own store only once the cut is
	// committed. Nil until then.
	Cut *int64 `json:"cut,omitempty"`
}

// ChildReplicasAfterHandoff reports whether the replicas of a child of
// the split wait for the hand-off (the handoff-first strategy).
func (sp ShardSplit) ChildReplicasAfterHandoff() bool { return sp.Strategy == StrategyHandoffFirst }

// Handoff is a committed split's hand-off record: the parent's primary
// term and the highest sequence number the parent assigned, which every
// child copy held when the parent blocked writes; the children continue
// the parent's sequence numbers from there.
type Handoff struct {
	Children   []routing.ShardID `json:"children"`
	ParentTerm uint64            `json:"parent_term"`
	MaxSeq     int64             `json:"max_seq"`
}

// State is the cluster state: a value, changed only by Apply.
type State struct {
	ClusterName string `json:"cluster_name"`
	// ClusterUUID is "" until Bootstrap.
	ClusterUUID string                `json:"cluster_uuid"`
	Version     uint64                `json:"version"`
	Nodes       map[string]NodeInfo   `json:"nodes"`
	Indices     map[string]*IndexMeta `json:"indices"`
	// NextAllocation numbers the next allocation id (AllocationID).
	NextAllocation uint64 `json:"next_allocation"`
}

// Bootstrapped reports whether the state has had its Bootstrap task.
func (s *State) Bootstrapped() bool { return s.ClusterUUID != "" }

// Primary returns the primary copy of a shard, and false when the index or
// shard does not exist.
func (s *State) Primary(index string, shard routing.ShardID) (ShardCopy, bool) {
	im := s.Indices[index]
	if im == nil {
		return ShardCopy{}, false
	}
	for _, c := range im.Copies[shard] {
		if c.Primary {
			return c, true
		}
	}
	return ShardCopy{}, false
}

// AllCopies yields every copy of every shard, in index name, shard and
// copy order, with the shard it belongs to.
func (s *State) AllCopies() iter.Seq[ShardCopyOf] {
	return func(yield func(ShardCopyOf) bool) {
		for _, name := range s.IndexNames() {
			im := s.Indices[name]
			for _, shard := range im.ShardIDs() {
				for _, c := range im.Copies[shard] {
					if !yield(ShardCopyOf{Index: name, IndexUUID: im.UUID, Shard: shard, Term: im.PrimaryTerms[shard], Copy: c}) {
						return
					}
				}
			}
		}
	}
}

// CopiesOn returns the copies assigned to a node, in AllCopies order.
func (s *State) CopiesOn(node string) []ShardCopyOf {
	var out []ShardCopyOf
	for c := range s.AllCopies() {
		if c.Copy.Node == node {
			out = append(out, c)
		}
	}
	return out
}

// ShardCopyOf is a copy with the shard it belongs to and the shard's
// primary term.
type ShardCopyOf struct {
	Index     string
	IndexUUID string
	Shard     routing.ShardID
	Term      uint64
	Copy      ShardCopy
}

// IndexNames returns the index names, sorted: the order every loop over
// indices takes, so that Apply is deterministic.
func (s *State) IndexNames() []string { return slices.Sorted(maps.Keys(s.Indices)) }

// NodeNames returns the node names, sorted.
func (s *State) NodeNames() []string { return slices.Sorted(maps.Keys(s.Nodes)) }

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := *s
	c.Nodes = make(map[string]NodeInfo, len(s.Nodes))
	for k, n := range s.Nodes {
		n.Copies = slices.Clone(n.Copies)
		c.Nodes[k] = n
	}
	c.Indices = make(map[string]*IndexMeta, len(s.Indices))
	for k, im := range s.Indices {
		cl := im.clone()
		cl.Settings = maps.Clone(im.Settings)
		cl.Mappings = slices.Clone(im.Mappings)
		c.Indices[k] = cl
	}
	return &c
}

// clone copies what Apply may change in place: the per-shard maps and the
// copy slices. Settings and Mappings are shared (replaced, never edited).
func (im *IndexMeta) clone() *IndexMeta {
	c := *im
	c.PrimaryTerms = maps.Clone(im.PrimaryTerms)
	c.InSync = make(map[routing.ShardID][]string, len(im.InSync))
	for k, v := range im.InSync {
		c.InSync[k] = slices.Clone(v)
	}
	c.Copies = make(map[routing.ShardID][]ShardCopy, len(im.Copies))
	for k, v := range im.Copies {
		c.Copies[k] = slices.Clone(v)
	}
	c.Splits = maps.Clone(im.Splits)
	c.Handoffs = maps.Clone(im.Handoffs)
	return &c
}

// inSync reports whether aid is in the shard's in-sync set.
func (im *IndexMeta) inSync(shard routing.ShardID, aid string) bool {
	return aid != "" && slices.Contains(im.InSync[shard], aid)
}

// copyIndex returns the position of the assigned copy with allocation id
// aid among the shard's copies, or -1.
func (im *IndexMeta) copyIndex(shard routing.ShardID, aid string) int {
	if aid == "" {
		return -1
	}
	return slices.IndexFunc(im.Copies[shard], func(c ShardCopy) bool { return c.AllocationID == aid })
}

// sortCopies puts a shard's copies in the one order the state keeps:
// the primary, then assigned replicas by node name, then unassigned
// replicas in the order they became unassigned.
func sortCopies(cs []ShardCopy) {
	slices.SortStableFunc(cs, func(x, y ShardCopy) int {
		if x.Primary != y.Primary {
			if x.Primary {
				return -1
			}
			return 1
		}
		if x.Assigned() != y.Assigned() {
			if x.Assigned() {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Node, y.Node)
	})
}
