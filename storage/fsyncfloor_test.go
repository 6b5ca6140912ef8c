package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// TestFsyncFloorProbe is a manual probe (skipped unless
// SHARDSPLIT_FSYNC_FLOOR names a scratch directory on the disk to measure):
// how long do fsync'd writers go without an acknowledgement while one
// metadata operation of the kind a split makes (a directory fsync, a new
// file synced with its directory, a hard link) runs beside them?
//
// 64 writers put 1 KiB values with pebble.Sync at 5,000 writes/s in total
// (the split-scale load, design/2026-11-30-split-scale.md) into one Pebble
// store; every 250 ms, in turn, one operation runs in a side directory of
// the same file system. For each operation the probe takes the longest
// interval between two consecutive acknowledgements that overlaps it;
// "none" marks an instant and does nothing, the steady baseline. A split
// makes dozens of these operations (Pebble's checkpoint, open and excise,
// the journal): whatever one costs the writers is a floor under the split's
// longest stall.
//
// The fence rows ask the same of the handoff's shape: the writers hold a
// shared lock (a node's apply lock) and the handoff takes it, so its gap
// holds the drain of the writes in flight, what runs under the fence, and
// the next writes' own fsync. Each runs in the middle of a 60 ms window,
// to compare with the row that does nothing for 60 ms: a fence that does
// nothing at all is the floor of any handoff that fences.
func TestFsyncFloorProbe(t *testing.T) {
	root := os.Getenv("SHARDSPLIT_FSYNC_FLOOR")
	if root == "" {
		t.Skip("SHARDSPLIT_FSYNC_FLOOR not set")
	}
	dir, err := os.MkdirTemp(root, "floor-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := pebble.Open(filepath.Join(dir, "db"), &pebble.Options{FS: vfs.Default, MemTableSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	side := filepath.Join(dir, "side")
	if err := os.Mkdir(side, 0o755); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(side, "big")
	if err := os.WriteFile(big, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	syncDirOS := func(d string) error {
		f, err := os.Open(d)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	}
	var opened []*pebble.DB
	defer func() {
		for _, st := range opened {
			_ = st.Close()
		}
	}()
	// fence is the writers' apply lock, as a node's (node.Fence): every
	// write holds it shared; a handoff takes it, which waits for the writes
	// in flight (each in its WAL fsync) and holds the new ones back.
	var fence sync.RWMutex
	// child stands for a split's children: a second store on the same
	// disk, whose WAL a handoff syncs.
	child, err := pebble.Open(filepath.Join(side, "child"), &pebble.Options{FS: vfs.Default, Logger: zapPebbleLogger{zap.NewNop().Sugar()}})
	if err != nil {
		t.Fatal(err)
	}
	opened = append(opened, child)
	commitTable := func() error {
		tmp, final := filepath.Join(side, "TABLE.tmp"), filepath.Join(side, "TABLE")
		if err := writeSynced(tmp, 4096); err != nil {
			return err
		}
		if err := os.Rename(tmp, final); err != nil {
			return err
		}
		return syncDirOS(side)
	}
	// fenced runs work under the fence in the middle of a 60 ms window, so
	// that its row compares with the 60 ms row of doing nothing: the
	// handoff of an aligned 100 MiB split, against the steady window of
	// the same length.
	fenced := func(work func() error) func(int) error {
		return func(int) error {
			time.Sleep(30 * time.Millisecond)
			fence.Lock()
			err := work()
			fence.Unlock()
			time.Sleep(30 * time.Millisecond)
			return err
		}
	}
	ops := []struct {
		name string
		do   func(i int) error
	}{
		{"none", func(int) error { return nil }},
		{"nothing for 60 ms (an aligned 100 MiB split's length)", func(int) error {
			time.Sleep(60 * time.Millisecond)
			return nil
		}},
		{"open a new, empty Pebble store (closed at the end)", func(i int) error {
			st, err := pebble.Open(filepath.Join(side, fmt.Sprintf("db%d", i)), &pebble.Options{FS: vfs.Default, Logger: zapPebbleLogger{zap.NewNop().Sugar()}})
			if err != nil {
				return err
			}
			opened = append(opened, st)
			return nil
		}},
		{"directory fsync", func(int) error { return syncDirOS(side) }},
		{"new 4 KiB file, fsync it and its directory", func(i int) error {
			if err := writeSynced(filepath.Join(side, fmt.Sprintf("f%d", i)), 4096); err != nil {
				return err
			}
			return syncDirOS(side)
		}},
		{"new 1 MiB file (a copied WAL), fsync it and its directory", func(i int) error {
			if err := writeSynced(filepath.Join(side, fmt.Sprintf("m%d", i)), 1<<20); err != nil {
				return err
			}
			return syncDirOS(side)
		}},
		{"the same in 128 KiB steps, each fsynced, 1 ms apart", func(i int) error {
			f, err := os.Create(filepath.Join(side, fmt.Sprintf("s%d", i)))
			if err != nil {
				return err
			}
			defer f.Close()
			for range 8 {
				if _, err := f.Write(make([]byte, 128<<10)); err != nil {
					return err
				}
				if err := f.Sync(); err != nil {
					return err
				}
				time.Sleep(time.Millisecond)
			}
			return syncDirOS(side)
		}},
		{"a table's commit today: new 4 KiB file, fsync, rename over, directory fsync", func(int) error { return commitTable() }},
		{"overwrite 4 KiB in place in a written file, fdatasync", func(i int) error {
			f, err := os.OpenFile(big, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteAt(make([]byte, 4096), int64(i%2)*4096); err != nil {
				return err
			}
			return syscall.Fdatasync(int(f.Fd()))
		}},
		{"60 ms, a fence in its middle: drain the writes in flight, release", fenced(func() error { return nil })},
		{"60 ms, a fence held over a synced write to a second store", fenced(func() error {
			return child.Set([]byte("tail"), make([]byte, 1024), pebble.Sync)
		})},
		{"60 ms, a fence held over that and a table's commit after it", fenced(func() error {
			if err := child.Set([]byte("tail"), make([]byte, 1024), pebble.Sync); err != nil {
				return err
			}
			return commitTable()
		})},
		{"hard link, fsync its directory", func(i int) error {
			if err := os.Link(big, filepath.Join(side, fmt.Sprintf("l%d", i))); err != nil {
				return err
			}
			return syncDirOS(side)
		}},
	}

	const writers, rate, run = 64, 5000, 40 * time.Second
	start := time.Now()
	var mu sync.Mutex
	var acks []time.Duration
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			every := time.Second * writers / rate
			next := time.Now().Add(every * time.Duration(w) / writers)
			val := make([]byte, 1024)
			for i := 0; ; i++ {
				time.Sleep(time.Until(next))
				next = next.Add(every)
				select {
				case <-stop:
					return
				default:
				}
				fence.RLock()
				err := db.Set([]byte(fmt.Sprintf("w%02d-%08d", w, i)), val, pebble.Sync)
				fence.RUnlock()
				if err != nil {
					t.Error(err)
					return
				}
				at := time.Since(start)
				mu.Lock()
				acks = append(acks, at)
				mu.Unlock()
			}
		}()
	}
	type span struct{ op, from, to time.Duration }
	spans := make([][]span, len(ops))
	time.Sleep(time.Second)
	for i := 0; time.Since(start) < run-time.Second; i++ {
		k := i % len(ops)
		from := time.Since(start)
		if err := ops[k].do(i); err != nil {
			t.Fatal(err)
		}
		to := time.Since(start)
		spans[k] = append(spans[k], span{to - from, from, to})
		time.Sleep(250 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(acks)
	// longestGap is the longest interval between consecutive
	// acknowledgements that overlaps [from, to].
	longestGap := func(from, to time.Duration) time.Duration {
		i, _ := slices.BinarySearch(acks, from)
		if i > 0 {
			i--
		}
		var g time.Duration
		for ; i+1 < len(acks) && acks[i] <= to; i++ {
			g = max(g, acks[i+1]-acks[i])
		}
		return g
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	t.Logf("%d acknowledgements in %s (%.0f/s)", len(acks), run, float64(len(acks))/run.Seconds())
	for k, op := range ops {
		var gaps, took []time.Duration
		for _, s := range spans[k] {
			gaps = append(gaps, longestGap(s.from, s.to))
			took = append(took, s.op)
		}
		slices.Sort(gaps)
		slices.Sort(took)
		if len(gaps) == 0 {
			continue
		}
		t.Logf("%-58s %2d times: took median %.2f ms; longest writer gap over it median %.2f ms, range %.2f-%.2f ms",
			op.name, len(gaps), ms(took[len(took)/2]), ms(gaps[len(gaps)/2]), ms(gaps[0]), ms(gaps[len(gaps)-1]))
	}
}

// writeSynced creates name with size zero bytes and fsyncs it.
func writeSynced(name string, size int) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(make([]byte, size)); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
