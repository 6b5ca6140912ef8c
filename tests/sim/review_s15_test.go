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

// Latent (not reachable from runSeed today: tick starts only after
// afterStep made sure the process is alive): holdReader is a call into the
// process that does not honour the commit's rule. On a known-dead process
// its search blocks on the dead store's mutex before the first document,
// the death's message was taken already, and the step waits hangTimeout
// and reports a hang that is the simulator's, not the system's.
func TestReviewS15HoldReaderOnAKnownDeadProcess(t *testing.T) {
	w := dyingWorld(t, false)
	w.fatalMsg = <-w.fatal // known
	start := time.Now()
	if f := catch(w.holdReader); f != "" {
		t.Fatalf("holdReader on a known-dead process after %v: finding %q", time.Since(start), f)
	}
	if took := time.Since(start); took > hangTimeout/4 {
		t.Errorf("holdReader on a known-dead process took %v", took)
	}
	if len(w.readers) != 0 {
		t.Errorf("a reader was parked on a dead process")
	}
}

// Latent too: afterStep's loop ends on w.fatalMsg == "", but w.dead with
// no message is a known death as well (healthy leaves it so when its probe
// meets the death; liveness crashes right after, so nothing reaches
// afterStep in that state today). afterStep then ends the step on the dead
// process: every later do returns false at once (the commit's guard), so
// the run would go on checking nothing.
func TestReviewS15AfterStepOnAProcessMarkedDead(t *testing.T) {
	w := dyingWorld(t, false)
	<-w.fatal
	w.fatalMsg, w.dead = "", true // as healthy leaves a probe that met the death
	dead := w.n
	if f := catch(w.afterStep); f != "" {
		t.Fatalf("afterStep: finding %q\ntrace %v", f, w.trace)
	}
	if w.dead || w.n == dead {
		t.Fatalf("the step ended on the dead process (dead=%v, node replaced=%v)\ntrace %v", w.dead, w.n != dead, w.trace)
	}
}
