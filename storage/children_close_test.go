package storage

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// lockGate parks Pebble's lock of each store directory it names (the
// first thing pebble.Open does) until release is closed, and counts the
// opens parked.
type lockGate struct {
	dirs    []string
	parked  sync.WaitGroup
	release chan struct{}
}

func (g *lockGate) String() string { return "lockGate" }

func (g *lockGate) MaybeError(op errorfs.Op) error {
	if _, ok := lockIn(op, g.dirs); ok {
		g.parked.Done()
		<-g.release
	}
	return nil
}

// The engine closes while its children's stores are opening (Pebble's
// Open runs outside the engine's lock): Close returns without them, the
// caches it gives up stay alive for the opens in flight (openChildStore's
// references; without them Pebble's Open takes a handle on a freed cache
// and panics "inconsistent reference count"), every store that finishes
// opening is closed again, CreateChildren answers an error rather than a
// panic, and no child directory is left.
func TestCloseWhileChildrenOpen(t *testing.T) {
	g := &lockGate{dirs: []string{"/data/shard-3", "/data/shard-4"}, release: make(chan struct{})}
	g.parked.Add(len(g.dirs))
	fs := errorfs.Wrap(vfs.NewMem(), g)
	e := openTestEngine(t, fs, LayoutPerShard)
	parent, specs := childrenParent(t, e, 200)
	type result struct {
		made     []*Shard
		err      error
		panicked any
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			r.panicked = recover()
			done <- r
		}()
		r.made, _, r.err = e.CreateChildren(parent, specs, ChildExcise, true)
	}()
	g.parked.Wait() // both children's Pebble opens are under way
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(10 * time.Second):
		close(g.release)
		t.Fatal("Close waited for the children's opens")
	}
	close(g.release)
	r := <-done
	if r.panicked != nil {
		t.Fatalf("CreateChildren panicked after the engine closed: %v", r.panicked)
	}
	if r.err == nil || !strings.Contains(r.err.Error(), "engine closed while it opened") {
		t.Fatalf("CreateChildren = %v, want each child's open to report the engine closed", r.err)
	}
	for i, c := range r.made {
		if c != nil {
			t.Errorf("child %d was returned as made by a closed engine", specs[i].Shard)
		}
	}
	for _, s := range specs {
		if _, err := fs.Stat(e.ShardDir(s.Shard)); err == nil {
			t.Errorf("%s is left behind", e.ShardDir(s.Shard))
		}
	}
}
