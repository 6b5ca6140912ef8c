package storage

import (
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// Engine.Close while AwaitOwnFlush waits: the wait ends within a poll
// with an error, not at its bound, and nothing deadlocks.
func TestAwaitOwnFlushEndsWhenTheEngineCloses(t *testing.T) {
	e, parent := alignParent(t, Options{}) // not ready
	type res struct {
		waited time.Duration
		ready  bool
		err    error
	}
	done := make(chan res, 1)
	go func() {
		w, r, err := e.AwaitOwnFlush(parent, time.Minute)
		done <- res{w, r, err}
	}()
	time.Sleep(100 * time.Millisecond)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err == nil || r.ready {
			t.Errorf("after Close: waited %v, ready %v, err %v; want an error", r.waited, r.ready, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AwaitOwnFlush still waits 5 s after the engine closed")
	}
}

// With a manual clock AwaitOwnFlush must leave no pending waiter behind
// when it returns: a simulation advances the clock when the code under
// test waits (Manual.BlockUntil), and a leaked After would count as one.
func TestAwaitOwnFlushLeavesNoWaiter(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	e, parent := alignParent(t, Options{Clock: clk}) // not ready
	before := clk.Waiters()
	type res struct {
		ready bool
		err   error
	}
	done := make(chan res, 1)
	go func() {
		_, r, err := e.AwaitOwnFlush(parent, time.Hour)
		done <- res{r, err}
	}()
	clk.BlockUntil(before + 1) // it polls
	// The store's "own" flush: FlushEnd (pending, inside the grace), then
	// the WAL's deletion, each an event that wakes the wait.
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	var r res
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		clk.Advance(time.Hour)
		r = <-done
		t.Log("the wait did not end on the flush's events; advanced the clock")
	}
	if r.err != nil || !r.ready {
		t.Fatalf("ready %v, err %v", r.ready, r.err)
	}
	if n := clk.Waiters(); n != before {
		t.Errorf("%d clock waiters after AwaitOwnFlush returned, %d before: it leaked its polls' After waiters", n, before)
	}
}
