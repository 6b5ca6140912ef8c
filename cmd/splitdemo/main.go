// Command splitdemo is the user-facing tool of shardsplit: it routes
// documents exactly as OpenSearch does, and (as the project grows) runs an
// in-place shard split and OpenSearch's new-index _split side by side under
// continuous writes and reports what each costs.
//
// It is the only place that calls os.Exit; every subcommand is a function
// from arguments and output streams to an exit status, so tests run it in
// process.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// parseFlags parses a subcommand's command line, which takes flags only:
// --help prints usage and returns exitOK with flag.ErrHelp; a bad flag or a
// stray argument returns exitUsage with an error naming it.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) (int, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return exitOK, err
		}
		return exitUsage, err
	}
	if fs.NArg() > 0 {
		return exitUsage, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return exitOK, nil
}

// paceable checks a rate the load generator paces: n loops share it, each
// waiting n/rate seconds between operations. loadgen reads a wait <= 0 as
// "as fast as possible", so a NaN or infinite rate, or one so low that the
// wait overflows a time.Duration, would run unpaced, the opposite of what
// was asked. Zero is refused too: a caller for which 0 means "none" tests
// for it first. what names one loop's operation ("one write per writer").
func paceable(flag string, rate float64, n int, what string) error {
	switch {
	case !(rate > 0) || math.IsInf(rate, 1):
		return fmt.Errorf("%s %v must be positive and finite", flag, rate)
	case float64(time.Second)*float64(n)/rate >= math.MaxInt64:
		return fmt.Errorf("%s %v is too low to pace (%s every %.3g s)", flag, rate, what, float64(n)/rate)
	}
	return nil
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and found a problem
	exitUsage = 2 // bad input: the message names the bad value
)

const usage = `splitdemo: in-place shard splitting for OpenSearch, measured.

Usage:
  splitdemo <command> [flags] [args]

Commands:
  compare   (the default) split a hot shard in place and, on an identical copy,
            run today's new-index _split x2, under the same continuous writes;
            verify every acknowledged write; write report.md, charts, CSV, JSON
  autosplit split (and propose merges) automatically by load under a moving hot
            spot; verify every acknowledged write; write report.md, a chart, CSV, JSON
  route     print where documents land (OpenSearch-exact routing, optional in-place splits)
  run       write continuously while splitting, logging every attempt and ack (crash tests)
  verify    recover a data directory and check its invariants and a write log
  serve     OpenSearch's REST API over a data directory (in-place split and merge included),
            one node, or a node of a cluster with --seed-hosts
  cluster   start a local cluster of serve processes (3 by default) and stop them on Ctrl-C
  clusterbench  measure a local cluster: a replica's cost, failover, peer recovery
  findings  run the experiment set behind design/findings.md (--quick: a smoke test)
  help      print this help, or a command's help: splitdemo help compare

Examples:
  splitdemo                          # compare on the embedded default (under two minutes)
  splitdemo compare --rate 5000 --writers 64 --docs 1000000 --out big-run
  splitdemo route --shards 8 user-42
  splitdemo serve --data ./splitdemo-data   # then: curl localhost:9200/_cat/shards?v
  splitdemo findings --quick --out /tmp/findings
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && !isHelp(args[0])) {
		return runCompare(args, stdout, stderr)
	}
	switch args[0] {
	case "compare":
		return runCompare(args[1:], stdout, stderr)
	case "route":
		return runRoute(args[1:], stdout, stderr)
	case "autosplit":
		return runAutosplit(args[1:], stdout, stderr)
	case "run":
		return runRun(args[1:], stdout, stderr)
	case "verify":
		return runVerify(args[1:], stdout, stderr)
	case "serve":
		return runServe(args[1:], stdout, stderr)
	case "cluster":
		return runCluster(args[1:], stdout, stderr)
	case "clusterbench":
		return runClusterbench(args[1:], stdout, stderr)
	case "findings":
		return runFindings(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			switch args[1] {
			case "route":
				return runRoute([]string{"--help"}, stdout, stderr)
			case "autosplit":
				return runAutosplit([]string{"--help"}, stdout, stderr)
			case "compare":
				return runCompare([]string{"--help"}, stdout, stderr)
			case "run":
				return runRun([]string{"--help"}, stdout, stderr)
			case "verify":
				return runVerify([]string{"--help"}, stdout, stderr)
			case "serve":
				return runServe([]string{"--help"}, stdout, stderr)
			case "cluster":
				return runCluster([]string{"--help"}, stdout, stderr)
			case "clusterbench":
				return runClusterbench([]string{"--help"}, stdout, stderr)
			case "findings":
				return runFindings([]string{"--help"}, stdout, stderr)
			case "help", "-h", "-help", "--help":
				// help is a command too: its help is the usage.
			default:
				fmt.Fprintf(stderr, "splitdemo help: unknown command %q (try 'splitdemo help')\n", args[1])
				return exitUsage
			}
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "splitdemo: unknown command %q (try 'splitdemo help')\n", args[0])
	return exitUsage
}
