package storage

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Shard.Sync racing the store's close returns an error, never reaches a
// closed Pebble (which panics "pebble: closed"). The 3000-seed simulation
// hit it: the split driver's syncAll synced a shard whose store a
// concurrent step closed between Sync's closed check and its LogData.
func TestSyncRacingCloseNeverReachesAClosedStore(t *testing.T) {
	for round := range 300 {
		e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
		s := openShard(t, e, 2, 2, rootSpan(2))
		var wg, syncing sync.WaitGroup
		panics := make(chan string, 4)
		for range 4 {
			wg.Add(1)
			syncing.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					if r := recover(); r != nil {
						panics <- fmt.Sprint(r)
					}
				}()
				for i := 0; s.Sync() == nil; i++ {
					if i == 10 {
						syncing.Done() // syncing when the store closes
					}
				}
			}()
		}
		syncing.Wait()
		destroyed := make(chan error, 1)
		go func() { destroyed <- e.DestroyShard(2) }()
		stopped := make(chan struct{})
		go func() { wg.Wait(); close(stopped) }()
		// A panic inside Pebble leaves its locks held: the other syncs and
		// the close may never return, so nothing here waits unbounded.
		for pending := 2; pending > 0; pending-- {
			select {
			case p := <-panics:
				t.Fatalf("round %d: Sync racing DestroyShard panicked: %s", round, p)
			case err := <-destroyed:
				if err != nil {
					t.Fatal(err)
				}
				destroyed = nil
			case <-stopped:
				stopped = nil
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: Sync or DestroyShard still running after 10 s", round)
			}
		}
		select {
		case p := <-panics:
			t.Fatalf("round %d: Sync racing DestroyShard panicked: %s", round, p)
		default:
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
