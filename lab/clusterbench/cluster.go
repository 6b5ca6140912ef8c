// Package clusterbench measures a cluster of splitdemo serve processes on
// this machine: what replication costs a write, how long a shard is
// unavailable when its primary's node dies, and what a peer recovery costs.
// It starts the processes itself (loopback only), drives them over REST
// with the lab's load generator, and stops them.
package clusterbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Options are how the nodes run.
type Options struct {
	// LogLevel is the nodes' zap level (default warn); their logs go to
	// DIR/<node>.log.
	LogLevel string
	// ProfileDir, if set, has each node write a CPU profile,
	// DIR/<node>-<start>.cpu.pprof, until it stops with SIGTERM (a killed
	// node's profile is lost).
	ProfileDir string
}

// Cluster is a local cluster of splitdemo serve processes.
type Cluster struct {
	bin, dir string
	opts     Options
	starts   int
	nodes    []*Node
	seeds    []string
	managers string
	client   *http.Client
}

// Node is one serve process.
type Node struct {
	Name, HTTP, Transport, Data string
	cmd                         *exec.Cmd
	done                        chan struct{}
	err                         error
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Start starts n nodes of the splitdemo binary bin, with data directories
// under dir, and waits until they formed a cluster.
func Start(bin, dir string, n int, opts Options) (*Cluster, error) {
	if opts.LogLevel == "" {
		opts.LogLevel = "warn"
	}
	c := &Cluster{bin: bin, dir: dir, opts: opts,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	var managers []string
	for i := range n {
		h, err := freeAddr()
		if err != nil {
			return nil, err
		}
		t, err := freeAddr()
		if err != nil {
			return nil, err
		}
		node := &Node{Name: fmt.Sprintf("n%d", i+1), HTTP: h, Transport: t, Data: filepath.Join(dir, fmt.Sprintf("n%d", i+1))}
		c.nodes = append(c.nodes, node)
		c.seeds = append(c.seeds, t)
		if i < 3 {
			managers = append(managers, node.Name)
		}
	}
	c.managers = strings.Join(managers, ",")
	for i := range c.nodes {
		if err := c.Restart(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if _, _, err := c.Do("GET", fmt.Sprintf("/_cluster/health?wait_for_nodes=%d&timeout=60s", n), ""); err != nil {
		c.Stop()
		return nil, fmt.Errorf("clusterbench: the cluster did not form: %w", err)
	}
	return c, nil
}

// Nodes returns the cluster's nodes.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Alive reports whether node i's process runs.
func (c *Cluster) Alive(i int) bool {
	n := c.nodes[i]
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Restart starts node i (again, on its data directory) and waits for it to
// answer.
func (c *Cluster) Restart(i int) error {
	n := c.nodes[i]
	logf, err := os.OpenFile(filepath.Join(c.dir, n.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := []string{"serve", "--name", n.Name, "--data", n.Data, "--addr", n.HTTP, "--transport", n.Transport,
		"--seed-hosts", strings.Join(c.seeds, ","), "--initial-cluster-managers", c.managers, "--log-level", c.opts.LogLevel}
	if c.opts.ProfileDir != "" {
		c.starts++
		args = append(args, "--cpuprofile", filepath.Join(c.opts.ProfileDir, fmt.Sprintf("%s-%d.cpu.pprof", n.Name, c.starts)))
	}
	n.cmd = exec.Command(c.bin, args...)
	n.cmd.Stderr = logf
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		_ = logf.Close()
		return err
	}
	if err := n.cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	n.done = make(chan struct{})
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "listening on ") {
				close(listening)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	cmd, done := n.cmd, n.done
	go func() {
		n.err = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	select {
	case <-listening:
		return nil
	case <-done:
		return fmt.Errorf("clusterbench: %s exited at start: %v (see %s)", n.Name, n.err, filepath.Join(c.dir, n.Name+".log"))
	case <-time.After(60 * time.Second):
		return fmt.Errorf("clusterbench: %s did not answer within 60s", n.Name)
	}
}

// Kill kills node i with SIGKILL and waits for it.
func (c *Cluster) Kill(i int) error {
	n := c.nodes[i]
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-n.done
	return nil
}

// Stop stops every node with SIGTERM, killing one that has not stopped
// within 30 s.
func (c *Cluster) Stop() {
	for i, n := range c.nodes {
		if !c.Alive(i) {
			continue
		}
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(30 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	}
}

// URL returns node i's REST address.
func (c *Cluster) URL(i int) string { return "http://" + c.nodes[i].HTTP }

// Do sends a request to the first live node and returns its answer; a
// status of 300 or above is an error carrying the body.
func (c *Cluster) Do(method, path, body string) (int, []byte, error) {
	for i := range c.nodes {
		if !c.Alive(i) {
			continue
		}
		return c.DoOn(i, method, path, body)
	}
	return 0, nil, errors.New("clusterbench: no node alive")
}

// requestTimeout bounds a request but a wait for a status, which the server
// bounds by its timeout parameter (WaitGreen).
const requestTimeout = 60 * time.Second

// DoOn sends a request to node i.
func (c *Cluster) DoOn(i int, method, path, body string) (int, []byte, error) {
	return c.doWithin(i, method, path, body, requestTimeout)
}

// doWithin sends a request to node i and waits up to within for the answer.
func (c *Cluster) doWithin(i int, method, path, body string, within time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.URL(i)+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, b, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp.StatusCode, b, nil
}

// ShardCopy is a row of _cat/shards.
type ShardCopy struct {
	Index  string `json:"index"`
	Shard  string `json:"shard"`
	Prirep string `json:"prirep"`
	State  string `json:"state"`
	Docs   string `json:"docs"`
	Node   string `json:"node"`
}

// Shards returns _cat/shards of an index.
func (c *Cluster) Shards(index string) ([]ShardCopy, error) {
	_, b, err := c.Do("GET", "/_cat/shards/"+index+"?format=json&h=index,shard,prirep,state,docs,node", "")
	if err != nil {
		return nil, err
	}
	var rows []ShardCopy
	return rows, json.Unmarshal(b, &rows)
}

// NodeIndex returns the position of the node of that name.
func (c *Cluster) NodeIndex(name string) int {
	for i, n := range c.nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// WaitGreen waits until index is green, asking the first live node.
func (c *Cluster) WaitGreen(index string, within time.Duration) error {
	for i := range c.nodes {
		if c.Alive(i) {
			return c.WaitGreenOn(i, index, within)
		}
	}
	return errors.New("clusterbench: no node alive")
}

// WaitGreenOn asks node i to wait until index is green: the server waits
// up to within, the client a little longer, so that the server's answer
// (green, or 408 with the health it saw) is what ends the wait.
func (c *Cluster) WaitGreenOn(i int, index string, within time.Duration) error {
	_, _, err := c.doWithin(i, "GET", fmt.Sprintf("/_cluster/health/%s?wait_for_status=green&timeout=%dms", index, within.Milliseconds()),
		"", within+30*time.Second)
	return err
}
