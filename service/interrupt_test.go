package service

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/splitter"
)

// stallingOp is an operation whose step waits, like a split's retry
// waiting out its parent's write stall (splitter.Config.StallWait), until
// Interrupt or 10 s; a cancel then ends it.
type stallingOp struct {
	interrupted chan struct{}
	once        sync.Once
	cancelled   atomic.Bool
	done        atomic.Bool
}

func (o *stallingOp) Next() (splitter.Intent, splitter.Event, error) {
	if o.cancelled.Load() {
		o.done.Store(true)
		return splitter.Intent{Kind: splitter.IntentCancel}, splitter.Event{}, nil
	}
	select {
	case <-o.interrupted:
	case <-time.After(10 * time.Second):
	}
	return splitter.Intent{Kind: splitter.IntentCatchUp}, splitter.Event{}, nil
}

func (o *stallingOp) Interrupt() { o.once.Do(func() { close(o.interrupted) }) }

func (o *stallingOp) Cancel() error {
	o.cancelled.Store(true)
	return nil
}

func (o *stallingOp) Phase() splitter.Phase {
	if o.done.Load() {
		return splitter.PhaseAborted
	}
	return splitter.PhaseCatchUp
}

func (o *stallingOp) Report() splitter.Report { return splitter.Report{Phase: o.Phase()} }
func (o *stallingOp) Done() bool              { return o.done.Load() }
func (o *stallingOp) Fenced() bool            { return false }

// A task cancelled over the API while its operation's step waits out a
// write stall ends promptly: the service interrupts the wait, and its loop
// delivers the cancel at once instead of after StallWait. So does a stop
// (Close, an index deleted).
func TestCancelAndStopInterruptAStallWait(t *testing.T) {
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			s, err := Open(Config{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.CreateIndex(CreateRequest{Name: "ix", Settings: FlatSettings{SettingShards: str("1")}}); err != nil {
				t.Fatal(err)
			}
			ix, ok := s.index("ix")
			if !ok {
				t.Fatal("no index ix")
			}
			op := &stallingOp{interrupted: make(chan struct{})}
			ix.splitMu.Lock()
			task := s.newTask(ix)
			task.op = op
			task.snap.Store(&TaskSnapshot{Phase: op.Phase(), Report: op.Report()})
			s.tasks.mu.Lock()
			s.tasks.all[task.ID] = task
			s.tasks.mu.Unlock()
			ix.split = task
			go task.run()
			ix.splitMu.Unlock()

			time.Sleep(100 * time.Millisecond) // the step is waiting
			start := time.Now()
			switch how {
			case "cancel":
				if _, err := s.CancelTask(task.ID); err != nil {
					t.Fatal(err)
				}
			case "close":
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-task.done:
			case <-time.After(20 * time.Second):
				t.Fatal("the task never ended")
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the task ended %v after the %s: the step's wait was not interrupted", took, how)
			}
		})
	}
}
