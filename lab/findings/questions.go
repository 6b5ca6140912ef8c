package findings

// Questions is the full set, in the order of design/findings.md. Each
// question's experiment lives in its own file (qNN_slug.go).
func Questions() []Question {
	return []Question{
		{ID: 1, Slug: "handoff", Title: "Write pause at the handoff", Run: runHandoff,
			RaisedIn: "#13923 (hand-off), MongoDB's critical section, Elasticsearch resharding",
			Question: "How long are writes paused at the handoff, against parent size, write rate, number of children and layout, and against a handoff that holds every write until the new table is durable?"},
		{ID: 2, Slug: "cleanup", Title: "Cleanup and the deleted-document overhang", Run: runCleanup,
			RaisedIn: "#12918 (search −40–50 %, indexing −50 %, 2.5–3 h per 100 GB of merges)",
			Question: "What does removing the foreign documents cost — bytes written, time until the space is reclaimed, write and search latency while it runs — with excise, with per-document deletes, and with a new index?"},
		{ID: 3, Slug: "search", Title: "Search during and after a split", Run: runSearch,
			RaisedIn: "#13923 (searches that picked the parent before the handoff)",
			Question: "What happens to routed gets and unrouted searches (p50/p99) in steady state, during the split and in the 10 s after it?"},
		{ID: 4, Slug: "disk", Title: "Disk before, during and after", Run: runDisk,
			RaisedIn: "#22889 (the disk floor for _split: one extra full copy on the node)",
			Question: "How many bytes does the node hold before, during and after a split — peak and settled — against _split's floor?"},
		{ID: 5, Slug: "after-handoff", Title: "The cost after the handoff", Run: runAfterHandoff,
			RaisedIn: "this project (the second after a 1 GiB handoff stalled 34–39 ms against 12–15 ms steady)",
			Question: "Does retiring the parent (its close and file deletion) disturb writes in the second after the handoff, and does pacing it help?"},
		{ID: 6, Slug: "children", Title: "Partition-aligned vs hash-range children", Run: runChildren,
			RaisedIn: "#13925 vs #20859 (equal-width hash ranges, min width 1,000), #18809 (hot keys)",
			Question: "How deep can each kind of child go, what does a later _split/_shrink do with each, how do routing_partition_size tenants spread, and what about a single hot routing value?"},
		{ID: 7, Slug: "routing-cost", Title: "Routing cost against depth", Run: runRoutingCost,
			RaisedIn: "#13923 (ownership check O(1) unsplit, O(depth) split); OpenSearch's JMH: 84–99 ns at depth 0–2",
			Question: "What does routing a document cost at split depth 0…10, in both modes?"},
		{ID: 8, Slug: "stale", Title: "Stale coordinators and smart clients", Run: runStale,
			RaisedIn: "#13923 (in-flight requests with stale cluster state)",
			Question: "How many writes are fenced per split and how long do retries take, how stale may a router be, and what does a smart client that routes from number_of_shards get wrong?"},
		{ID: 9, Slug: "crash", Title: "Crash safety", Run: runCrash,
			RaisedIn: "#13923 (parent primary fails mid-split)",
			Question: "What happens on a crash at any point of a split or merge: how many crash points, what recovery does, and real kill -9 results?"},
		{ID: 10, Slug: "merge", Title: "Reversibility: in-place merge", Run: runMerge,
			RaisedIn: "#18809 (\"a one-time structural operation\", no reversible remapping)",
			Question: "Can a split be undone in place, and what does merging two siblings cost?"},
		{ID: 11, Slug: "scale", Title: "Scale: is split cost flat in parent size?", Run: runScale,
			RaisedIn: "this project's claim: an in-place split costs O(files), not O(bytes)",
			Question: "How do split time and the longest stall grow from a 100 MiB to a 4 GiB parent?"},
	}
}
