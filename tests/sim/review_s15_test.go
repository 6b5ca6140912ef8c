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
//
// Both ways: the death known (the step's finding comes before afterStep's
// crash), or still pending on w.fatal (a background flush died after the
// step's last call), where the node's close waited the full hangTimeout
// for a message it never read.
func TestReviewS15TeardownOfADeadProcessDoesNotWait(t *testing.T) {
	for _, known := range []bool{true, false} {
		w := dyingWorld(t, known) // a reader parked on it when the death is known
		if known {
			w.fatalMsg = <-w.fatal
		}
		start := time.Now()
		w.teardown()
		if took := time.Since(start); took > hangTimeout/4 {
			t.Errorf("teardown of a dead process (death known: %v) took %v: it waited on the dead store", known, took)
		}
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
