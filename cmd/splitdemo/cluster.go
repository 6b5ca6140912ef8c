package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const clusterUsage = `splitdemo cluster: a local cluster of splitdemo serve processes.

Usage:
  splitdemo cluster [--nodes 3] [--data DIR] [--log-level L]

Starts --nodes processes of "splitdemo serve" on free loopback ports, named
n1, n2, ..., each with its data directory under --data, each other's
transport addresses as seed hosts, and the first three (or all, if fewer)
as the initial cluster managers. Prints each node's REST URL once every node
answers, then waits; Ctrl-C (or SIGTERM) stops every node and waits for it.
Restarting with the same --data brings the same cluster back.

Every node answers the REST API for the whole cluster: create an index with
replicas on any of them and watch it go green:

  curl -XPUT 'NODE_URL/logs' -H 'Content-Type: application/json' \
       -d '{"settings":{"number_of_shards":2,"number_of_replicas":1}}'
  curl 'NODE_URL/_cluster/health?wait_for_status=green&timeout=30s'
  curl 'NODE_URL/_cat/shards?v'

Flags:
  --nodes N          number of nodes (default 3, at most 9)
  --data DIR         parent of the nodes' data directories (default ./splitdemo-cluster)
  --log-level LEVEL  the nodes' log level (default warn; their logs go to
                     DIR/<node>.log)
`

type clusterConfig struct {
	nodes          int
	data, logLevel string
}

func runCluster(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c clusterConfig
	fs.IntVar(&c.nodes, "nodes", 3, "")
	fs.StringVar(&c.data, "data", "./splitdemo-cluster", "")
	fs.StringVar(&c.logLevel, "log-level", "warn", "")
	if code, err := parseFlags(fs, args, clusterUsage, stdout); err != nil {
		if code != exitOK {
			fmt.Fprintf(stderr, "splitdemo cluster: %v\n", err)
		}
		return code
	}
	if c.nodes < 1 || c.nodes > 9 {
		fmt.Fprintf(stderr, "splitdemo cluster: --nodes %d: want 1 to 9\n", c.nodes)
		return exitUsage
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo cluster: %v\n", err)
		return exitFail
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runLocalCluster(ctx, exe, c, stdout); err != nil {
		fmt.Fprintf(stderr, "splitdemo cluster: %v\n", err)
		return exitFail
	}
	return exitOK
}

// localNode is one serve process of a local cluster.
type localNode struct {
	name, httpAddr, transportAddr string
	cmd                           *exec.Cmd
	url                           chan string
	exited                        chan struct{} // closed when the process ended, with err set
	err                           error
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// runLocalCluster starts the nodes, prints their URLs, and stops them when
// ctx is done (or fails if one exits first).
func runLocalCluster(ctx context.Context, exe string, c clusterConfig, stdout io.Writer) error {
	nodes := make([]*localNode, c.nodes)
	var seeds, managers []string
	for i := range nodes {
		h, err := freeAddr()
		if err != nil {
			return err
		}
		t, err := freeAddr()
		if err != nil {
			return err
		}
		nodes[i] = &localNode{name: fmt.Sprintf("n%d", i+1), httpAddr: h, transportAddr: t,
			url: make(chan string, 1), exited: make(chan struct{})}
		seeds = append(seeds, t)
		if i < 3 {
			managers = append(managers, nodes[i].name)
		}
	}
	if err := os.MkdirAll(c.data, 0o755); err != nil {
		return err
	}
	defer stopNodes(nodes)
	for _, n := range nodes {
		if err := n.start(exe, c, seeds, managers); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		select {
		case u := <-n.url:
			fmt.Fprintf(stdout, "%s  %s  (data %s)\n", n.name, u, filepath.Join(c.data, n.name))
		case <-n.exited:
			return fmt.Errorf("node %s exited before it answered: %v (see %s)", n.name, n.err, filepath.Join(c.data, n.name+".log"))
		case <-time.After(60 * time.Second):
			return fmt.Errorf("node %s did not answer within 60s (see %s)", n.name, filepath.Join(c.data, n.name+".log"))
		case <-ctx.Done():
			return nil
		}
	}
	fmt.Fprintln(stdout, "the cluster is up; Ctrl-C stops every node")
	exited := make(chan *localNode, len(nodes))
	for _, n := range nodes {
		go func() {
			select {
			case <-n.exited:
				exited <- n
			case <-ctx.Done():
			}
		}()
	}
	// A node that exits (killed, say, to try a failover) leaves the others
	// running; the command ends on Ctrl-C, or once no node is left.
	for left := len(nodes); left > 0; left-- {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout, "stopping every node")
			return nil
		case n := <-exited:
			fmt.Fprintf(stdout, "node %s exited: %v (see %s); the others keep running\n", n.name, n.err, filepath.Join(c.data, n.name+".log"))
		}
	}
	return errors.New("every node exited")
}

func (n *localNode) start(exe string, c clusterConfig, seeds, managers []string) error {
	logf, err := os.Create(filepath.Join(c.data, n.name+".log"))
	if err != nil {
		return err
	}
	n.cmd = exec.Command(exe, "serve", "--name", n.name, "--data", filepath.Join(c.data, n.name),
		"--addr", n.httpAddr, "--transport", n.transportAddr, "--seed-hosts", strings.Join(seeds, ","),
		"--initial-cluster-managers", strings.Join(managers, ","), "--log-level", c.logLevel)
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
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				select {
				case n.url <- u:
				default:
				}
			}
		}
	}()
	go func() {
		n.err = n.cmd.Wait()
		_ = logf.Close()
		close(n.exited)
	}()
	return nil
}

// stopNodes sends SIGTERM to every node still running and waits for each,
// killing one that has not stopped within 30 s.
func stopNodes(nodes []*localNode) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n == nil || n.cmd == nil || n.cmd.Process == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
				return
			}
			select {
			case <-n.exited:
			case <-time.After(30 * time.Second):
				_ = n.cmd.Process.Kill()
				<-n.exited
			}
		}()
	}
	wg.Wait()
}
