package storage

import (
	"encoding/base64"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
)

// TestRestartDiskProbe measures what a split's children cost on disk and
// in bytes written across a restart of their engine, against the same
// children and writes with no restart, and against the same parent
// restarted unsplit. Not a pass/fail test: set
// SHARDSPLIT_RESTART_PROBE=1 (optionally SHARDSPLIT_RESTART_PROBE_DOCS,
// default 60000 documents of 1 KiB) and read the log.
//
// The parent is a settled store (its documents compacted to the bottom
// level) with a tail in L0, as a live shard has, split in two with excised
// children (they share the parent's tables through hard links, each
// referencing its half), the parent destroyed and the children released as
// after a handoff. Then, with and without a close and reopen, the children
// take the same writes, a memtable's worth and more, and settle.
func TestRestartDiskProbe(t *testing.T) {
	if os.Getenv("SHARDSPLIT_RESTART_PROBE") == "" {
		t.Skip("SHARDSPLIT_RESTART_PROBE not set")
	}
	docs := 60000
	if n, err := parsePositive(os.Getenv("SHARDSPLIT_RESTART_PROBE_DOCS")); err == nil {
		docs = n
	}
	for _, restart := range []bool{true, false} {
		name := map[bool]string{true: "restart", false: "no-restart"}[restart]
		t.Run(name, func(t *testing.T) { restartDiskArm(t, docs, restart, true) })
	}
	// The control: the same parent, not split, with and without a restart.
	t.Run("unsplit-restart", func(t *testing.T) { restartDiskArm(t, docs, true, false) })
	t.Run("unsplit-no-restart", func(t *testing.T) { restartDiskArm(t, docs, false, false) })
}

func parsePositive(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err == nil && n <= 0 {
		err = fmt.Errorf("%d is not positive", n)
	}
	return n, err
}

// diskState is what the probe reads of a directory: unique file bytes (as
// Engine.DiskUsage counts them), unique allocated bytes (what du counts:
// Pebble preallocates WAL files), and the table files hard-linked more than
// once.
type diskState struct {
	unique, allocated int64
	sharedTables      int
}

func readDisk(t *testing.T, dir string) diskState {
	t.Helper()
	var d diskState
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		d.unique += fi.Size()
		d.allocated += st.Blocks * 512
		if strings.HasSuffix(p, ".sst") && st.Nlink > 1 {
			d.sharedTables++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// settleStores waits until no store of e has a compaction running or pending
// (or 60 s pass).
func settleStores(e *Engine, ids ...routing.ShardID) {
	deadline := time.Now().Add(60 * time.Second)
	quiet := 0
	for time.Now().Before(deadline) && quiet < 5 {
		busy := false
		for _, id := range ids {
			s, ok := e.Shard(id)
			if !ok {
				continue
			}
			m, err := s.st.metrics()
			if err == nil && (m.Compact.NumInProgress > 0 || m.Compact.EstimatedDebt > 0 || m.Flush.NumInProgress > 0) {
				busy = true
			}
		}
		if busy {
			quiet = 0
		} else {
			quiet++
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func restartDiskArm(t *testing.T, docs int, restart, split bool) {
	dir := t.TempDir()
	opts := Options{Dir: dir, FS: vfs.Default, Layout: LayoutPerShard, Logger: zap.NewNop(), CacheBytes: 64 << 20, Durability: DurabilityAsync}
	e := openEngine(t, opts)
	defer func() { _ = e.Close() }()
	parent := openShard(t, e, 2, 2, rootSpan(2))
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 768)
	write := func(s *Shard, ids []string) {
		for _, id := range ids {
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			if _, err := s.Write([]Op{opFor(id, OpIndex, base64.StdEncoding.EncodeToString(src))}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids := idsInRoot(2, docs+docs/10+docs/2)
	write(parent, ids[:docs])
	if err := parent.st.db.Compact(t.Context(), allDocs[0], []byte{tagEnd}, true); err != nil {
		t.Fatal(err)
	}
	write(parent, ids[docs:docs+docs/10]) // a tail in the memtable and L0
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	root := rootSpan(2)
	mid := root.Start + (root.End-root.Start)/2
	specs := []ChildSpec{{Shard: 3, Span: routing.Span{Start: root.Start, End: mid}}, {Shard: 4, Span: routing.Span{Start: mid, End: root.End}}}
	children := []*Shard{parent, parent}
	if split {
		parent.HoldLog()
		var err error
		if children, _, err = e.CreateChildren(parent, specs, ChildExcise, true); err != nil {
			t.Fatal(err)
		}
		if err := e.DestroyShard(2); err != nil {
			t.Fatal(err)
		}
		for _, c := range children {
			c.ReleaseCompactions()
		}
	}
	ids = ids[docs+docs/10:]
	byChild := [2][]string{}
	for _, id := range ids {
		i := 0
		if !specs[0].Span.Contains(opFor(id, OpIndex, "").Key) {
			i = 1
		}
		byChild[i] = append(byChild[i], id)
	}
	// The writers' first writes after the handoff: a few, in the
	// children's memtables and logs when the engine closes.
	for i, c := range children {
		write(c, byChild[i][:100])
		byChild[i] = byChild[i][100:]
		if err := c.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	settleStores(e, 2, 3, 4)
	written := e.BytesWritten()
	before := readDisk(t, dir)
	t.Logf("after the split (if any) and 200 writes, settled: unique %.1f MiB, allocated %.1f MiB, %d tables shared", mib(before.unique), mib(before.allocated), before.sharedTables)
	var reopenWritten uint64
	if restart {
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		closed := readDisk(t, dir)
		e = openEngine(t, opts)
		if split {
			for i, c := range specs {
				children[i] = openShard(t, e, c.Shard, 2, c.Span)
			}
		} else {
			children[0] = openShard(t, e, 2, 2, root)
			children[1] = children[0]
		}
		settleStores(e, 2, 3, 4)
		reopenWritten = e.BytesWritten()
		re := readDisk(t, dir)
		t.Logf("closed: unique %.1f MiB, allocated %.1f MiB, %d tables shared", mib(closed.unique), mib(closed.allocated), closed.sharedTables)
		t.Logf("reopened, settled: unique %.1f MiB, allocated %.1f MiB, %d tables shared; the reopen wrote %.1f MiB",
			mib(re.unique), mib(re.allocated), re.sharedTables, float64(reopenWritten)/(1<<20))
		written = 0 // a new engine counts from 0
	}
	// The same writes either way: more than a memtable into each child.
	for i, c := range children {
		write(c, byChild[i])
	}
	for _, c := range children {
		if err := c.st.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	settleStores(e, 2, 3, 4)
	end := readDisk(t, dir)
	t.Logf("after %d more documents, settled: unique %.1f MiB, allocated %.1f MiB, %d tables shared; written since the split %.1f MiB (of which the reopen %.1f MiB)",
		len(byChild[0])+len(byChild[1]), mib(end.unique), mib(end.allocated), end.sharedTables, float64(e.BytesWritten()-written)/(1<<20), float64(reopenWritten)/(1<<20))
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
