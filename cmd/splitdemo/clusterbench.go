package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardsplit/shardsplit/lab/clusterbench"
)

const clusterbenchUsage = `splitdemo clusterbench: what a cluster of 3 serve processes costs, measured.

Usage:
  splitdemo clusterbench [--runs 5] [--only cost,failover,recovery,split] [--out DIR]
                         [--rate 5000] [--writers 64] [--duration 10s]
                         [--recovery-bytes 1073741824] [--log-level warn]
                         [--strategy recover,local,handoff-first]
                         [--parent-size 1GiB] [--profile]

Starts three "splitdemo serve" processes of this binary on loopback ports,
data under DIR/cluster, and measures (each --runs times):

  cost      the same write load (--rate fsync'd writes/s from --writers
            writers, 1 KiB documents, --duration measured after 2 s of
            warm-up) on an index of 3 shards without a replica and with
            one, alternating which goes first: throughput and p50/p99
  failover  the node holding the primary of shard 0 of an index with a
            replica is killed (SIGKILL) under that load; the time until a
            write to its shards is acknowledged again (failure detection:
            1 s), then the node is restarted and the index goes green
  recovery  an index of one shard loaded once to --recovery-bytes of random
            1 KiB documents; each run gives it a replica (number_of_replicas
            0 -> 1) and takes it away again: the time to green (a peer
            recovery from scratch: files, then the history above them)
            against copying and syncing the same files on this disk
  split     (only when named) an index of one shard and one replica
            loaded to --parent-size of random 1 KiB documents, the same
            write load through every node, and after 2 s of warm-up and
            --duration steady, POST /{index}/_shards/0/_split into two,
            for each --strategy (index.shardsplit.replica_split; a
            strategy the cluster refuses is reported refused): each child
            range's write-unavailability window (from the first write
            to it begun after the request that was refused or not
            acknowledged within the steady p99, to the first
            acknowledgement of a write begun since), throughput from the
            request to green against steady, the time to the hand-off
            and to green, the bytes peer recoveries and all the nodes
            sent (_nodes/stats), disk, how long the parent primary's
            writes were blocked for the hand-off, and the writes stale
            coordinators retried on a child and how long they waited

Writes DIR/clusterbench.md (medians with ranges) and DIR/clusterbench.json
(every run), and prints progress. Numbers on a shared 2-core machine are
noisy: compare runs of one invocation, not across invocations.

Flags:
  --runs N               runs of each measurement (default 5)
  --only LIST            which measurements (default cost,failover,recovery;
                         split only when named)
  --out DIR              output directory (default ./clusterbench-out)
  --rate R               writes per second, all writers together (default 5000)
  --writers N            concurrent writers (default 64)
  --duration D           measured part of a cost run (default 10s)
  --recovery-bytes N     source bytes loaded before a recovery (default 1 GiB)
  --strategy LIST        the split's replica strategies (default local)
  --parent-size SIZE     the split's parent: bytes, or with KiB, MiB, GiB
                         (default 1GiB)
  --log-level LEVEL      the nodes' log level (default warn; their logs go to
                         DIR/cluster/<node>.log)
  --profile              each node writes a CPU profile until it stops, to
                         DIR/<node>-<start>.cpu.pprof (go tool pprof reads it)
`

type clusterbenchResult struct {
	Cost     []clusterbench.CostRun     `json:"cost,omitempty"`
	Failover []clusterbench.FailoverRun `json:"failover,omitempty"`
	Recovery []clusterbench.RecoveryRun `json:"recovery,omitempty"`
	Split    []clusterbench.SplitRun    `json:"split,omitempty"`
}

func runClusterbench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("clusterbench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	runs := fs.Int("runs", 5, "")
	only := fs.String("only", "cost,failover,recovery", "")
	out := fs.String("out", "./clusterbench-out", "")
	rate := fs.Float64("rate", 5000, "")
	writers := fs.Int("writers", 64, "")
	duration := fs.Duration("duration", 10*time.Second, "")
	recoveryBytes := fs.Int64("recovery-bytes", 1<<30, "")
	logLevel := fs.String("log-level", "warn", "")
	profile := fs.Bool("profile", false, "")
	strategy := fs.String("strategy", clusterbench.StrategyLocal, "")
	parentSize := fs.String("parent-size", "1GiB", "")
	if code, err := parseFlags(fs, args, clusterbenchUsage, stdout); err != nil {
		if code != exitOK {
			fmt.Fprintf(stderr, "splitdemo clusterbench: %v\n", err)
		}
		return code
	}
	want := map[string]bool{}
	for _, m := range strings.Split(*only, ",") {
		switch m = strings.TrimSpace(m); m {
		case "cost", "failover", "recovery", "split":
			want[m] = true
		default:
			fmt.Fprintf(stderr, "splitdemo clusterbench: --only: unknown measurement %q (want cost, failover, recovery, split)\n", m)
			return exitUsage
		}
	}
	switch {
	case *runs < 1:
		fmt.Fprintf(stderr, "splitdemo clusterbench: --runs %d: want at least 1\n", *runs)
		return exitUsage
	case *writers < 1:
		fmt.Fprintf(stderr, "splitdemo clusterbench: --writers %d: want at least 1\n", *writers)
		return exitUsage
	case *duration <= 0:
		fmt.Fprintf(stderr, "splitdemo clusterbench: --duration %v: want a positive duration\n", *duration)
		return exitUsage
	case *recoveryBytes < 1<<20:
		fmt.Fprintf(stderr, "splitdemo clusterbench: --recovery-bytes %d: want at least 1 MiB\n", *recoveryBytes)
		return exitUsage
	}
	var strategies []string
	for _, st := range strings.Split(*strategy, ",") {
		st = strings.TrimSpace(st)
		if !slices.Contains(clusterbench.Strategies, st) {
			fmt.Fprintf(stderr, "splitdemo clusterbench: --strategy: unknown strategy %q (want %s)\n", st, strings.Join(clusterbench.Strategies, ", "))
			return exitUsage
		}
		strategies = append(strategies, st)
	}
	parent, err := parseByteSize(*parentSize)
	if err != nil || parent < 1<<20 {
		fmt.Fprintf(stderr, "splitdemo clusterbench: --parent-size %q: want a size of at least 1MiB\n", *parentSize)
		return exitUsage
	}
	if err := paceable("--rate", *rate, *writers, "one write per writer"); err != nil {
		fmt.Fprintf(stderr, "splitdemo clusterbench: %v\n", err)
		return exitUsage
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo clusterbench: %v\n", err)
		return exitFail
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(stderr, "splitdemo clusterbench: %v\n", err)
		return exitFail
	}
	dir := filepath.Join(*out, "cluster")
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "splitdemo clusterbench: %v\n", err)
		return exitFail
	}
	opts := clusterbench.Options{LogLevel: *logLevel}
	if *profile {
		if opts.ProfileDir, err = filepath.Abs(*out); err != nil {
			fmt.Fprintf(stderr, "splitdemo clusterbench: %v\n", err)
			return exitFail
		}
	}
	c, err := clusterbench.Start(bin, dir, 3, opts)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo clusterbench: %v\n", err)
		return exitFail
	}
	defer c.Stop()
	progress := func(s string) { fmt.Fprintln(stdout, s) }
	load := clusterbench.LoadConfig{Rate: *rate, Writers: *writers, Duration: *duration}
	var res clusterbenchResult
	if want["cost"] {
		fmt.Fprintln(stdout, "== cost of a replica")
		if res.Cost, err = clusterbench.ReplicationCost(ctx, c, 3, *runs, load, progress); err != nil {
			fmt.Fprintf(stderr, "splitdemo clusterbench: cost: %v\n", err)
			return exitFail
		}
	}
	if want["failover"] {
		fmt.Fprintln(stdout, "== failover")
		if res.Failover, err = clusterbench.Failover(ctx, c, 3, *runs, load, progress); err != nil {
			fmt.Fprintf(stderr, "splitdemo clusterbench: failover: %v\n", err)
			return exitFail
		}
	}
	if want["recovery"] {
		fmt.Fprintln(stdout, "== peer recovery")
		if res.Recovery, err = clusterbench.Recovery(ctx, c, *recoveryBytes, *runs, progress); err != nil {
			fmt.Fprintf(stderr, "splitdemo clusterbench: recovery: %v\n", err)
			return exitFail
		}
	}
	if want["split"] {
		fmt.Fprintln(stdout, "== split of a replicated shard")
		cfg := clusterbench.SplitConfig{Strategies: strategies, ParentSize: parent, Runs: *runs,
			Load: clusterbench.LoadConfig{Rate: *rate, Writers: *writers, Duration: *duration}}
		if res.Split, err = clusterbench.Split(ctx, c, cfg, progress); err != nil {
			fmt.Fprintf(stderr, "splitdemo clusterbench: split: %v\n", err)
			return exitFail
		}
	}
	js, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(*out, "clusterbench.json"), js, 0o644); err != nil {
		fmt.Fprintf(stderr, "splitdemo clusterbench: %v\n", err)
		return exitFail
	}
	report := clusterbenchReport(res, load, *runs, reproduceClusterbench(fs, *runs, *only))
	if err := os.WriteFile(filepath.Join(*out, "clusterbench.md"), []byte(report), 0o644); err != nil {
		fmt.Fprintf(stderr, "splitdemo clusterbench: %v\n", err)
		return exitFail
	}
	fmt.Fprint(stdout, report)
	return exitOK
}

// spread formats a median and range.
func spread(xs []float64, format string) string {
	if len(xs) == 0 {
		return "-"
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf(format+" ("+format+"–"+format+")", s[len(s)/2], s[0], s[len(s)-1])
}

// reproduceClusterbench is the command line that measures the same: the
// flags given (but --out and --profile), with --runs and --only always.
func reproduceClusterbench(fs *flag.FlagSet, runs int, only string) string {
	s := fmt.Sprintf("go run ./cmd/splitdemo clusterbench --runs %d --only %s", runs, only)
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "runs", "only", "out", "profile", "log-level":
		default:
			s += fmt.Sprintf(" --%s %s", f.Name, f.Value)
		}
	})
	return s
}

func clusterbenchReport(res clusterbenchResult, load clusterbench.LoadConfig, runs int, reproduce string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# clusterbench: 3 serve processes on this machine, %d runs each\n\n", runs)
	if len(res.Cost) > 0 {
		var ops, p50, p99 [2][]float64
		for _, r := range res.Cost {
			ops[r.Replicas] = append(ops[r.Replicas], r.OpsPerS)
			p50[r.Replicas] = append(p50[r.Replicas], float64(r.P50)/1e6)
			p99[r.Replicas] = append(p99[r.Replicas], float64(r.P99)/1e6)
		}
		fmt.Fprintf(&b, "## What a replica costs a write\n\n%.0f fsync'd writes/s offered by %d writers, 1 KiB documents, 3 shards, %v measured per run; median (range).\n\n",
			load.Rate, load.Writers, load.Duration)
		fmt.Fprintf(&b, "| | writes/s | p50 ms | p99 ms |\n|---|---|---|---|\n")
		for rep := range 2 {
			fmt.Fprintf(&b, "| %d replica(s) | %s | %s | %s |\n", rep, spread(ops[rep], "%.0f"), spread(p50[rep], "%.2f"), spread(p99[rep], "%.2f"))
		}
		var ratio, p99ratio []float64
		for i := range min(len(ops[0]), len(ops[1])) {
			ratio = append(ratio, ops[1][i]/ops[0][i])
			p99ratio = append(p99ratio, p99[1][i]/p99[0][i])
		}
		fmt.Fprintf(&b, "\nThroughput with a replica over without, run by run: %s; p99 with over without: %s.\n\n",
			spread(ratio, "%.2f"), spread(p99ratio, "%.2f"))
	}
	if len(res.Failover) > 0 {
		var un, worst, green []float64
		for _, r := range res.Failover {
			un = append(un, float64(r.Unavailable)/1e6)
			worst = append(worst, float64(r.WriteMax)/1e6)
			green = append(green, r.Green.Seconds())
		}
		fmt.Fprintf(&b, "## Failover\n\nThe node of a primary killed with SIGKILL under the same load (failure detection 1 s),"+
			" %d runs: from the kill to the first acknowledged write to its shards, p50 %.0f ms, p99 %.0f ms, max %.0f ms"+
			" (p99 by nearest rank: with fewer than 100 runs, the maximum); the slowest write to those shards took %s ms;"+
			" the node restarted, the index was green again after %s s (its copies rebuilt by peer recovery).\n\n",
			len(un), clusterbench.Percentile(un, 50), clusterbench.Percentile(un, 99), clusterbench.Percentile(un, 100),
			spread(worst, "%.0f"), spread(green, "%.1f"))
	}
	if len(res.Recovery) > 0 {
		var took, cp, mib []float64
		for _, r := range res.Recovery {
			took = append(took, r.Recovery.Seconds())
			cp = append(cp, r.CopyOnDisk.Seconds())
			mib = append(mib, float64(r.Bytes)/(1<<20))
		}
		var rate, raw []float64
		for i := range took {
			rate = append(rate, mib[i]/took[i])
			raw = append(raw, float64(res.Recovery[i].CopyBytes)/(1<<20)/cp[i])
		}
		fmt.Fprintf(&b, "## Peer recovery\n\nA copy of %s MiB on disk: recovered (number_of_replicas 0 → 1 until green) in %s s, %s MiB/s; "+
			"its files copied and synced on this disk in %s s, %s MiB/s.\n\n", spread(mib, "%.0f"), spread(took, "%.1f"), spread(rate, "%.1f"),
			spread(cp, "%.1f"), spread(raw, "%.1f"))
	}
	if len(res.Split) > 0 {
		b.WriteString(clusterbench.SplitReport(res.Split))
	}
	fmt.Fprintf(&b, "Reproduce: `%s`.\n", reproduce)
	return b.String()
}

// parseByteSize reads a size in bytes, or with a KiB, MiB or GiB suffix.
func parseByteSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("not a size: %q", s)
	}
	return n * mult, nil
}
