// Package cluster is the cluster state as a value: the nodes, every
// index's metadata (settings, primary terms, in-sync allocation ids) and
// its routing table (the copies of each shard: allocation id, node,
// primary or replica, UNASSIGNED/INITIALIZING/STARTED, recovery source),
// and the tasks that change it. The cluster manager's raft log is a list
// of Tasks; every node applies the committed ones in order with Apply and
// so holds the same state.
//
// # Contract
//
// The package is pure, like routing: no I/O, clock, goroutines, logging
// or randomness. Apply(state, task) is deterministic (the same inputs give
// byte-identical JSON on every node), never modifies its input, refuses a
// task that does not fit the state with a *RefusedError (a stale shard
// report among them, which the caller may ignore), and ends every applied
// task with the allocator (reroute). Allocation ids are derived from the
// cluster uuid and a counter in the state (AllocationID), not drawn at
// random. States are shared between versions (copy-on-write): treat a
// *State from Apply as immutable, and Clone it to edit it.
//
// # OpenSearch's rules, and where they come from
//
// Each rule follows the OpenSearch class named beside it (paths under
// server/src/main/java/org/opensearch/cluster/):
//
//   - Primary terms and in-sync ids (routing/allocation/IndexMetadataUpdater):
//     a primary's initialization raises its shard's term (a new shard's
//     first primary gets term 1), as does the failure of an active
//     primary, at most once per task; an id joins the in-sync set when its
//     copy starts, leaves it when a failure marks it stale, and the set is
//     trimmed to number_of_replicas + 1 only when it grows past that.
//     A node leaving does not remove its copies' ids.
//   - Failures and promotion (routing/RoutingNodes.failShard): a failed
//     primary takes its recovering replicas with it, and a started in-sync
//     replica (lowest node name) is promoted in its place.
//   - Shard started and failed reports (action/shard/ShardStateAction):
//     stale reports change nothing; a failure reported by a primary of an
//     older term is refused ("primary term [x] did not match current
//     primary term [y]"); a primary may mark an in-sync id with no copy in
//     the routing table stale.
//   - Allocation (routing/allocation/AllocationService,
//     gateway/PrimaryShardAllocator, the deciders; see reroute): a primary
//     of a shard that was ever active opens only an in-sync copy on a
//     node's disk; replicas wait for an active primary; never two copies
//     of a shard on one node; copies go to the node with the fewest.
//   - Health (health/ClusterShardHealth, ClusterIndexHealth,
//     ClusterStateHealth).
//
// Where OpenSearch keeps routing apart from metadata (RoutingTable beside
// IndexMetadata), an IndexMeta holds both, and its Version counts changes
// to either.
package cluster
