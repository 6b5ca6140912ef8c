package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/node"
)

// TestRunWithMergesThenVerify: 'run' splits and merges (--split-every,
// --merge-every) under writes, and 'verify' checks the index it leaves:
// the table records merges, and every acknowledged write is there.
func TestRunWithMergesThenVerify(t *testing.T) {
	for _, mode := range []string{"partition", "opensearch"} {
		t.Run(mode, func(t *testing.T) {
			data, acked := runPaths(t)
			_, errOut, code := runCmd("run", "--data", data, "--acked", acked, "--mode", mode, "--docs", "100", "--writers", "2",
				"--split-every", "40ms", "--merge-every", "60ms", "--merges", "2", "--duration", "2m", "--seed", "3")
			if code != exitOK {
				t.Fatalf("run: exit %d: %s", code, errOut)
			}
			out, errOut, code := runCmd("verify", "--data", data, "--acked", acked, "--json")
			if code != exitOK {
				t.Fatalf("verify: exit %d: %s%s", code, out, errOut)
			}
			var rep verifyReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			if !rep.OK || rep.Merges == 0 || rep.Splits == 0 || rep.IDs == 0 {
				t.Fatalf("verify: ok=%v, %d splits, %d merges, %d ids; want ok with splits and merges", rep.OK, rep.Splits, rep.Merges, rep.IDs)
			}
			t.Logf("%d splits, %d merges, %d ids checked, %d documents", rep.Splits, rep.Merges, rep.IDs, rep.Check.Documents)
		})
	}
}

func TestRunMergesNeedsMergeEvery(t *testing.T) {
	for _, args := range [][]string{
		{"--merges", "1"},
		{"--merges", "-1", "--merge-every", "10ms"},
	} {
		_, errOut, code := runCmd(append([]string{"run", "--data", t.TempDir()}, args...)...)
		if code != exitUsage || !strings.Contains(errOut, "--merges "+args[1]) {
			t.Errorf("run %v: exit %d, stderr %q; want %d naming --merges %s", args, code, errOut, exitUsage, args[1])
		}
	}
}

// Bad values of run's other flags are refused before anything is written,
// each in one line naming the flag and its value: a negative duration is
// not taken as "never", nor a stray argument ignored.
func TestRunRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--split-every", "-1s"}, "--split-every -1s"},
		{[]string{"--merge-every", "-5ms"}, "--merge-every -5ms"},
		{[]string{"--duration", "-2s"}, "--duration -2s"},
		{[]string{"--max-shards", "0"}, "--max-shards 0"},
		{[]string{"--docs", "10", "extra"}, `"extra"`},
	} {
		data := filepath.Join(t.TempDir(), "ix")
		_, errOut, code := runCmd(append([]string{"run", "--data", data}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("run %v: exit %d, stderr %q; want %d and one line naming %s", tc.args, code, errOut, exitUsage, tc.want)
		}
		if _, err := os.Stat(data); err == nil {
			t.Errorf("run %v: made %s before refusing", tc.args, data)
		}
	}
}

// A run killed mid-line leaves its write log without a final newline
// (verify skips such a torn line), and a rerun appends to the same log. The
// rerun starts its lines on a line of their own: glued to the torn one, its
// first line would be skipped too, and verify would then refuse the log
// ("acknowledges ..., which writer W never attempted"), exit 1 on an index
// that lost nothing.
func TestRunAfterATornLogLineStartsANewLine(t *testing.T) {
	data, acked := runPaths(t)
	if err := os.WriteFile(acked, []byte(`{"w":0,"seq":0,"state":"att`), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "--data", data, "--acked", acked, "--docs", "10", "--writers", "2", "--duration", "300ms")
	if out, errOut, code := runCmd("verify", "--data", data, "--acked", acked); code != exitOK {
		t.Fatalf("verify after a rerun on a log with a torn last line: exit %d: %s%s", code, out, errOut)
	}
}

// run creates the index in --data and loads --docs documents into it also
// when --data exists and is empty (--data $(mktemp -d)): an empty
// directory holds no index, so the index is new and gets its documents.
func TestRunLoadsIntoAnEmptyDataDir(t *testing.T) {
	data := t.TempDir() // exists, empty
	mustRun(t, "--data", data, "--docs", "20", "--writers", "1", "--duration", "100ms")
	n := openData(t, data)
	defer n.Close()
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	for _, i := range []int{0, 19} {
		id, _ := baseDoc(i)
		if _, found, err := r.Get(id, ""); err != nil || !found {
			t.Errorf("%s of --docs 20 in a --data that existed empty: found %v, error %v", id, found, err)
		}
	}
}

// A writer that fails (its write or its write log line) stops the run at
// once with its error, rather than leave it idling, writers dead, until
// --duration or a kill (after a kill -9 the error would never be reported).
// Here every log write fails (/dev/full).
func TestRunStopsWhenAWriterFails(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	data := filepath.Join(t.TempDir(), "data")
	mustRun(t, "--data", data, "--docs", "10", "--writers", "1", "--duration", "100ms")
	began := time.Now() // a rerun: no load, the writers' own lines fail
	_, errOut, code := runCmd("run", "--data", data, "--acked", "/dev/full", "--docs", "10", "--writers", "2", "--duration", "20s")
	took := time.Since(began)
	if code != exitFail || !strings.Contains(errOut, "no space left on device") {
		t.Fatalf("run with an unwritable write log: exit %d, stderr %q; want exit %d with the error", code, errOut, exitFail)
	}
	if took > 5*time.Second {
		t.Fatalf("run went on %v after every writer had failed (--duration 20s); stderr %q", took.Round(time.Millisecond), errOut)
	}
}
