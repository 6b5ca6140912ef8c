package main

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/clusternode"
	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/service"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/transport"
)

// tickInterval is a node's tick: raft's heartbeat, the follower checks and
// the replication resends count in ticks of it. With the manager's
// defaults (an election after 10 ticks, a node declared left after 10),
// failure detection takes about 1 s.
const tickInterval = 100 * time.Millisecond

// checkCluster checks the cluster flags, naming the bad value.
func (c *serveConfig) checkCluster() error {
	if c.name == "" {
		return fmt.Errorf("--name is required with the cluster flags (node.name, unique in the cluster)")
	}
	if strings.ContainsAny(c.name, ",/ ") {
		return fmt.Errorf("--name %q: a node name has no comma, slash or space", c.name)
	}
	if c.transport == "" {
		c.transport = "127.0.0.1:9300"
	}
	if err := checkLoopbackAddr("--transport", c.transport); err != nil {
		return err
	}
	if c.seedHosts == "" {
		return fmt.Errorf("--seed-hosts is required with the cluster flags (discovery.seed_hosts)")
	}
	for _, s := range c.seeds() {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("--seed-hosts: %q is not HOST:PORT", s)
		}
	}
	for _, m := range c.initialManagers() {
		if m == "" {
			return fmt.Errorf("--initial-cluster-managers %q: an empty name", c.managers)
		}
	}
	return nil
}

func checkLoopbackAddr(flag, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: want HOST:PORT", flag, addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s %q: port %q is not a number from 0 to 65535", flag, addr, port)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s %q: the transport is unauthenticated and listens on loopback only", flag, addr)
	}
	return nil
}

func (c serveConfig) seeds() []string { return splitList(c.seedHosts) }

func (c serveConfig) initialManagers() []string { return splitList(c.managers) }

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return slices.Compact(out)
}

// clusterRuntime is a node of a cluster in this process: its transport,
// and the loop that steps it.
type clusterRuntime struct {
	tr *transport.HTTP
	p  *clusternode.Process
}

// startCluster opens the node's transport and node and starts its loop.
func startCluster(c serveConfig, httpAddr string, logger *zap.Logger) (*clusterRuntime, error) {
	inbox := clusternode.Inbox()
	tr, err := transport.NewHTTP(transport.HTTPConfig{Name: c.name, Listen: c.transport, Logger: logger,
		Deliver: func(m []transport.Message) { inbox <- m }, Channel: clusternode.TransportChannel})
	if err != nil {
		return nil, err
	}
	var seed [16]byte
	_, _ = crand.Read(seed[:])
	n, err := clusternode.Open(clusternode.Config{Name: c.name, ClusterName: c.clusterName, DataDir: c.data,
		FS: storage.DefaultFS(), TransportAddr: tr.Addr(), HTTPAddr: httpAddr, Seeds: c.seeds(), InitialManagers: c.initialManagers(),
		Transport: tr, Stores: clusternode.Stores{FS: storage.DefaultFS(), Logger: logger}, Logger: logger, Matcher: service.MatchQuery,
		Rand: rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))})
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	return &clusterRuntime{tr: tr, p: clusternode.Run(n, inbox, clock.Real{}, tickInterval)}, nil
}

// watchFatal ends the process with the cluster's refusal (another
// cluster's data directory, a name another node has): the node cannot
// serve, and a supervisor restarting it would only be refused again.
func watchFatal(r *clusterRuntime, stderr io.Writer) {
	for {
		select {
		case <-r.p.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		if err := r.p.Fatal(); err != nil && !errors.Is(err, clusternode.ErrStopped) {
			fmt.Fprintf(stderr, "splitdemo serve: %v\n", err)
			os.Exit(exitFail)
		}
	}
}

// close stops the node's loop, then its transport.
func (r *clusterRuntime) close() error {
	err := r.p.Stop()
	if e := r.tr.Close(); err == nil {
		err = e
	}
	return err
}
