package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunWithMergesThenVerify: 'run' splits and merges (--split-every,
// --merge-every) under writes, and 'verify' checks the index it leaves:
// the table records merges, and every acknowledged write is there.
func TestRunWithMergesThenVerify(t *testing.T) {
	for _, mode := range []string{"partition", "opensearch"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			data, acked := filepath.Join(dir, "data"), filepath.Join(dir, "acked.jsonl")
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
// each in one line naming the flag and its value. Before, a negative
// duration was taken as "never" and a stray argument was ignored.
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

// A run killed between making its data directory and persisting its first
// table created no index (TestKillDashNine hit this window): verify says
// so, and still fails if the write log acknowledges anything.
func TestVerifyIndexNeverCreated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		log   string
		want  int
		ok    bool
		lines int
	}{
		{"nothing acknowledged", `{"w":0,"seq":0,"state":"attempt","id":"w0-0","op":"index","value_hash":7}` + "\n", exitOK, true, 1},
		{"an acknowledged write is lost", `{"w":0,"seq":0,"state":"attempt","id":"w0-0","op":"index","value_hash":7}` + "\n" +
			`{"w":0,"seq":0,"state":"ack","id":"w0-0","op":"index","value_hash":7}` + "\n", exitFail, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data, acked := filepath.Join(dir, "data"), filepath.Join(dir, "acked.jsonl")
			if err := os.Mkdir(data, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(acked, []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := runCmd("verify", "--data", data, "--acked", acked, "--json")
			if code != tc.want {
				t.Fatalf("verify: exit %d, want %d: %s%s", code, tc.want, out, errOut)
			}
			var rep verifyReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			if !rep.NeverCreated || rep.OK != tc.ok || rep.Lines != tc.lines {
				t.Errorf("never created %v, ok %v, %d lines; want true, %v, %d", rep.NeverCreated, rep.OK, rep.Lines, tc.ok, tc.lines)
			}
		})
	}
}
