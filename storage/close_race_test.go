package storage

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// Closing the engine while writes are in flight: each write either
// completes or answers ErrShardClosed; none may reach a closed Pebble (it
// panicked with "pebble/record: closed LogWriter", killing the simulation's
// test binary once in 3000 seeds).
func TestCloseWhileWriting(t *testing.T) {
	for round := range 30 {
		e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 64}})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					_, err := s.Write([]Op{{Kind: OpIndex, Key: routing.Key(i % 64), ID: fmt.Sprintf("w%d-%d", w, i), Source: []byte("v")}}, nil)
					if errors.Is(err, ErrShardClosed) {
						return
					}
					if err != nil {
						t.Errorf("round %d: write: %v", round, err)
						return
					}
				}
			}()
		}
		time.Sleep(2 * time.Millisecond)
		if err := e.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		wg.Wait()
	}
}
