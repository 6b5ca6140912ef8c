package service

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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
// and 1 MiB documents fill its memtables while the split's fence waits to
// drain them.
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
			s := openService(t, Config{Dir: "/data", FS: gate, SplitHook: hook})
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
			body := []byte(`{"v":"` + strings.Repeat("x", 1<<20) + `"}`)
			writes := make(chan error, 1)
			var stalled atomic.Bool // the writer stops once a write of its is held
			go func() {
				for i := 0; i < 100 && !stalled.Load(); i++ {
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
			stalled.Store(true)
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
			// The wait for the stall ends at the cancel or the stop, long
			// before the stall does (the abort's own write, and the retry's
			// catch-up after a stop, wait for the stall or take their time:
			// not what is measured).
			st := task.Status()
			if st.StallWaits != 1 || st.StallWaited > 700*time.Millisecond {
				t.Errorf("after the %s the task waited %d times for the stall, %v in all; want one wait cut short", how, st.StallWaits, st.StallWaited)
			}
			switch how {
			case "cancel":
				if st.Phase != "aborted" {
					t.Errorf("the cancelled task ended %s: %v", st.Phase, st.Err)
				}
			case "close":
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

// TestCloseDuringASplitsReservation: a service Close while a split
// request is taking its reservation (the task's first intent, in the
// request's goroutine, before the task is registered) must neither leave a
// task running on the closed index nor lose the index: the request fails,
// Close stops everything it started, and the data directory reopens and
// serves.
func TestCloseDuringASplitsReservation(t *testing.T) {
	dir := t.TempDir()
	inHook := make(chan struct{})
	release := make(chan struct{})
	first := true
	s, err := Open(Config{Dir: dir, SplitHook: func(index string, phase splitter.Phase, next splitter.Intent) {
		if first && next.Kind == splitter.IntentReserve {
			first = false
			close(inHook)
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateIndex(CreateRequest{Name: "r", Settings: FlatSettings{SettingShards: str("1"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := s.IndexDoc("r", fmt.Sprintf("d%d", i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		task *Task
		err  error
	}
	started := make(chan result, 1)
	go func() {
		task, err := s.StartSplit(SplitRequest{Index: "r", Shard: 0, Ways: 2})
		started <- result{task, err}
	}()
	<-inHook
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close must not return while the split request may still start a
	// task on the index it closes; give it a moment to try.
	closeDone := false
	select {
	case err := <-closed:
		closeDone = true
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	var res result
	select {
	case res = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the split request never returned")
	}
	if !closeDone {
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("Close: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Close never returned")
		}
	}
	t.Logf("split request: %v", res.err)
	if res.err == nil {
		select {
		case <-res.task.Done():
		default:
			t.Errorf("task %s is still running on an index the closed service no longer owns (phase %s)", res.task.ID, res.task.Status().Phase)
			<-res.task.Done()
		}
	}
	for _, task := range s.Tasks() {
		select {
		case <-task.Done():
		default:
			t.Errorf("task %s still running after Close", task.ID)
		}
	}
	s2, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatalf("reopen after a close during a split's reservation: %v", err)
	}
	defer s2.Close()
	res2, err := s2.Search(SearchRequest{Indices: "r", Size: -1})
	if err != nil || res2.Total != 50 {
		t.Fatalf("after reopen: %d documents, %v; want 50", res2.Total, err)
	}
}

// TestACompletedTaskFreesItsIndex: a task whose status says completed
// (what GET _tasks/<id> answers) has ended, so the index takes the next
// split or merge at once: the task clears itself as the index's running
// operation before it stores its completed status and logs its end. A
// client that polls the task to its end and starts the next split at once
// (the window widened here by a log sink that is slow once) must not be
// refused with 409 "already splitting".
func TestACompletedTaskFreesItsIndex(t *testing.T) {
	ended, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	core := zapcore.RegisterHooks(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel),
		func(e zapcore.Entry) error {
			if e.Message == "task ended" {
				once.Do(func() { close(ended); <-release })
			}
			return nil
		})
	s := openService(t, Config{Logger: zap.New(core)})
	if _, err := s.CreateIndex(CreateRequest{Name: "ix", Settings: FlatSettings{SettingShards: str("2")}}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := s.IndexDoc("ix", fmt.Sprint(i), "", []byte(`{}`), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	task, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Fatal("the split did not end")
	}
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free()
	snap := task.Status()
	if !snap.Completed || snap.Err != nil {
		t.Fatalf("the split's snapshot: %+v", snap)
	}
	// The client saw completed: true; the index's next operation.
	next, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 1, Ways: 2})
	if err != nil {
		e := AsError(err)
		t.Fatalf("a split started after the previous task's snapshot said completed: %d %s: %v", e.Status, e.Type, err)
	}
	free()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := next.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if snap := next.Status(); snap.Err != nil {
		t.Fatalf("the next split: %v", snap.Err)
	}
}

// TestCancelAtEveryIntent cancels a split and a merge (the
// task API's cancel) while each is held before each of its intents, with
// writers running throughout: the task ends aborted (cancel accepted) or
// done (refused: past the fence), the index serves reads and writes, and
// every acknowledged write is there, before and after a reopen.
func TestCancelAtEveryIntent(t *testing.T) {
	splitAt := []splitter.IntentKind{splitter.IntentBuildTargets, splitter.IntentCatchUp, splitter.IntentFence,
		splitter.IntentReplayTail, splitter.IntentPublish, splitter.IntentUnfence, splitter.IntentSyncTargets,
		splitter.IntentCommitTable, splitter.IntentCleanup}
	mergeAt := []splitter.IntentKind{splitter.IntentBuildTargets, splitter.IntentCatchUp, splitter.IntentFence,
		splitter.IntentReplayTail, splitter.IntentPublish, splitter.IntentUnfence, splitter.IntentSyncTargets,
		splitter.IntentCommitTable, splitter.IntentCleanup}
	for _, kind := range []string{"split", "merge"} {
		at := splitAt
		if kind == "merge" {
			at = mergeAt
		}
		for _, k := range at {
			t.Run(kind+"/"+k.String(), func(t *testing.T) {
				dir := t.TempDir()
				var armed atomic.Bool
				hook, reached, release := holdAt(k)
				s, err := Open(Config{Dir: dir, SplitHook: func(ix string, p splitter.Phase, next splitter.Intent) {
					if armed.Load() {
						hook(ix, p, next)
					}
				}})
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = s.Close() }()
				splitIndex(t, s, "partition") // shards 1, 2, 3; documents "0".."99"

				// Writers (each owns its ids): each acknowledged write is
				// remembered with its value, and the values of the writes
				// that failed after it, which may have been applied.
				var mu sync.Mutex
				acked := map[string]string{}
				maybe := map[string]map[string]bool{}
				for i := range 100 {
					acked[fmt.Sprint(i)] = `{}`
				}
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for w := range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							id, src := fmt.Sprintf("w%d-%d", w, i%40), fmt.Sprintf(`{"n":%d}`, i)
							_, err := s.IndexDoc("ix", id, "", []byte(src), WriteOptions{})
							mu.Lock()
							if err == nil {
								acked[id] = src
								delete(maybe, id)
							} else {
								if maybe[id] == nil {
									maybe[id] = map[string]bool{}
								}
								maybe[id][src] = true
							}
							mu.Unlock()
						}
					}()
				}

				armed.Store(true)
				var task *Task
				if kind == "split" {
					task, err = s.StartSplit(SplitRequest{Index: "ix", Shard: 1, Ways: 2})
				} else {
					task, err = s.StartMerge(MergeRequest{Index: "ix", Shards: []routing.ShardID{2, 3}})
				}
				if err != nil {
					t.Fatal(err)
				}
				<-reached
				_, cerr := s.CancelTask(task.ID)
				close(release)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := task.Wait(ctx); err != nil {
					t.Fatalf("the cancelled %s held at %s did not end: %v (%+v)", kind, k, err, task.Status())
				}
				time.Sleep(20 * time.Millisecond) // writes after the task's end
				close(stop)
				wg.Wait()
				snap := task.Status()
				t.Logf("cancel: %v; task: phase %s cancelled %v refused %q err %v", cerr, snap.Phase, snap.Cancelled, snap.CancelRefused, snap.Err)
				switch snap.Phase {
				case "aborted":
					if !snap.Cancelled || cerr != nil {
						t.Errorf("aborted, but cancelled %v and the cancel answered %v", snap.Cancelled, cerr)
					}
				case "done":
					if cerr == nil && snap.CancelRefused == "" {
						t.Errorf("the cancel was accepted but the %s completed without saying it was refused", kind)
					}
				default:
					t.Errorf("the %s ended in phase %s: %v", kind, snap.Phase, snap.Err)
				}

				check := func(when string, s *Service) {
					t.Helper()
					tab, err := s.Table("ix")
					if err != nil {
						t.Fatal(err)
					}
					if len(tab.InProgress()) != 0 || len(tab.MergesInProgress()) != 0 {
						t.Errorf("%s: operations still in the table: splits %v merges %v", when, tab.InProgress(), tab.MergesInProgress())
					}
					for id, want := range acked {
						d, ok, err := s.GetDoc("ix", id, "")
						if err != nil || !ok {
							t.Errorf("%s: acknowledged %s: found %v, %v", when, id, ok, err)
							continue
						}
						if got := string(d.Source); got != want && !maybe[id][got] {
							t.Errorf("%s: acknowledged %s = %s, want %s (or a failed write's %v)", when, id, got, want, maybe[id])
						}
					}
					res, err := s.Search(SearchRequest{Indices: "ix", Size: -1})
					if err != nil || res.Total < len(acked) {
						t.Errorf("%s: search: %d documents, %v; want at least the %d acknowledged", when, res.Total, err, len(acked))
					}
					if _, err := s.IndexDoc("ix", "after-"+when, "", []byte(`{}`), WriteOptions{}); err != nil {
						t.Errorf("%s: a write: %v", when, err)
					}
					acked["after-"+when] = `{}`
				}
				check("before-reopen", s)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = openT(t, dir)
				check("after-reopen", s)
			})
		}
	}
}

// TestTaskIDsNotReusedAfterRestart: a task id names one task: after a
// restart on the same data directory the node's next task takes a number
// above every one it gave before, so a client polling a task from before
// the restart is told it is unknown, never shown another split's result.
func TestTaskIDsNotReusedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateIndex(CreateRequest{Name: "ix", Settings: FlatSettings{SettingShards: str("2"), SettingReplicas: str("0")}}); err != nil {
		t.Fatal(err)
	}
	first, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	second, err := s.StartSplit(SplitRequest{Index: "ix", Shard: 1, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID || second.Num <= first.Num {
		t.Fatalf("the task after the restart is %s, the one before %s", second.ID, first.ID)
	}
	if _, err := s.Task(first.ID); err == nil || AsError(err).Status != 404 {
		t.Fatalf("the task from before the restart: %v, want 404", err)
	}
}
