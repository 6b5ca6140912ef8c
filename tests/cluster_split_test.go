package tests

// The in-place split of a replicated shard on a cluster of 'splitdemo serve'
// processes, driven over HTTP as a user would: any node accepts the split,
// its task reads the same through every node, writes through every node
// go on during it, and afterwards every acknowledged write is found once,
// in a child whose primary and replica hold the same documents.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// errorBody is OpenSearch's error answer.
type errorBody struct {
	Error struct {
		Type   string `json:"type"`
		Reason string `json:"reason"`
	} `json:"error"`
	Status int `json:"status"`
}

// TestClusterOfProcessesSplitsAReplicatedShardUnderWritesByRecovery: the
// split under index.shardsplit.replica_split recover: child primaries
// beside the parent primary, child replicas by peer recovery from them.
func TestClusterOfProcessesSplitsAReplicatedShardUnderWritesByRecovery(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("starts three serve processes") // see TestClusterOfProcessesFailsOverAndRecovers
	}
	splitReplicatedUnderWrites(t, "recover")
}

// TestClusterOfProcessesSplitsAReplicatedShardUnderWritesLocally: the same
// split under the default strategy, local: every child copy is built from
// the parent copy on its own node, so the nodes send no recovery byte
// while it runs.
func TestClusterOfProcessesSplitsAReplicatedShardUnderWritesLocally(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("starts three serve processes") // see TestClusterOfProcessesFailsOverAndRecovers
	}
	splitReplicatedUnderWrites(t, "")
}

// TestClusterOfProcessesSplitsAReplicatedShardUnderWritesHandoffFirst: the
// same split under handoff-first: the children hand off with their
// primaries alone, and get their replicas by peer recovery after.
func TestClusterOfProcessesSplitsAReplicatedShardUnderWritesHandoffFirst(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("starts three serve processes") // see TestClusterOfProcessesFailsOverAndRecovers
	}
	splitReplicatedUnderWrites(t, "handoff-first")
}

// splitReplicatedUnderWrites splits logs' shard 0 under writes through
// every node with a replica split strategy ("" the default) and checks
// the outcome.
func splitReplicatedUnderWrites(t *testing.T, strategy string) {
	nodes, waitGreen := startLogsClusterWith(t, strategy)
	sentBefore := recoveryBytesSent(t, nodes)

	// Refusals, in OpenSearch's shape, before anything runs.
	refused := func(via *clusterProc, path, body string, status int, typ, reason string) {
		t.Helper()
		got, raw, err := request("POST", via.url()+path, body)
		var e errorBody
		if err == nil {
			err = json.Unmarshal(raw, &e)
		}
		if err != nil || got != status || e.Status != status || e.Error.Type != typ || !strings.Contains(e.Error.Reason, reason) {
			t.Fatalf("POST %s %s through %s = %d %s (%v); want %d %s %q", path, body, via.name, got, raw, err, status, typ, reason)
		}
	}
	refused(nodes[2], "/nope/_shards/0/_split", `{"number_of_splits":2}`, 404, "index_not_found_exception", "no such index [nope]")
	refused(nodes[2], "/logs/_shards/0/_split", `{}`, 400, "action_request_validation_exception", "number_of_splits or split_points is missing")
	refused(nodes[1], "/logs/_shards/0/_split", `{"number_of_splits":1}`, 400, "action_request_validation_exception", "number_of_splits must be at least 2")
	refused(nodes[0], "/logs/_shards/5/_split", `{"number_of_splits":2}`, 404, "shard_not_found_exception", "no such shard [logs][5]")

	// Writers, one per node, each with its own ids. A write that fails is
	// retried with the same id and source until it is acknowledged, so
	// every id written is acknowledged in the end and the index holds
	// exactly the acknowledged ids.
	var (
		mu    sync.Mutex
		acked = map[string]string{}
		stop  atomic.Bool
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000 && !stop.Load(); i++ {
				id, v := fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				for attempt := 0; ; attempt++ {
					status, body, err := request("PUT", nodes[w].url()+"/logs/_doc/"+id, v)
					if err == nil && (status == 200 || status == 201) {
						mu.Lock()
						acked[id] = v
						mu.Unlock()
						break
					}
					fails.Add(1)
					if attempt == 200 {
						t.Errorf("write %s through %s never acknowledged: %d %s %v", id, nodes[w].name, status, body, err)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(time.Second)

	// The split, through the second node.
	status, raw, err := request("POST", nodes[1].url()+"/logs/_shards/0/_split", `{"number_of_splits":2}`)
	var started struct {
		Task string `json:"task"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &started)
	}
	if err != nil || status != 200 || started.Task == "" {
		t.Fatalf("split through %s = %d %s %v", nodes[1].name, status, raw, err)
	}
	// A second split of the shard is refused, whether the first still runs
	// or already handed off, in MetadataInPlaceSplitShardService's words (or
	// the split metadata's, when the node's applied state lags the one the
	// cluster task meets).
	status, raw, err = request("POST", nodes[2].url()+"/logs/_shards/0/_split", `{"number_of_splits":2}`)
	var again errorBody
	if err == nil {
		err = json.Unmarshal(raw, &again)
	}
	if err != nil || status != 400 || again.Error.Type != "illegal_argument_exception" ||
		!slices.Contains([]string{"Splitting of shard [0] is already in progress", "Shard [0] has already been split.",
			"Split of shard [0] is already in progress or completed.", "Shard ID doesn't exist in the current list of shard ranges"},
			again.Error.Reason) {
		t.Fatalf("a second split through %s = %d %s %v; want 400 illegal_argument_exception", nodes[2].name, status, raw, err)
	}

	// The task reads the same through every node (the others ask its
	// node) until it completes.
	type taskAnswer struct {
		Completed bool `json:"completed"`
		Task      struct {
			Action string `json:"action"`
			Status struct {
				Phase    string `json:"phase"`
				Shard    int    `json:"shard"`
				Children []int  `json:"children"`
			} `json:"status"`
		} `json:"task"`
		Error    json.RawMessage `json:"error"`
		Response json.RawMessage `json:"response"`
	}
	var task taskAnswer
	phases := map[string]bool{}
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		for _, n := range nodes {
			if err := n.get("/_tasks/"+started.Task, &task); err != nil {
				t.Fatalf("task %s through %s: %v", started.Task, n.name, err)
			}
			phases[task.Task.Status.Phase] = true
		}
		if task.Completed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("split task %s not completed within 120s: %+v", started.Task, task)
		}
	}
	if task.Error != nil || task.Response == nil || task.Task.Action != "indices:admin/shard/split" ||
		task.Task.Status.Phase != "done" || task.Task.Status.Shard != 0 || len(task.Task.Status.Children) != 2 {
		t.Fatalf("split task %s completed as %+v, error %s", started.Task, task, task.Error)
	}
	children := task.Task.Status.Children
	// The task's node applied the hand-off: the parent is split.
	refused(nodes[1], "/logs/_shards/0/_split", `{"number_of_splits":2}`, 400, "illegal_argument_exception", "Shard [0] has already been split.")

	recovered := recoveryBytesSent(t, nodes) - sentBefore
	if (strategy == "local" || strategy == "") && recovered != 0 {
		t.Fatalf("the nodes sent %d recovery bytes during a local split", recovered)
	}
	time.Sleep(time.Second) // writes to the children
	stop.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}
	waitGreen(nodes[0], 60*time.Second)

	// Searches reach the children only.
	var ss struct {
		Shards [][]struct {
			Shard int `json:"shard"`
		} `json:"shards"`
	}
	if err := nodes[2].get("/logs/_search_shards", &ss); err != nil {
		t.Fatal(err)
	}
	var searched []int
	for _, g := range ss.Shards {
		searched = append(searched, g[0].Shard)
	}
	sort.Ints(searched)
	if fmt.Sprint(searched) != fmt.Sprint(children) {
		t.Fatalf("_search_shards reaches %v; want the children %v", searched, children)
	}

	mu.Lock()
	defer mu.Unlock()
	i := 0
	for id, v := range acked {
		via := nodes[i%3]
		i++
		var doc struct {
			Found  bool            `json:"found"`
			Source json.RawMessage `json:"_source"`
		}
		if err := via.get("/logs/_doc/"+id, &doc); err != nil || !doc.Found || string(doc.Source) != v {
			t.Fatalf("acknowledged %s = %s reads %+v through %s, %v", id, v, doc, via.name, err)
		}
	}
	for _, n := range nodes {
		var count struct {
			Count int `json:"count"`
		}
		if err := n.get("/logs/_count", &count); err != nil {
			t.Fatal(err)
		}
		if count.Count != len(acked) {
			t.Fatalf("_count through %s = %d; want the %d acknowledged ids", n.name, count.Count, len(acked))
		}
	}

	// Every copy of each child holds what its primary holds, and the
	// children's primaries hold every document once.
	var shards []catShard
	if err := nodes[0].get("/_cat/shards/logs?format=json&h=shard,prirep,state,docs,node,seq_no.local_checkpoint", &shards); err != nil {
		t.Fatal(err)
	}
	byShard := map[string][]catShard{}
	for _, s := range shards {
		byShard[s.Shard] = append(byShard[s.Shard], s)
	}
	var want []string
	for _, c := range children {
		want = append(want, fmt.Sprint(c))
	}
	if len(byShard) != len(children) {
		t.Fatalf("_cat/shards lists shards %v; want the children %v", shards, want)
	}
	primaryDocs := 0
	for _, sh := range want {
		copies := byShard[sh]
		if len(copies) != 2 || copies[0].State != "STARTED" || copies[1].State != "STARTED" || copies[0].Node == copies[1].Node ||
			copies[0].Docs != copies[1].Docs || copies[0].LCP != copies[1].LCP {
			t.Fatalf("child %s's copies differ or are not started on two nodes: %+v", sh, copies)
		}
		var n int
		if _, err := fmt.Sscan(copies[0].Docs, &n); err != nil {
			t.Fatalf("child %s docs %q: %v", sh, copies[0].Docs, err)
		}
		if n == 0 {
			t.Fatalf("child %s holds no documents: %+v", sh, copies)
		}
		primaryDocs += n
	}
	if primaryDocs != len(acked) {
		t.Fatalf("the children's primaries hold %d documents; want the %d acknowledged ids (%+v)", primaryDocs, len(acked), shards)
	}
	t.Logf("strategy %q: %d acknowledged writes (%d failed attempts retried), all read back once; task phases seen %v; "+
		"%d recovery bytes sent until the task completed; children %+v", strategy, len(acked), fails.Load(), phases, recovered, shards)
	stopCluster(t, nodes)
}

// startLogsCluster starts three serve processes as one cluster and creates
// logs with one shard and one replica, green; waitGreen waits until logs is
// green again.
func startLogsCluster(t *testing.T) (nodes []*clusterProc, waitGreen func(via *clusterProc, within time.Duration)) {
	t.Helper()
	return startLogsClusterWith(t, "")
}

// startLogsClusterWith is startLogsCluster with logs'
// index.shardsplit.replica_split set to strategy ("": the default).
func startLogsClusterWith(t *testing.T, strategy string) (nodes []*clusterProc, waitGreen func(via *clusterProc, within time.Duration)) {
	t.Helper()
	bin := buildSplitdemo(t)
	base := t.TempDir()
	nodes = make([]*clusterProc, 3)
	var seeds []string
	for i := range nodes {
		nodes[i] = &clusterProc{name: fmt.Sprintf("n%d", i+1), http: freeLoopbackAddr(t), transport: freeLoopbackAddr(t),
			data: filepath.Join(base, fmt.Sprintf("n%d", i+1))}
		seeds = append(seeds, nodes[i].transport)
	}
	for _, n := range nodes {
		n.start(t, bin, seeds, "n1,n2,n3")
	}
	var health map[string]any
	if err := nodes[0].get("/_cluster/health?wait_for_nodes=3&timeout=30s", &health); err != nil {
		t.Fatal(err)
	}
	settings := `{"settings":{"number_of_shards":1,"number_of_replicas":1}}`
	if strategy != "" {
		settings = fmt.Sprintf(`{"settings":{"number_of_shards":1,"number_of_replicas":1,"shardsplit.replica_split":%q}}`, strategy)
	}
	if status, body, err := request("PUT", nodes[0].url()+"/logs", settings); err != nil || status != 200 {
		t.Fatalf("create logs: %d %s %v", status, body, err)
	}
	waitGreen = func(via *clusterProc, within time.Duration) {
		t.Helper()
		status, body, err := request("GET", via.url()+fmt.Sprintf("/_cluster/health/logs?wait_for_status=green&timeout=%ds", int(within.Seconds())), "")
		if err != nil || status != 200 {
			t.Fatalf("logs not green through %s within %v: %d %s %v", via.name, within, status, body, err)
		}
	}
	waitGreen(nodes[0], 30*time.Second)
	return nodes, waitGreen
}

// stopCluster stops every node with SIGTERM; each must exit cleanly.
func stopCluster(t *testing.T, nodes []*clusterProc) {
	t.Helper()
	for _, n := range nodes {
		if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := <-n.done; err != nil {
			t.Errorf("%s exited with %v after SIGTERM", n.name, err)
		}
	}
}

// splitTask is GET _tasks/{id} of a split.
type splitTask struct {
	Completed bool `json:"completed"`
	Task      struct {
		Status struct {
			Phase    string `json:"phase"`
			Children []int  `json:"children"`
		} `json:"status"`
	} `json:"task"`
	Error *struct {
		Type   string `json:"type"`
		Reason string `json:"reason"`
	} `json:"error"`
}

// awaitTask polls the task through via until it completes (bounded).
func awaitTask(t *testing.T, via *clusterProc, id string) splitTask {
	t.Helper()
	var task splitTask
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		task = splitTask{}
		if err := via.get("/_tasks/"+id, &task); err != nil {
			t.Fatalf("task %s through %s: %v", id, via.name, err)
		}
		if task.Completed {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s not completed within 120s: %+v", id, task)
		}
	}
}

func startSplit(t *testing.T, via *clusterProc) string {
	t.Helper()
	status, raw, err := request("POST", via.url()+"/logs/_shards/0/_split", `{"number_of_splits":2}`)
	var started struct {
		Task string `json:"task"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &started)
	}
	if err != nil || status != 200 || started.Task == "" {
		t.Fatalf("split through %s = %d %s %v", via.name, status, raw, err)
	}
	return started.Task
}

// A split's cancel, through a node other than the task's, either rolls the
// split back (the parent serves on with both copies, and splits again
// later) or, if the hand-off came first, is refused; either way no
// document is lost and the task says which.
func TestClusterOfProcessesCancelsASplitUntilItsHandoff(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("starts three serve processes") // see TestClusterOfProcessesFailsOverAndRecovers
	}
	nodes, waitGreen := startLogsCluster(t)
	const docs = 300
	for i := range docs {
		if status, body, err := request("PUT", nodes[i%3].url()+fmt.Sprintf("/logs/_doc/d%d", i), fmt.Sprintf(`{"i":%d}`, i)); err != nil || status != 201 {
			t.Fatalf("write d%d: %d %s %v", i, status, body, err)
		}
	}
	id := startSplit(t, nodes[0])
	status, raw, err := request("POST", nodes[2].url()+"/_tasks/"+id+"/_cancel", "")
	if err != nil {
		t.Fatal(err)
	}
	switch status {
	case 200:
		task := awaitTask(t, nodes[1], id)
		if task.Error == nil || task.Error.Type != "task_cancelled_exception" || task.Task.Status.Phase != "aborted" {
			t.Fatalf("cancelled split task %s completed as %+v", id, task)
		}
		waitGreen(nodes[1], 60*time.Second)
		var shards []catShard
		if err := nodes[1].get("/_cat/shards/logs?format=json&h=shard,prirep,state,docs,node,seq_no.local_checkpoint", &shards); err != nil {
			t.Fatal(err)
		}
		if len(shards) != 2 || shards[0].Shard != "0" || shards[1].Shard != "0" || shards[0].Docs != shards[1].Docs {
			t.Fatalf("after the cancel logs' copies are %+v; want shard 0's two copies, equal", shards)
		}
		t.Logf("cancel accepted; shard 0 serves on: %+v", shards)
		// The parent splits again after its split was cancelled.
		again := startSplit(t, nodes[1])
		if task := awaitTask(t, nodes[2], again); task.Error != nil || task.Task.Status.Phase != "done" {
			t.Fatalf("the split after the cancel completed as %+v", task)
		}
	case 400:
		var e errorBody
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Type != "illegal_state_exception" || !strings.Contains(e.Error.Reason, "has passed its handoff") {
			t.Fatalf("cancel refused as %s; want illegal_state_exception: has passed its handoff", raw)
		}
		if task := awaitTask(t, nodes[1], id); task.Error != nil || task.Task.Status.Phase != "done" {
			t.Fatalf("split task %s whose cancel was refused completed as %+v", id, task)
		}
		t.Logf("cancel refused: the split had handed off")
	default:
		t.Fatalf("cancel of %s through %s = %d %s", id, nodes[2].name, status, raw)
	}
	waitGreen(nodes[0], 60*time.Second)
	// A completed task's cancel is refused.
	if status, raw, err := request("POST", nodes[1].url()+"/_tasks/"+id+"/_cancel", ""); err != nil || status != 400 || !strings.Contains(string(raw), "has already completed") && !strings.Contains(string(raw), "has passed its handoff") {
		t.Fatalf("cancel of the completed %s = %d %s %v", id, status, raw, err)
	}
	for i := range docs {
		var doc struct {
			Found bool `json:"found"`
		}
		if err := nodes[i%3].get(fmt.Sprintf("/logs/_doc/d%d", i), &doc); err != nil || !doc.Found {
			t.Fatalf("d%d: %+v %v", i, doc, err)
		}
	}
	var count struct {
		Count int `json:"count"`
	}
	if err := nodes[2].get("/logs/_count", &count); err != nil || count.Count != docs {
		t.Fatalf("_count = %d, %v; want %d", count.Count, err, docs)
	}
	stopCluster(t, nodes)
}

// recoveryBytesSent sums, over the nodes, the bytes of peer recovery each
// sent to the others (_nodes/_local/stats/transport's breakdown of
// tx_size_in_bytes).
func recoveryBytesSent(t *testing.T, nodes []*clusterProc) int64 {
	t.Helper()
	var total int64
	for _, n := range nodes {
		var stats struct {
			Nodes map[string]struct {
				Transport *struct {
					ByKind struct {
						Recovery int64 `json:"recovery"`
					} `json:"tx_size_in_bytes_by_kind"`
				} `json:"transport"`
			} `json:"nodes"`
		}
		if err := n.get("/_nodes/_local/stats/transport", &stats); err != nil {
			t.Fatal(err)
		}
		if len(stats.Nodes) != 1 {
			t.Fatalf("_nodes/_local/stats/transport through %s lists %d nodes", n.name, len(stats.Nodes))
		}
		for _, s := range stats.Nodes {
			if s.Transport == nil {
				t.Fatalf("_nodes/_local/stats/transport through %s has no transport section", n.name)
			}
			total += s.Transport.ByKind.Recovery
		}
	}
	return total
}

// TestClusterOfProcessesSurvivesTheParentPrimarysNodeKilledDuringALocalSplit:
// under writes through the nodes, the node of the parent primary is killed
// (SIGKILL) as soon as a local split began. Killed before its hand-off the
// split rolls back (the task aborts, shard 0 serves on from its promoted
// replica); killed after it, the split completes. Either way the node
// comes back, the index ends green, every acknowledged write reads back
// once, and each shard's copies hold the same documents.
func TestClusterOfProcessesSurvivesTheParentPrimarysNodeKilledDuringALocalSplit(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("starts three serve processes") // see TestClusterOfProcessesFailsOverAndRecovers
	}
	nodes, waitGreen := startLogsClusterWith(t, "local")
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.transport)
	}
	var (
		mu    sync.Mutex
		acked = map[string]string{}
		stop  atomic.Bool
		wg    sync.WaitGroup
		dead  atomic.Int32
	)
	dead.Store(-1)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := w
			for i := 0; i < 100000 && !stop.Load(); i++ {
				id, v := fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				// Retried with the same id and source until acknowledged,
				// so the index holds exactly the acknowledged ids.
				for attempt := 0; !stop.Load(); attempt++ {
					if int(dead.Load()) == target {
						target = (target + 1) % 3
					}
					status, _, err := request("PUT", nodes[target].url()+"/logs/_doc/"+id, v)
					if err == nil && (status == 200 || status == 201) {
						mu.Lock()
						acked[id] = v
						mu.Unlock()
						break
					}
					if attempt == 1000 {
						t.Errorf("write %s never acknowledged", id)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(time.Second)

	var shards []catShard
	if err := nodes[0].get("/_cat/shards/logs?format=json&h=shard,prirep,state,docs,node,seq_no.local_checkpoint", &shards); err != nil {
		t.Fatal(err)
	}
	victim := -1
	for _, s := range shards {
		for i, n := range nodes {
			if s.Shard == "0" && s.Prirep == "p" && n.name == s.Node {
				victim = i
			}
		}
	}
	if victim < 0 {
		t.Fatalf("no primary of shard 0 in %+v", shards)
	}
	via := nodes[(victim+1)%3]
	id := startSplit(t, via)
	dead.Store(int32(victim))
	if err := nodes[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-nodes[victim].done
	task := awaitTask(t, via, id)
	switch {
	case task.Task.Status.Phase == "aborted" && task.Error != nil && task.Error.Type == "illegal_state_exception":
		t.Logf("killed %s before the hand-off: the split rolled back (%s)", nodes[victim].name, task.Error.Reason)
	case task.Task.Status.Phase == "done" && task.Error == nil:
		t.Logf("killed %s after the hand-off: the split completed", nodes[victim].name)
	default:
		t.Fatalf("split task %s after the kill completed as %+v", id, task)
	}
	nodes[victim].start(t, buildSplitdemo(t), seeds, "n1,n2,n3")
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}
	waitGreen(via, 90*time.Second)

	mu.Lock()
	defer mu.Unlock()
	for i, n := range nodes {
		var count struct {
			Count int `json:"count"`
		}
		if err := n.get("/logs/_count", &count); err != nil {
			t.Fatal(err)
		}
		if count.Count != len(acked) {
			t.Fatalf("_count through %s = %d; want the %d acknowledged ids", n.name, count.Count, len(acked))
		}
		if i == 0 {
			for id, v := range acked {
				var doc struct {
					Found  bool            `json:"found"`
					Source json.RawMessage `json:"_source"`
				}
				if err := n.get("/logs/_doc/"+id, &doc); err != nil || !doc.Found || string(doc.Source) != v {
					t.Fatalf("acknowledged %s = %s reads %+v through %s, %v", id, v, doc, n.name, err)
				}
			}
		}
	}
	if err := via.get("/_cat/shards/logs?format=json&h=shard,prirep,state,docs,node,seq_no.local_checkpoint", &shards); err != nil {
		t.Fatal(err)
	}
	byShard := map[string][]catShard{}
	for _, s := range shards {
		byShard[s.Shard] = append(byShard[s.Shard], s)
	}
	for sh, copies := range byShard {
		if len(copies) != 2 || copies[0].State != "STARTED" || copies[1].State != "STARTED" || copies[0].Node == copies[1].Node ||
			copies[0].Docs != copies[1].Docs || copies[0].LCP != copies[1].LCP {
			t.Fatalf("shard %s's copies differ or are not started on two nodes: %+v", sh, copies)
		}
	}
	t.Logf("%d acknowledged writes, all read back once; shards %+v", len(acked), shards)
	stopCluster(t, nodes)
}
