package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardsplit/shardsplit/lab/findings"
)

const findingsUsage = `splitdemo findings: the experiment set behind design/findings.md.

Usage:
  splitdemo findings [--quick] [--big] [--out DIR] [--runs N] [--seed N] [--only 1,5,11] [--log-level L]

Runs one experiment per question the in-place split RFC argues about
(opensearch-project/OpenSearch#12918, #13923, #13925) and writes into --out:
findings.json (every number of every question: each run's value, the median
and the range), a regenerated findings.md to diff against design/findings.md,
and the charts as PNGs. Each answer says what was measured, the
project's goal where there is one (met or not, and why), the command that
reproduces it and what was not measured.

The questions (see findings.md for the full text):
  1 write pause at the handoff     7 routing cost against depth
  2 cleanup and deleted documents  8 stale coordinators, smart clients
  3 search during and after        9 crash safety (crash points, kill -9)
  4 disk before, during, after    10 reversibility: in-place merge
  5 the cost after the handoff    11 scale: 100 MiB to 4 GiB
  6 partition vs hash-range       12 one document per _id in a
    children                         shard, and its cost
                                  13 a replicated split across
                                     processes (3 serve processes)

The full set takes up to an hour and needs a few GiB of scratch disk
($TMPDIR); --big adds a 4 GiB parent to question 11 (about 15 minutes and
5 GiB more). Question 13 starts three serve processes of this binary on
loopback and splits a 1 GiB replicated parent 5 times: on a loaded 2-core
machine its peer recoveries alone can take most of an hour. --quick runs tiny
data and 2 runs per timing in a few minutes: a
smoke test (CI runs it), not numbers to quote. Progress goes to stderr;
Ctrl-C stops after the step in progress and still writes what ran.

Exit status 0 if every selected question was answered; 1 if any failed
(findings.md says why) or the run was interrupted; 2 on bad input.

Flags:
  --quick          tiny data, 2 runs per timing (a smoke test)
  --big            add the 4 GiB parent to question 11 (not with --quick)
  --out DIR        output directory (default ./findings-out)
  --runs N         repetitions of each timed measurement (default 5; 2 with --quick)
  --seed N         workload seed (default 1)
  --only LIST      comma-separated question numbers to run (default all)
  --log-level L    zap level for the log on stderr (default warn)

Example:
  splitdemo findings --quick --out /tmp/findings
  splitdemo findings --only 1,11 --out findings-out
`

type findingsConfig struct {
	quick    bool
	big      bool
	out      string
	runs     int
	seed     int64
	only     []int
	logLevel string
	// questions replaces the selected questions (tests run fakes).
	questions []findings.Question
}

func parseFindings(args []string, stdout io.Writer) (*findingsConfig, int, error) {
	fs := flag.NewFlagSet("findings", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &findingsConfig{}
	fs.BoolVar(&c.quick, "quick", false, "")
	fs.BoolVar(&c.big, "big", false, "")
	fs.StringVar(&c.out, "out", "findings-out", "")
	fs.IntVar(&c.runs, "runs", 0, "")
	fs.Int64Var(&c.seed, "seed", 1, "")
	only := fs.String("only", "", "")
	fs.StringVar(&c.logLevel, "log-level", "warn", "")
	if code, err := parseFlags(fs, args, findingsUsage, stdout); err != nil {
		return nil, code, err
	}
	runsSet := false // 0 is findings.Config's "default", never a count asked for
	fs.Visit(func(f *flag.Flag) { runsSet = runsSet || f.Name == "runs" })
	switch {
	case c.runs < 0 || (runsSet && c.runs == 0):
		return nil, exitUsage, fmt.Errorf("--runs %d must be at least 1", c.runs)
	case c.big && c.quick:
		return nil, exitUsage, errors.New("--big and --quick exclude each other")
	case c.out == "":
		return nil, exitUsage, errors.New("--out must name a directory")
	}
	if *only != "" {
		for _, f := range strings.Split(*only, ",") {
			id, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, exitUsage, fmt.Errorf("--only %q: %q is not a question number", *only, f)
			}
			c.only = append(c.only, id)
		}
	}
	if _, err := findings.Select(c.only); err != nil {
		return nil, exitUsage, fmt.Errorf("--only %q: %w", *only, err)
	}
	if _, err := newLogger(c.logLevel); err != nil {
		return nil, exitUsage, err
	}
	return c, exitOK, nil
}

func runFindings(args []string, stdout, stderr io.Writer) int {
	c, code, err := parseFindings(args, stdout)
	if err != nil {
		if code != exitOK {
			fmt.Fprintf(stderr, "splitdemo findings: %v (try 'splitdemo help findings')\n", err)
		}
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return findingsRun(ctx, c, stdout, stderr)
}

// findingsRun runs the selected questions; split from runFindings so a test
// can cancel it.
func findingsRun(ctx context.Context, c *findingsConfig, stdout, stderr io.Writer) int {
	logger, err := newLogger(c.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo findings: %v\n", err)
		return exitUsage
	}
	defer logger.Sync() //nolint:errcheck
	qs, _ := findings.Select(c.only)
	if c.questions != nil {
		qs = c.questions
	}
	self, err := os.Executable()
	if err != nil {
		self = "" // question 9 then says its kill -9 runs were not made
	}
	start := time.Now()
	cfg := findings.Config{
		Quick: c.quick, Big: c.big, Out: c.out, Runs: c.runs, Seed: c.seed, Logger: logger, Binary: self,
		Progress: func(msg string) {
			fmt.Fprintf(stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), msg)
		},
	}
	rep, err := findings.Run(ctx, cfg, qs)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo findings: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%d question(s) in %.0f s; findings.md, findings.json and charts in %s\n", len(rep.Answers), rep.Seconds, c.out)
	status := exitOK
	if failed := rep.Failed(); len(failed) > 0 {
		fmt.Fprintf(stdout, "not answered: questions %v (findings.md says why)\n", failed)
		status = exitFail
	}
	if nb := rep.NotBuilt(); len(nb) > 0 {
		fmt.Fprintf(stdout, "not built yet: questions %v\n", nb)
	}
	if rep.Interrupted {
		fmt.Fprintln(stdout, "interrupted: only the questions in findings.md ran")
		status = exitFail
	}
	return status
}
