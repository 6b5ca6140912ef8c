package crashfs

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// A crash taken while another goroutine locks a directory (a store's
// pebble.Open, LockDirectory) does not hang either of them. Pebble's
// MemFS.Lock read-locks its clone mutex and then calls Create, which
// read-locks it again; a CrashClone arriving between the two waits for the
// first read lock and blocks the second: question 9 of splitdemo findings
// --quick hung so in CI (2026-12-01), a child's open beside a crash point
// fired by the parent's WAL sync.
func TestCrashBesideALockDoesNotHang(t *testing.T) {
	disk := New()
	fs := disk.FS(func() {})
	if err := fs.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("/data/LOCK-%d", w)
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := fs.Lock(name)
					if err != nil {
						t.Error(err)
						return
					}
					if err := l.Close(); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					disk.Crash(0, 1)
				}
			}
		}()
		wg.Wait()
	}()
	time.Sleep(3 * time.Second) // the locks and crashes race this long
	close(stop)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a crash beside concurrent directory locks hung (MemFS.Lock's nested read lock against CrashClone's write lock)")
	}
}
