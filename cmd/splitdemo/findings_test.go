package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/lab/findings"
)

// Bad flags exit 2 with a message naming the bad value.
func TestFindingsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--only", "1,x"}, `"x"`},
		{[]string{"--only", "14"}, "14"},
		{[]string{"--only", "3,3"}, "3"},
		{[]string{"--runs", "-1"}, "-1"},
		{[]string{"--log-level", "loud"}, `"loud"`},
		{[]string{"--bogus"}, "bogus"},
		{[]string{"extra"}, `"extra"`},
		{[]string{"--big", "--quick"}, "--big"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stderr strings.Builder
			code := run(append([]string{"findings"}, tc.args...), io.Discard, &stderr)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d (stderr %q)", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q does not name %s", stderr.String(), tc.want)
			}
		})
	}
}

// The help lists every question the harness has, by its number.
func TestFindingsHelp(t *testing.T) {
	var stdout strings.Builder
	if code := run([]string{"help", "findings"}, &stdout, io.Discard); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	help := stdout.String()
	for _, flag := range []string{"--quick", "--report FILE", "--out DIR", "--report design/findings.md"} {
		if !strings.Contains(help, flag) {
			t.Fatalf("help lacks %s:\n%s", flag, help)
		}
	}
	list := help[strings.Index(help, "The questions"):]
	list = list[:strings.Index(list, "\n\n")]
	for _, q := range findings.Questions() {
		if !regexp.MustCompile(`(^|\s)` + strconv.Itoa(q.ID) + ` [a-z]`).MatchString(list) {
			t.Errorf("help's list of questions lacks question %d (%s):\n%s", q.ID, q.Title, list)
		}
	}
}

// A run of fake questions through the command: an answered question exits
// 0, a failed one 1, an unbuilt one is not a failure; an interrupted run
// exits 1 and still writes what ran.
func TestFindingsRun(t *testing.T) {
	answered := findings.Question{ID: 1, Slug: "a", Title: "A", Question: "?", RaisedIn: "x",
		Run: func(context.Context, findings.Config) (findings.Answer, error) {
			return findings.Answer{Answer: "yes"}, nil
		}}
	unbuilt := findings.Question{ID: 2, Slug: "b", Title: "B", Question: "?", RaisedIn: "x",
		Run: func(context.Context, findings.Config) (findings.Answer, error) {
			return findings.Answer{}, findings.ErrNotBuilt
		}}
	failed := findings.Question{ID: 3, Slug: "c", Title: "C", Question: "?", RaisedIn: "x",
		Run: func(context.Context, findings.Config) (findings.Answer, error) {
			return findings.Answer{}, errors.New("boom")
		}}
	for _, tc := range []struct {
		name      string
		qs        []findings.Question
		cancelled bool
		want      int
	}{
		{"answered and unbuilt", []findings.Question{answered, unbuilt}, false, exitOK},
		{"one failed", []findings.Question{answered, failed}, false, exitFail},
		{"interrupted", []findings.Question{answered, answered}, true, exitFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			c, _, err := parseFindings([]string{"--quick", "--out", out, "--log-level", "error"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			c.questions = tc.qs
			ctx, cancel := context.WithCancel(context.Background())
			if tc.cancelled {
				cancel()
			}
			defer cancel()
			var stdout strings.Builder
			if code := findingsRun(ctx, c, &stdout, io.Discard); code != tc.want {
				t.Fatalf("exit %d, want %d; stdout:\n%s", code, tc.want, stdout.String())
			}
			for _, f := range []string{"findings.json", "findings.md"} {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Errorf("%s: %v", f, err)
				}
			}
		})
	}
}

// --runs 0 is a usage error naming the value, as --runs -1 is ("must be at
// least 1"): taken as findings.Config's default, a run asked for no
// repetitions would quote medians of five (2 with --quick).
func TestFindingsRefusesRunsZero(t *testing.T) {
	c, code, err := parseFindings([]string{"--runs", "0"}, io.Discard)
	if err == nil {
		t.Fatalf("--runs 0 accepted (runs %d: findings.Config then uses its default)", c.runs)
	}
	if code != exitUsage || !strings.Contains(err.Error(), "--runs 0") {
		t.Fatalf("--runs 0: exit %d, error %q; want a usage error naming --runs 0", code, err)
	}
	if c, _, err := parseFindings(nil, io.Discard); err != nil || c.runs != 0 {
		t.Fatalf("no --runs: runs %v, error %v; want the default (0 for findings.Config)", c, err)
	}
}

// A --report the run could not write is a usage error naming the value,
// exit 2, before any experiment runs: a directory, a file under a file, a
// directory that does not exist (outside --out).
func TestFindingsRefusesUnwritableReport(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, report, want string }{
		{"a directory", dir, "is a directory"},
		{"under a file", filepath.Join(file, "r.md"), "is not a directory"},
		{"in a missing directory", filepath.Join(dir, "missing", "r.md"), "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			code := run([]string{"findings", "--quick", "--only", "7", "--out", filepath.Join(dir, "out"), "--report", tc.report}, io.Discard, &stderr)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d (stderr %q)", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), strconv.Quote(tc.report)) || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q does not name %q and say %q", stderr.String(), tc.report, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
				t.Fatalf("--out was created: the run started before refusing --report")
			}
		})
	}
}

// --report names where the report goes (default findings.md in --out); a
// report in a directory --out will create is accepted; the header's
// command line is the one given.
func TestFindingsReportFlag(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "design", "findings")
	c, _, err := parseFindings([]string{"--quick", "--out", out}, io.Discard)
	if err != nil || c.report != filepath.Join(out, "findings.md") {
		t.Fatalf("default report %q, error %v; want findings.md in --out", c.report, err)
	}
	report := filepath.Join(dir, "design", "findings.md")
	if err := os.MkdirAll(filepath.Dir(report), 0o755); err != nil {
		t.Fatal(err)
	}
	c, _, err = parseFindings([]string{"--quick", "--out", out, "--report", report, "--log-level", "error"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(report); err == nil {
		t.Fatalf("checking --report left a file behind")
	}
	c.questions = []findings.Question{{ID: 1, Slug: "a", Title: "A", Question: "?", RaisedIn: "x",
		Run: func(context.Context, findings.Config) (findings.Answer, error) {
			return findings.Answer{Answer: "yes", Summary: "yes", Charts: []string{"q01.png"}}, nil
		}}}
	if code := findingsRun(context.Background(), c, io.Discard, io.Discard); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	md, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	want := "`splitdemo findings --quick --out " + out + " --report " + report + " --log-level error`"
	for _, w := range []string{want, "](findings/q01.png)"} {
		if !strings.Contains(string(md), w) {
			t.Errorf("report lacks %q:\n%s", w, md)
		}
	}
}
