package sim

import (
	"testing"
	"time"
)

// Review of b5da1db ("a call into a known-dead process does not wait").
// do and await no longer wait on a process whose death is known; teardown,
// which ends every seed (after a finding too), still does: it waits up to
// hangTimeout for each held reader and for the node's close, whether or not
// the process is known to be dead. A reader released on a dead process
// blocks in its snapshot's close on the dead store's mutex (see
// finishReader), and so does the node's close: a seed whose finding comes
// while its process is dead (a hang, a driver error after joinParked took
// the death, a journal finding after checkHolds took it) then spends 20 s
// per reader and 20 s for the close before it reports, and leaks the dead
// engine that crash would have reclaimed.
func TestReviewS15TeardownOfAKnownDeadProcessDoesNotWait(t *testing.T) {
	w := dyingWorld(t, true)
	w.fatalMsg = <-w.fatal // known: the step's finding comes before afterStep's crash
	start := time.Now()
	w.teardown()
	if took := time.Since(start); took > hangTimeout/4 {
		t.Errorf("teardown of a known-dead process took %v: it waited on a reader blocked on the dead store", took)
	}
}

// The same with the death still pending on w.fatal (a background flush died
// after the step's last call): teardown's close of the node waits the full
// hangTimeout for a message it never reads.
func TestReviewS15TeardownOfAnUnnoticedDeadProcessDoesNotWait(t *testing.T) {
	w := dyingWorld(t, false)
	start := time.Now()
	w.teardown()
	if took := time.Since(start); took > hangTimeout/4 {
		t.Errorf("teardown of a dead process (death pending) took %v: its close waited on the dead store", took)
	}
}
