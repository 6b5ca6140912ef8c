package tests

// A cluster of 'splitdemo serve' processes: three nodes form a cluster, an
// index with a replica goes green, writes run through every node while the
// node of a primary is killed with SIGKILL; the replica is promoted, writes
// resume, nothing acknowledged is lost, and the restarted node's copy is
// rebuilt by peer recovery until the cluster is green with every copy
// equal to its primary.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// clusterProc is one 'splitdemo serve' node of a cluster.
type clusterProc struct {
	name, http, transport, data string
	cmd                         *exec.Cmd
	done                        chan error
	stderr                      *strings.Builder
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// lockedBuilder is a strings.Builder the process's stderr copier and the
// test may use at once.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs the node and waits for its "listening on" line.
func (c *clusterProc) start(t *testing.T, bin string, seeds []string, managers string) {
	t.Helper()
	c.cmd = exec.Command(bin, "serve", "--name", c.name, "--data", c.data, "--addr", c.http, "--transport", c.transport,
		"--seed-hosts", strings.Join(seeds, ","), "--initial-cluster-managers", managers, "--log-level", "warn")
	stderr := &lockedBuilder{}
	c.cmd.Stderr = stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.done = make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	cmd, done := c.cmd, c.done
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "listening on ") {
			t.Fatalf("%s printed %q; stderr:\n%s", c.name, line, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not answer in 30s; stderr:\n%s", c.name, stderr.String())
	}
}

func (c *clusterProc) url() string { return "http://" + c.http }

// get decodes a JSON answer of GET path on the node.
func (c *clusterProc) get(path string, v any) error {
	status, body, err := request("GET", c.url()+path, "")
	if err != nil {
		return err
	}
	if status != 200 {
		return fmt.Errorf("GET %s: %d %s", path, status, body)
	}
	return json.Unmarshal(body, v)
}

type catShard struct {
	Shard  string `json:"shard"`
	Prirep string `json:"prirep"`
	State  string `json:"state"`
	Docs   string `json:"docs"`
	Node   string `json:"node"`
	LCP    string `json:"seq_no.local_checkpoint"`
}

func TestClusterOfProcessesFailsOverAndRecovers(t *testing.T) {
	if testing.Short() || raceEnabled {
		// The processes are not built with the race detector; this test
		// only drives them over HTTP, so the ordinary pass covers it.
		t.Skip("starts three serve processes")
	}
	bin := buildSplitdemo(t)
	base := t.TempDir()
	nodes := make([]*clusterProc, 3)
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
	if status, body, err := request("PUT", nodes[0].url()+"/logs",
		`{"settings":{"number_of_shards":2,"number_of_replicas":1}}`); err != nil || status != 200 {
		t.Fatalf("create logs: %d %s %v", status, body, err)
	}
	waitGreen := func(via *clusterProc, within time.Duration) {
		t.Helper()
		status, body, err := request("GET", via.url()+fmt.Sprintf("/_cluster/health/logs?wait_for_status=green&timeout=%ds", int(within.Seconds())), "")
		if err != nil || status != 200 {
			t.Fatalf("logs not green through %s within %v: %d %s %v", via.name, within, status, body, err)
		}
	}
	waitGreen(nodes[0], 30*time.Second)
	// Every node answers for the whole cluster: its nodes, and each shard's
	// copies on two of them.
	for _, n := range nodes {
		var cat []map[string]string
		if err := n.get("/_cat/nodes?format=json&h=name,cluster_manager", &cat); err != nil || len(cat) != 3 {
			t.Fatalf("_cat/nodes through %s = %v, %v; want 3 nodes", n.name, cat, err)
		}
		var state struct {
			RoutingTable struct {
				Indices map[string]struct {
					Shards map[string][]struct {
						Node    string `json:"node"`
						Primary bool   `json:"primary"`
						State   string `json:"state"`
					} `json:"shards"`
				} `json:"indices"`
			} `json:"routing_table"`
		}
		if err := n.get("/_cluster/state/routing_table/logs", &state); err != nil {
			t.Fatal(err)
		}
		for sh, copies := range state.RoutingTable.Indices["logs"].Shards {
			if len(copies) != 2 || copies[0].Node == copies[1].Node || copies[0].State != "STARTED" || copies[0].Primary == copies[1].Primary {
				t.Fatalf("routing table of logs' shard %s through %s: %+v", sh, n.name, copies)
			}
		}
	}

	// Writers, one per node, each with its own ids; a writer whose node
	// dies moves to the next one.
	var (
		mu      sync.Mutex
		acked   = map[string]string{}
		stop    atomic.Bool
		ackedAt sync.Map // id → time acknowledged
		wg      sync.WaitGroup
		dead    atomic.Int32
	)
	dead.Store(-1)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := w
			for i := 0; i < 100000 && !stop.Load(); i++ {
				if int(dead.Load()) == target {
					target = (target + 1) % 3
				}
				id, v := fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				status, _, err := request("PUT", nodes[target].url()+"/logs/_doc/"+id, v)
				if err == nil && (status == 200 || status == 201) {
					mu.Lock()
					acked[id] = v
					mu.Unlock()
					ackedAt.Store(id, time.Now())
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(time.Second)

	var shards []catShard
	if err := nodes[1].get("/_cat/shards/logs?format=json&h=shard,prirep,state,docs,node,seq_no.local_checkpoint", &shards); err != nil {
		t.Fatal(err)
	}
	victim := -1
	for _, s := range shards {
		if s.Shard == "0" && s.Prirep == "p" {
			for i, n := range nodes {
				if n.name == s.Node {
					victim = i
				}
			}
		}
	}
	if victim < 0 {
		t.Fatalf("no primary of shard 0 in %+v", shards)
	}
	killed := time.Now()
	dead.Store(int32(victim))
	if err := nodes[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-nodes[victim].done
	// Writes resume: some write is acknowledged well after the kill.
	resumed := time.Time{}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && resumed.IsZero(); time.Sleep(50 * time.Millisecond) {
		ackedAt.Range(func(_, v any) bool {
			if at := v.(time.Time); at.After(killed.Add(100 * time.Millisecond)) {
				resumed = at
				return false
			}
			return true
		})
	}
	if resumed.IsZero() {
		t.Fatalf("no write acknowledged within 20s of killing %s", nodes[victim].name)
	}
	t.Logf("killed %s; a write was acknowledged again %v later", nodes[victim].name, resumed.Sub(killed).Round(time.Millisecond))

	// The node comes back; its copies are rebuilt by peer recovery.
	nodes[victim].start(t, bin, seeds, "n1,n2,n3")
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	alive := nodes[(victim+1)%3]
	waitGreen(alive, 60*time.Second)

	mu.Lock()
	defer mu.Unlock()
	for id, v := range acked {
		var doc struct {
			Found  bool            `json:"found"`
			Source json.RawMessage `json:"_source"`
		}
		if err := alive.get("/logs/_doc/"+id, &doc); err != nil || !doc.Found || string(doc.Source) != v {
			t.Fatalf("acknowledged %s = %s reads %+v, %v", id, v, doc, err)
		}
	}
	var count struct {
		Count int `json:"count"`
	}
	if err := alive.get("/logs/_count", &count); err != nil {
		t.Fatal(err)
	}
	if count.Count < len(acked) {
		t.Fatalf("count = %d, fewer than the %d acknowledged writes", count.Count, len(acked))
	}
	// Every copy holds what its primary holds.
	if err := alive.get("/_cat/shards/logs?format=json&h=shard,prirep,state,docs,node,seq_no.local_checkpoint", &shards); err != nil {
		t.Fatal(err)
	}
	byShard := map[string][]catShard{}
	rebuilt := false
	for _, s := range shards {
		byShard[s.Shard] = append(byShard[s.Shard], s)
		rebuilt = rebuilt || s.Node == nodes[victim].name
	}
	if !rebuilt {
		t.Fatalf("the restarted %s holds no copy (its replicas waited for it: delayed_timeout): %+v", nodes[victim].name, shards)
	}
	for sh, copies := range byShard {
		if len(copies) != 2 || copies[0].Docs != copies[1].Docs || copies[0].LCP != copies[1].LCP {
			t.Fatalf("shard %s's copies differ: %+v", sh, copies)
		}
	}
	t.Logf("%d acknowledged writes, all read back; %d documents; copies %+v", len(acked), count.Count, shards)
	for _, n := range nodes {
		if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := <-n.done; err != nil {
			t.Errorf("%s exited with %v after SIGTERM", n.name, err)
		}
	}
}

func TestASecondNodeOfATakenNameIsRefused(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("starts four serve processes") // see TestClusterOfProcessesFailsOverAndRecovers
	}
	bin := buildSplitdemo(t)
	base := t.TempDir()
	nodes := make([]*clusterProc, 3)
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
	dup := &clusterProc{name: "n2", http: freeLoopbackAddr(t), transport: freeLoopbackAddr(t), data: filepath.Join(base, "dup")}
	dup.start(t, bin, seeds, "n1,n2,n3")
	select {
	case err := <-dup.done:
		out := dup.cmd.Stderr.(*lockedBuilder).String()
		if err == nil || !strings.Contains(out, "already in the cluster") {
			t.Fatalf("the second n2 exited with %v, stderr:\n%s\nwant a refusal naming the taken name", err, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a second node named n2 was not refused within 30s")
	}
	if err := nodes[0].get("/_cluster/health?wait_for_nodes=3&timeout=10s", &health); err != nil || health["number_of_nodes"] != float64(3) {
		t.Fatalf("after the refusal: %v %v", health, err)
	}
	_ = os.RemoveAll(dup.data)
}
