package service

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
)

// TestReviewS22AutoCancelAtEveryIntent cancels a split and a merge (the
// task API's cancel) while each is held before each of its intents, with
// writers running throughout: the task ends aborted (cancel accepted) or
// done (refused: past the fence), the index serves reads and writes, and
// every acknowledged write is there, before and after a reopen.
func TestReviewS22AutoCancelAtEveryIntent(t *testing.T) {
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
