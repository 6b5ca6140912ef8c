package service

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/splitter"
)

// stalledFlushes holds the memtable flushes of the stores whose path has
// a prefix while shut: their memtables fill and Pebble stops their writes
// (a write stall), as on a disk that cannot keep up.
type stalledFlushes struct {
	vfs.FS
	mu     sync.Mutex
	prefix string
	shut   chan struct{} // nil: flushes go through
}

func (g *stalledFlushes) set(prefix string, shut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.prefix = prefix
	switch {
	case shut && g.shut == nil:
		g.shut = make(chan struct{})
	case !shut && g.shut != nil:
		close(g.shut)
		g.shut = nil
	}
}

func (g *stalledFlushes) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, category)
	g.mu.Lock()
	shut, stalls := g.shut, g.prefix != "" && strings.HasPrefix(name, g.prefix)
	g.mu.Unlock()
	if err == nil && shut != nil && stalls && category == "pebble-memtable-flush" {
		<-shut // the flush's file is held until the gate opens
	}
	return f, err
}

// A task cancelled over the API while its operation's step waits out a
// shard's write stall (splitter.Config.StallWait, 10 s) ends promptly: the
// service interrupts the wait, and its loop delivers the cancel at once.
// So does a stop (Close). The stall is real: the shard's flushes are held
// and 256 KiB documents fill its memtables while the split's fence waits
// to drain them.
func TestCancelAndStopInterruptAStallWait(t *testing.T) {
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			gate := &stalledFlushes{FS: vfs.NewMem()}
			defer gate.set("", false)
			atFence, fence := make(chan struct{}), make(chan struct{})
			var once sync.Once
			hook := func(_ string, _ splitter.Phase, next splitter.Intent) {
				if next.Kind == splitter.IntentFence {
					once.Do(func() { close(atFence); <-fence })
				}
			}
			s, err := Open(Config{Dir: "/data", FS: gate, SplitHook: hook})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.CreateIndex(CreateRequest{Name: "ix", Settings: FlatSettings{SettingShards: str("1")}}); err != nil {
				t.Fatal(err)
			}
			dir, _ := s.IndexDirOf("ix")
			task, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 0, Ways: 2})
			if err != nil {
				t.Fatal(err)
			}
			<-atFence
			// Fill the shard's memtables with its flushes held, until a
			// write stalls; the fence then cannot drain it.
			gate.set(dir+"/shard-0/", true)
			ix, _ := s.index("ix")
			shard, _ := ix.node.ShardStore(0)
			body := []byte(`{"v":"` + strings.Repeat("x", 256<<10) + `"}`)
			writes := make(chan error, 1)
			go func() {
				for i := 0; i < 400; i++ {
					if _, err := s.IndexDoc("ix", fmt.Sprintf("big%d", i), "", body, WriteOptions{}); err != nil {
						writes <- err
						return
					}
				}
				writes <- nil
			}()
			for deadline := time.Now().Add(time.Minute); !shard.WriteStalled(); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the shard never stalled")
				}
			}
			close(fence)
			for deadline := time.Now().Add(time.Minute); task.Status().Handoffs == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the fence was never tried")
				}
			}
			time.Sleep(100 * time.Millisecond) // the fence timed out in the stall; the next step waits for it
			// The stall ends 1 s from now: a wait the service does not
			// interrupt lasts until then.
			time.AfterFunc(time.Second, func() { gate.set("", false) })
			start := time.Now()
			closed := make(chan error, 1)
			switch how {
			case "cancel":
				if _, err := s.CancelTask(task.ID); err != nil {
					t.Fatal(err)
				}
			case "close":
				go func() { closed <- s.Close() }()
			}
			select {
			case <-task.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("the task never ended")
			}
			took, st := time.Since(start), task.Status()
			switch how {
			case "cancel":
				// The abort's own write waits for the stall to end; the
				// wait for the stall must not have.
				if st.Phase != "aborted" || st.StallWaits != 1 || st.StallWaited > 700*time.Millisecond {
					t.Errorf("the cancelled task ended %s after %d stall waits (%v in all); want aborted after one cut short by the cancel",
						st.Phase, st.StallWaits, st.StallWaited)
				}
			case "close":
				if took > 700*time.Millisecond {
					t.Errorf("the task ended %v after the close: the step's wait was not interrupted", took)
				}
				if err := <-closed; err != nil {
					t.Fatal(err)
				}
			}
			if err := <-writes; err != nil && how == "cancel" {
				t.Errorf("a write during the stall: %v", err)
			}
		})
	}
}
