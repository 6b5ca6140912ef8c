package splitter

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/storage"
)

// Probe (expected to pass; review of 16191d2): stallGate.wait keeps
// Split.waitOutStall's and Merge.waitOutStall's contract. It clears the
// recorded shard under the operation's lock whatever happens; it waits, and
// counts the wait in the report, only when a shard was recorded, the next
// intent is the retry's catch-up, no interrupt was raised before, and the
// shard is still stalled; it holds the operation's lock while it waits
// never; an interrupt during the wait ends it (and that wait is counted).
func TestReviewS15StallGateCountsOnlyAWaitThatHappened(t *testing.T) {
	n, tab, g := stallNode(t, "shard-0", storage.LayoutPerShard)
	s, _ := n.ShardStore(0)
	d := NewDriver(n, Config{StallWait: time.Minute})
	log := zap.NewNop()
	var mu sync.Mutex
	var r Report
	retry := func() bool { return true }
	noRetry := func() bool { return false }
	check := func(what string, gate *stallGate, waits int) {
		t.Helper()
		if gate.on != nil {
			t.Errorf("%s: the recorded shard was not cleared", what)
		}
		if r.StallWaits != waits {
			t.Errorf("%s: %d stall waits counted, want %d", what, r.StallWaits, waits)
		}
		if !mu.TryLock() {
			t.Fatalf("%s: the operation's lock is held after the wait", what)
		}
		mu.Unlock()
	}

	var none stallGate
	none.wait(d, log, &mu, retry, &r)
	check("nothing recorded", &none, 0)

	wait := stallWrites(t, n, tab, g, 0, 200)
	notRetrying := stallGate{on: s}
	notRetrying.wait(d, log, &mu, noRetry, &r)
	check("next intent not the retry's catch-up", &notRetrying, 0)

	early := stallGate{on: s}
	early.interrupted.raise()
	start := time.Now()
	early.wait(d, log, &mu, retry, &r)
	check("interrupted before the wait", &early, 0)
	if took := time.Since(start); took > time.Second {
		t.Errorf("an interrupted gate waited %v", took)
	}

	during := stallGate{on: s}
	free := make(chan bool, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		ok := mu.TryLock()
		if ok {
			mu.Unlock()
		}
		free <- ok
		during.interrupted.raise()
	}()
	during.wait(d, log, &mu, retry, &r)
	check("interrupted during the wait", &during, 1)
	if !<-free {
		t.Errorf("the operation's lock was held during the stall wait")
	}
	if r.StallWaited < 200*time.Millisecond || r.StallWaited > 10*time.Second {
		t.Errorf("StallWaited %v, want about the 300 ms to the interrupt", r.StallWaited)
	}

	g.open()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	over := stallGate{on: s}
	over.wait(d, log, &mu, retry, &r)
	check("stall over", &over, 1)
}
