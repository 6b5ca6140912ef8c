// Package clustersim is the seeded multi-node simulation of the cluster:
// nodes (clusternode) over the in-memory network (transport.Network), on
// crashable in-memory disks (storage/crashfs), under one scheduler that
// draws everything from the seed. One seed is one run; a failing seed
// reproduces.
//
//	go test ./tests/sim/cluster            # 300 seeds (60 under -race)
//	SHARDSPLIT_SIM_SEED=123 SHARDSPLIT_SIM_SEEDS=1 go test ./tests/sim/cluster -run 'TestClusterSim$' -v
//
// The package has only test files and this doc.
//
// # A run
//
// The seed first draws the run's swarm: 3-5 nodes (every one
// cluster-manager-eligible), an index of 1-3 shards with 1-2 replicas,
// 4-16 document ids, 2-5 clients, 150-349 steps, and the odds of every
// fault (below). The cluster forms and the index goes green with no
// fault; then the safety steps. Each step:
//
//   - every idle client starts, with odds 1/2, one operation through a
//     live node drawn at the call: an index of a unique value, a delete,
//     or a get. A client has one operation in flight; the node routes it
//     to the primary (retrying against newer states), and the client
//     sees the answer when the scheduler delivers it.
//   - a fault may strike (below);
//   - a share of the pending messages (30-100 %, the swarm's) is
//     delivered one by one in a seeded order, each dropped or duplicated
//     with the swarm's odds (0-3 % each); the rest waits for a later step
//     (delay, and so reordering);
//   - every live node ticks;
//   - the per-step checks run.
//
// Then the quiet phase: the network heals, disk faults stop, dead nodes
// restart, and within 1,500 rounds of full delivery the cluster must
// settle: every node on one state, the index green, every started copy
// open with its primary's local and global checkpoints, no client waiting.
// Every key is then read once more, the copies compared, and porcupine
// checks the history of the sampled keys.
//
// # Faults
//
//   - Node crash (power loss): the disk is cloned as a crash would leave
//     it (crashfs: what was not synced is gone, or in a quarter of the
//     seeds a random 1-100 % of it kept), the messages on their way to the
//     node are lost, and the process's engines are closed on the old disk.
//     Its clients' requests fail (their outcome unknown).
//   - Restart of a dead node: a new incarnation (ephemeral id) opens the
//     crashed disk.
//   - The cluster manager's leader killed: a crash of the node whose raft
//     role is leader with a quorum.
//   - Partitions: a node isolated, two nodes cut both ways, or one way
//     only; at most three cuts at a time, and a heal of all of them.
//   - Message faults: drop, duplicate, delay, reorder (above).
//   - Disk faults: for 1-8 steps, 10-60 % of one node's writes of the files
//     the node writes itself fail with EIO: its copies' COPY records and a
//     peer recovery's file chunks. Pebble's own files are spared: Pebble
//     takes a failed WAL or MANIFEST write as fatal to the process (the
//     single-node simulation, tests/sim, covers that path), and its
//     background goroutines would make the order of faults depend on the
//     scheduler.
//
// # Checks
//
// After every step:
//
//   - gcp <= lcp: for every shard whose primary (by the latest committed
//     state any live node applied) is open under the state's term, its
//     global checkpoint is at most the local checkpoint of every copy of
//     the state's in-sync set that a live node has open.
//   - The global checkpoint of an in-sync copy never goes down within one
//     life of its node, closed and opened again on its files or not (a
//     copy keeps it with its files, durable with its next synced write,
//     so a crash may take back what was not synced).
//   - Every acknowledged write is on every in-sync copy, or that copy was
//     removed by a committed state first: when a primary's node sends a
//     write's acknowledgement (seen on the network), and when the client
//     takes it, every copy the latest committed state (the newest any
//     node applied, dead nodes included: a committed state outlives the
//     nodes that applied it) names in sync that a live node has open has
//     a local checkpoint at or above the write's sequence number.
//
// On every committed state every node applies (Manager.OnApply):
//
//   - a shard's primary changes only to a copy of the previous state's
//     in-sync set, and only with a strictly greater primary term; terms
//     never go down.
//
// After every read: the value is one internal/model allows between the
// read's call and its return (no acknowledged write lost, none undone by
// an older one). A write that returned an error stays of unknown outcome
// for good: its request may still be on its way to a primary.
//
// At the end: porcupine finds the history of four sampled keys
// linearizable (a write whose outcome is unknown never returns); every
// started copy of every shard holds the same documents.
//
// # Splits
//
// TestClusterSplitSim runs the same seeds with a split (split_test.go):
// the index gets 8 routing partitions per shard, and one shard, drawn by
// the seed, is split in place into 2 or 3 children through
// Node.SplitShard, the SplitShard task the REST split proposes,
// from a live node drawn at the call, under the clients' writes, reads
// and match-all searches (one client call in six). A request refused
// (a copy not started) is repeated 3-8 steps later; before each, the
// split readies the cluster as an operator would (heals the swarm's
// partitions, restarts a dead node); a split rolled back begins again,
// at most three times. In two seeds of three the swarm's own crashes and
// partitions wait from the request until the seed's fault struck.
//
// The seed's strategy (index.shardsplit.replica_split, set on the index;
// strategyOf) is recover, local or handoff-first: consecutive walks of 45
// seeds take them in turn (seeds 1-45 recover, 46-90 local, 91-135
// handoff-first, and again), so every strategy meets every cell once in
// each of its walks. The seed's plan line and its rerun line name it.
//
// Each seed places one fault at one point (cellOf: seeds walk the 30
// cells, those of P3-P5 twice in every 45 seeds), at the first moment
// (after any delivered message or round of ticks) the split is there:
//
//	P0  before the split: the fault, then the request 1-4 steps later
//	P1  child catch-up: the split's phase CATCHING_UP
//	P2  child primaries in sync, child replicas recovering: RECOVERING_REPLICAS
//	    (under local, the child replicas building beside the parent
//	    replicas; none under handoff-first, whose child replicas are
//	    assigned by the hand-off)
//	P3  hand-off in progress: READY, the parent primary holds its writes
//	P4  the hand-off record and the metadata commit are one raft entry
//	    (SplitHandoff): committed and applied by a node while the parent
//	    primary's node has not applied it (none when that node leads: it
//	    applies the entry as it learns it is committed)
//	P5  the parent primary's node applied it (its parent retired and
//	    deleted there), a parent replica still open on a node that has not
//	    applied it
//
// The faults: kill the parent primary's node; kill a child replica's node
// (before child replicas are assigned, P0-P1, a parent replica's node,
// where the allocator puts them); kill the cluster manager's leader; cut
// the parent primary's node from the cluster manager, and a coordinator
// (neither the leader nor the parent primary's node) from it: the
// cluster-manager traffic (cm/*) between the node and the leader is
// dropped both ways, the documents' traffic is not (a leader cut from the
// manager is cut from every other node). A killed node restarts and a cut
// heals 5-34 steps later.
//
// Checks, besides those above:
//
//   - on every committed state a node applies: after the hand-off record
//     no parent copy is promotable (the parent has no copies and no
//     in-sync set, none of its allocation ids is a copy of any shard,
//     and the record stays); a split is committed in the routing table
//     only with its record; the hand-off commits only with every child
//     copy started and in sync (under handoff-first, every child
//     primary), and every in-sync child copy open on the
//     applying node has a local checkpoint at or above the record's
//     sequence number: it advanced over the operations of the other
//     children's ranges, which it filtered out;
//   - at every moment: a node that applied the hand-off holds no parent
//     copy as primary;
//   - every search: no document counted twice (parent and children both
//     visible for one range), a total equal to its hits;
//   - once settled (which now also waits for the split to end and every
//     node to let go of the parent): every document in the shard owning
//     its routing partition in the committed table and in no other, every
//     serving shard's primary open as a primary.
//
// The test prints, per strategy, the matrix: per cell, the seeds whose
// fault struck there of those that tried it, and how their splits ended
// (handed off, rolled back or never begun, seed failed), and the cells
// no seed of the strategy reached (P2 apart under handoff-first, which
// has no such point); the failed seeds per strategy; and the ten slowest
// seeds with their steps and rounds. Over 300 seeds or more it fails if
// a cell was reached by no strategy.
//
//	SHARDSPLIT_SIM_SEED=21 SHARDSPLIT_SIM_SEEDS=1 go test ./tests/sim/cluster -run 'TestClusterSplitSim$' -v
//
// # Trace
//
// Every step appends lines "SSSS action outcome": the swarm first, then
// client operations with their answers (shard, sequence number, term,
// copies), crashes, restarts, partitions, heals, disk faults, the quiet
// phase, and the finding. A failing seed prints its reproduction line and
// the last 40 lines. SHARDSPLIT_SIM_LOG=1 prints every node's log and
// every state the first node applies, each line with its step: for one
// seed.
//
// # Knobs
//
//	SHARDSPLIT_SIM_SEEDS=N        how many seeds (default 300; 60 under -race)
//	SHARDSPLIT_SIM_SEED=S         the first seed (default 1)
//	SHARDSPLIT_SIM_DETERMINISM=1  run TestClusterSimDeterminism: the first 50 seeds (or N)
//	                              twice, reporting how many gave the same trace hash
//	SHARDSPLIT_SIM_SPLIT=1        TestClusterSimDeterminism runs the split seeds
//	SHARDSPLIT_SIM_PROGRESS=1     print each seed as it starts
//	SHARDSPLIT_SIM_LOG=1          the nodes' logs (above)
//
// Seeds run on GOMAXPROCS workers; a seed itself is sequential.
//
// # Determinism
//
// A node starts no goroutine and reads no clock: the scheduler steps it.
// Everything the scheduler decides comes from the seed's PCG: the swarm,
// client operations and their nodes, which pending message goes next,
// drops, duplicates, faults, crash clones; each node's randomness (raft's
// election timeouts, uuids) comes from a PCG seeded from it; the disk
// faults draw from their own PCG under a lock. What is left is Pebble's
// background work (flushes, compactions) on its own goroutines, which
// changes files on the in-memory disks but not what a read returns; a
// crash clone that keeps a share of unsynced bytes can depend on it. Same
// seed, same trace: TestClusterSimDeterminism counts the seeds whose trace
// hash is the same in two runs.
//
// # Mutations
//
// mutations/*.patch re-introduce classic bugs of document replication,
// one at a time, to show the simulation finds them; they are never live
// code (TestMutationsApply checks that each still applies):
//
//	git apply tests/sim/cluster/mutations/earlyack.patch && go test ./tests/sim/cluster; git apply -R tests/sim/cluster/mutations/earlyack.patch
//
//	stalepromote  a copy outside the in-sync set may become primary (promotion
//	              of a replica, or a primary opened from a copy on disk; the
//	              state's own check of the latter lifted too)
//	earlyack      a primary acknowledges without a copy it asked to fail
//	              before the cluster state removing it is committed
//	noresync      a new primary does not have the other copies undo what
//	              they hold above its local checkpoint (PrimaryReplicaSyncer's
//	              trim)
//
// Seeds that catch each (of 1-300, the CI count; the first counting from
// 1), with copies keeping their global checkpoint with their files and
// recovery targets repeating that they opened their files:
//
//	stalepromote  seed 4   (97/300)  "nN applied vN: shard N's primary became ID on nN, not in the in-sync set [...]"
//	earlyack      seed 27  (25/300)  "nN's acknowledgement of nN's request N (shard N seq N term N): in-sync copy ID on nN has local checkpoint N"
//	noresync      seed 111 (2/300)   "copy ID on nN took the primary's term N yet holds operations to N, past the primary ID's local checkpoint N"
//
// Three more re-introduce the split's classic bugs; TestClusterSplitSim
// catches them (seeds 1-135: 45 of each strategy):
//
//	parentpromote  the parent keeps its copies after the hand-off, its
//	               replicas promotable should its primary fail (the rule
//	               "if the parent primary fails, promote a parent replica"
//	               applied after the hand-off); the state's own check lifted
//	earlyhandoff   the hand-off commits once the child primaries are in
//	               sync, before the child replicas are (under recover;
//	               handoff-first does so by design, and no local seed of
//	               45 caught it: its catches count over the recover seeds)
//	losthandoff    the hand-off commits the routing table without its
//	               record; the state's own check lifted
//
//	parentpromote  seed 1  (97/135: recover 29/45, local 29/45, handoff-first 39/45)
//	               "nN applied vN: shard N handed off yet has copies [...]: a parent copy is promotable for its moved ranges"
//	earlyhandoff   seed 1  (recover 35/45; local 0/45, handoff-first 0/45)
//	               "nN applied vN: shard N handed off while child N's copy ID is INITIALIZING, in sync [ID]"
//	losthandoff    seed 1  (97/135: recover 29/45, local 29/45, handoff-first 39/45)
//	               "nN applied vN: the split of shard N is committed in the routing table without a hand-off record"
//
// Keeping the parent's copies alone broke the state's other checks (the
// hand-off was refused, and 115 seeds failed as "not settled"); the
// mutation lifts them, and keeps the standby parent out of the searches
// (a search restarted over it for good, and the stack overflowed).
//
// The promotion mutation first lifted only the in-sync test of promoting
// a replica, and 300 seeds passed: a started copy leaves the in-sync set
// here only by failing, so that test is never the last line. The primary
// opened from a stale copy on disk is the path that matters, and the
// state's own validation refuses it, so the mutation lifts that too (with
// the validation in place the manager refuses its own task and the shard
// hangs: 59 of 300 seeds failed as "not settled"). The resync mutation was
// caught 3 times in 300, twice through its effects (a copy rebuilt) and
// once as copies never caught up, until the per-step check of a copy at
// the primary's term named it directly.
package clustersim
