package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/storage"
	"go.uber.org/zap"
)

// runCmd runs splitdemo with args in this process and returns what it
// printed and its exit code.
func runCmd(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// runPaths returns a --data directory and an --acked write log in a new
// temporary directory; neither exists yet.
func runPaths(t *testing.T) (data, acked string) {
	dir := t.TempDir()
	return filepath.Join(dir, "data"), filepath.Join(dir, "acked.jsonl")
}

// mustRun runs 'splitdemo run' with args and fails t unless it exits 0.
func mustRun(t *testing.T, args ...string) {
	t.Helper()
	if _, errOut, code := runCmd(append([]string{"run"}, args...)...); code != exitOK {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
}

// openData opens the index a run left in data, as recovery does; the
// caller closes it.
func openData(t *testing.T, data string) *node.Node {
	t.Helper()
	n, _, _, err := recovery.Open(storage.Options{Dir: data, Durability: storage.DurabilityRequest}, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestHelpAndBareRun(t *testing.T) {
	out, _, code := runCmd("help")
	if code != exitOK || !strings.Contains(out, "compare") || !strings.Contains(out, "route") {
		t.Errorf("splitdemo help = %q (exit %d), want usage naming compare and route", out, code)
	}
	for _, args := range [][]string{{"help", "route"}, {"route", "--help"}, {"route", "-h"}} {
		out, _, code := runCmd(args...)
		if code != exitOK || !strings.Contains(out, "--split SHARD:N") || !strings.Contains(out, "Example") {
			t.Errorf("%v: exit %d, help %q", args, code, out[:min(len(out), 80)])
		}
	}
	if _, _, code := runCmd("frobnicate"); code != exitUsage {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
	// Help for a command that does not exist says so, as bad input,
	// instead of printing the general usage as if asked for it.
	out, errOut, code := runCmd("help", "frobnicate")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `"frobnicate"`) {
		t.Errorf("help frobnicate: exit %d, stdout %q, stderr %q; want exit 2 and stderr naming the command", code, out, errOut)
	}
}

// help is a command the usage lists ("help print this help, or a command's
// help"), so 'splitdemo help help' (and 'help --help') is asking for help
// and prints the usage, exit 0, not "unknown command".
func TestHelpForHelpPrintsTheUsage(t *testing.T) {
	for _, args := range [][]string{{"help", "help"}, {"help", "--help"}, {"help", "-h"}, {"--help", "help"}} {
		out, errOut, code := runCmd(args...)
		if code != exitOK || out != usage || errOut != "" {
			t.Errorf("%v: exit %d, stdout %d bytes (usage: %v), stderr %q; want exit 0 and the usage",
				args, code, len(out), out == usage, errOut)
		}
	}
}
