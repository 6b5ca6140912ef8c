package tests

// Real kill -9: start 'splitdemo run' as a subprocess (writing, splitting
// every 100 ms and merging two adjacent leaves every 150 ms), SIGKILL it at a random instant, run
// 'splitdemo verify' on what it left, restart, repeat. Every kill must
// leave a directory that recovers to a consistent index in which every
// acknowledged write is present.

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestKillDashNine(t *testing.T) {
	kills := 20
	if s := os.Getenv("SHARDSPLIT_KILLS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	bin := buildSplitdemo(t)
	dir := t.TempDir()
	data, acked := filepath.Join(dir, "data"), filepath.Join(dir, "acked.jsonl")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := range kills {
		mode := "partition"
		if i%2 == 1 {
			mode = "opensearch" // only the first run creates the index; later runs reopen it
		}
		run := exec.Command(bin, "run", "--data", data, "--acked", acked, "--docs", "300", "--writers", "4",
			"--split-every", "100ms", "--merge-every", "150ms", "--split-ways", "2", "--max-shards", "24", "--seed", strconv.Itoa(i), "--mode", mode)
		var out strings.Builder
		run.Stdout, run.Stderr = &out, &out
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(150+rng.IntN(600)) * time.Millisecond)
		_ = run.Process.Signal(syscall.SIGKILL)
		err := run.Wait()
		if st, ok := err.(*exec.ExitError); !ok || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("kill %d: run did not die of SIGKILL (%v):\n%s", i, err, out.String())
		}
		if _, err := os.Stat(data); err != nil {
			t.Logf("kill %d: killed before the index directory existed; nothing to verify", i)
			continue
		}
		v := exec.Command(bin, "verify", "--data", data, "--acked", acked)
		vout, err := v.CombinedOutput()
		if err != nil {
			t.Fatalf("kill %d: verify failed (%v):\n%s\nrun output:\n%s", i, err, vout, out.String())
		}
		t.Logf("kill %d: %s", i, strings.TrimSpace(string(vout)))
	}
}
