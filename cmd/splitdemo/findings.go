package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardsplit/shardsplit/lab/findings"
)

const findingsUsage = `splitdemo findings: the experiment set behind design/findings.md.

Usage:
  splitdemo findings [--quick] [--big] [--out DIR] [--report FILE] [--runs N] [--seed N]
                     [--only 1,5,11] [--log-level L]

Runs one experiment per question the in-place split RFC argues about
(opensearch-project/OpenSearch#12918, #13923, #13925), writes into --out
findings.json (every number of every question: each run's value, the median
and the range) and the charts as PNGs, and writes the report to --report:
the whole of design/findings.md. The report names the commit, the command
line and the machine; says how to read the numbers; has a Summary table (one
line of at most 60 words per question) and a Goals table (each goal met or
not, and why); then a section per question: what was measured, every number,
the command that reproduces it and what was not measured. Its links to the
charts and findings.json are relative from the report's directory to --out.

The questions (the report has their full text):
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
(the report says why) or the run was interrupted; 2 on bad input (a --report
that is a directory or cannot be written included), before any experiment runs.

Flags:
  --quick          tiny data, 2 runs per timing (a smoke test)
  --big            add the 4 GiB parent to question 11 (not with --quick)
  --out DIR        directory for findings.json and the charts (default ./findings-out)
  --report FILE    the report (default OUT/findings.md); its directory must exist
                   unless it is inside --out
  --runs N         repetitions of each timed measurement (default 5; 2 with --quick)
  --seed N         workload seed (default 1)
  --only LIST      comma-separated question numbers to run (default all); the
                   others keep their answers from OUT/findings.json, each
                   marked in the report with the run that measured it
  --log-level L    zap level for the log on stderr (default warn)

Examples:
  splitdemo findings --quick --out /tmp/findings
  splitdemo findings --big --out design/findings --report design/findings.md   # regenerates design/findings.md
  splitdemo findings --only 1,11 --out findings-out
  splitdemo findings --only 13 --out design/findings --report design/findings.md   # regenerates section 13
`

type findingsConfig struct {
	quick  bool
	big    bool
	out    string
	report string
	// command is the command line the report's header names.
	command  string
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
	fs.StringVar(&c.report, "report", "", "")
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
	if c.report == "" {
		c.report = filepath.Join(c.out, "findings.md")
	}
	if err := checkReport(c.report, c.out); err != nil {
		return nil, exitUsage, err
	}
	c.command = findingsCommandLine("splitdemo findings", args)
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
		Quick: c.quick, Big: c.big, Out: c.out, Report: c.report, Command: c.command, Runs: c.runs, Seed: c.seed, Logger: logger, Binary: self,
		Progress: func(msg string) {
			fmt.Fprintf(stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), msg)
		},
	}
	rep, err := findings.Run(ctx, cfg, qs)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo findings: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%d question(s) in %.0f s; report %s; findings.json and charts in %s\n", len(rep.Answers), rep.Seconds, c.report, c.out)
	status := exitOK
	if failed := rep.Failed(); len(failed) > 0 {
		fmt.Fprintf(stdout, "not answered: questions %v (the report says why)\n", failed)
		status = exitFail
	}
	if nb := rep.NotBuilt(); len(nb) > 0 {
		fmt.Fprintf(stdout, "not built yet: questions %v\n", nb)
	}
	if rep.Interrupted {
		fmt.Fprintln(stdout, "interrupted: only the questions in the report ran")
		status = exitFail
	}
	return status
}

// checkReport refuses a report path the run could not write, before any
// experiment runs: a directory, a file that cannot be opened for writing,
// or a directory that does not exist (unless it is inside out, which the
// run creates).
func checkReport(report, out string) error {
	if report == "" {
		return errors.New("--report must name a file")
	}
	if fi, err := os.Stat(report); err == nil && fi.IsDir() {
		return fmt.Errorf("--report %q is a directory, not a file", report)
	}
	dir := filepath.Dir(report)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if inside(dir, out) {
			return nil
		}
		return fmt.Errorf("--report %q: directory %q does not exist", report, dir)
	case err != nil:
		return fmt.Errorf("--report %q: %w", report, err)
	case !fi.IsDir():
		return fmt.Errorf("--report %q: %q is not a directory", report, dir)
	}
	_, statErr := os.Stat(report)
	f, err := os.OpenFile(report, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("--report %q cannot be written: %w", report, err)
	}
	f.Close()
	if errors.Is(statErr, fs.ErrNotExist) {
		os.Remove(report) // made only to learn that it can be: the run writes it
	}
	return nil
}

// inside reports whether dir is base or under it.
func inside(dir, base string) bool {
	d, err1 := filepath.Abs(dir)
	b, err2 := filepath.Abs(base)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(b, d)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// findingsCommandLine is the command as a shell takes it back: an argument is
// quoted when it holds anything but plain characters.
func findingsCommandLine(prefix string, args []string) string {
	parts := []string{prefix}
	for _, a := range args {
		if a == "" || strings.ContainsFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=,:@+", r))
		}) {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}
