package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/shardsplit/shardsplit/server"
	"github.com/shardsplit/shardsplit/service"
)

const serveUsage = `splitdemo serve: OpenSearch's REST API over a data directory.

Usage:
  splitdemo serve [--addr 127.0.0.1:9200] [--data DIR] [--log-level L]
  splitdemo serve --name n1 --data DIR --addr 127.0.0.1:9200 --transport 127.0.0.1:9300 \
                  --seed-hosts 127.0.0.1:9300,127.0.0.1:9301,127.0.0.1:9302 \
                  --initial-cluster-managers n1,n2,n3

Serves every index of DIR (created if missing) with OpenSearch 3.x request
and response shapes: indices, settings and blocks, documents, _bulk, _search
and _count (match_all, ids, term on _id or _routing), _search_shards, _cat,
_cluster/health, aliases, _split/_shrink/_clone, the in-place split
POST /{index}/_shards/{shard_id}/_split and the in-place merge
POST /{index}/_shards/_merge {"shards":[a,b]}, each run as a task (_tasks).
Prints "listening on http://ADDR" once it answers; stops cleanly on SIGINT
or SIGTERM (a split or merge still running is finished or rolled back by
recovery on the next start).

Without --seed-hosts it is one node holding every copy (replicas stay
unassigned). With it, the node joins a cluster (see "splitdemo cluster" to
start one locally): cluster-manager-eligible nodes keep the cluster state
in raft, every index's shards get copies on different nodes (replicas kept
in sync as OpenSearch does: primary terms, sequence numbers, checkpoints,
in-sync copies, promotion, peer recovery), and every node answers the REST
API for the whole cluster.

Flags:
  --addr HOST:PORT    REST address to listen on (OpenSearch's http.host and
                      http.port; default 127.0.0.1:9200; an empty host means
                      127.0.0.1: give 0.0.0.0 to listen on every interface;
                      PORT is a number, 0 for any free port)
  --data DIR          data directory (path.data; default ./splitdemo-data)
  --log-level LEVEL   zap level for the log on stderr (default info)
  --cpuprofile FILE   write a CPU profile of the process to FILE when it
                      stops on SIGINT or SIGTERM (go tool pprof reads it)

Cluster flags (any of them makes the node join a cluster):
  --name NAME                     node.name: unique in the cluster (required)
  --transport HOST:PORT           transport.host and transport.port: where other
                                  nodes reach this one (default 127.0.0.1:9300;
                                  loopback only)
  --seed-hosts A,B,...            discovery.seed_hosts: transport addresses to
                                  discover the cluster through
  --initial-cluster-managers N,.. cluster.initial_cluster_manager_nodes: the
                                  names of the nodes that bootstrap a new
                                  cluster (every one of them must be up; a node
                                  with data of a cluster ignores it)
  --cluster-name NAME             cluster.name (default shardsplit)

Example:
  splitdemo serve --data /tmp/ss &
  curl -XPUT localhost:9200/logs -H 'Content-Type: application/json' \
       -d '{"settings":{"number_of_shards":2,"number_of_replicas":0}}'
`

type serveConfig struct {
	addr, data, logLevel string
	cpuProfile           string
	// Cluster mode.
	name, transport, seedHosts, managers, clusterName string
}

// clustered reports whether the flags make the node join a cluster.
func (c serveConfig) clustered() bool {
	return c.name != "" || c.seedHosts != "" || c.managers != "" || c.transport != ""
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c serveConfig
	fs.StringVar(&c.addr, "addr", "127.0.0.1:9200", "")
	fs.StringVar(&c.data, "data", "./splitdemo-data", "")
	fs.StringVar(&c.logLevel, "log-level", "info", "")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "")
	fs.StringVar(&c.name, "name", "", "")
	fs.StringVar(&c.transport, "transport", "", "")
	fs.StringVar(&c.seedHosts, "seed-hosts", "", "")
	fs.StringVar(&c.managers, "initial-cluster-managers", "", "")
	fs.StringVar(&c.clusterName, "cluster-name", "shardsplit", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, serveUsage)
			return exitOK
		}
		fmt.Fprintf(stderr, "splitdemo serve: %v\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "splitdemo serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	host, port, err := net.SplitHostPort(c.addr)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo serve: --addr %q: want HOST:PORT\n", c.addr)
		return exitUsage
	}
	if _, err := strconv.ParseUint(port, 10, 16); port != "" && err != nil { // empty or 0: any free port
		fmt.Fprintf(stderr, "splitdemo serve: --addr %q: port %q is not a number from 0 to 65535\n", c.addr, port)
		return exitUsage
	}
	if host == "" {
		host = "127.0.0.1"
	}
	c.addr = net.JoinHostPort(host, port)
	if c.clustered() {
		if err := c.checkCluster(); err != nil {
			fmt.Fprintf(stderr, "splitdemo serve: %v\n", err)
			return exitUsage
		}
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "splitdemo serve: --cpuprofile: %v\n", err)
			return exitFail
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			fmt.Fprintf(stderr, "splitdemo serve: --cpuprofile: %v\n", err)
			return exitFail
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "splitdemo serve: %v\n", err)
		return exitFail
	}
	return exitOK
}

// serve runs the server until ctx is done.
func serve(ctx context.Context, c serveConfig, stdout, stderr io.Writer) error {
	logger, err := newLogger(c.logLevel)
	if err != nil {
		return err
	}
	defer logger.Sync() //nolint:errcheck
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	cfg := service.Config{Dir: c.data, Logger: logger}
	clusterName := ""
	if c.clustered() {
		rt, err := startCluster(c, addr, logger)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer rt.close() //nolint:errcheck
		cfg.Cluster, cfg.NodeName, clusterName = rt.p, c.name, c.clusterName
		go watchFatal(rt, stderr)
	}
	svc, err := service.Open(cfg)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer svc.Close()
	srv := &http.Server{
		Handler:           server.New(server.Config{Service: svc, Logger: logger, Addr: addr, ClusterName: clusterName}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if err := waitAnswers(ctx, addr); err != nil {
		_ = srv.Close()
		return err
	}
	fmt.Fprintf(stdout, "listening on http://%s\n", addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	return svc.Close()
}

// waitAnswers polls GET / until the server answers.
func waitAnswers(ctx context.Context, addr string) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server on %s did not answer within 10s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
