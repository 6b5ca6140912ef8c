package crashfs

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// raceCrashes runs op on four goroutines, over and over, beside a fifth
// that crashes the disk, for three seconds, and fails t if they do not all
// stop within twenty seconds after.
func raceCrashes(t *testing.T, disk *Disk, op func(fs vfs.FS, w, i int) error, hung string) {
	t.Helper()
	fs := disk.FS(func() {})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
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
					if err := op(fs, w, i); err != nil {
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
	time.Sleep(3 * time.Second) // the operations and crashes race this long
	close(stop)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal(hung)
	}
}

// A crash taken while another goroutine locks a directory (a store's
// pebble.Open, LockDirectory) does not hang either of them. Pebble's
// MemFS.Lock read-locks its clone mutex and then calls Create, which
// read-locks it again; a CrashClone arriving between the two waits for the
// first read lock and blocks the second: a child's open beside a crash
// point fired by the parent's WAL sync hangs so (question 9 of splitdemo
// findings --quick).
func TestCrashBesideALockDoesNotHang(t *testing.T) {
	disk := New()
	if err := disk.FS(nil).MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	raceCrashes(t, disk, func(fs vfs.FS, w, _ int) error {
		l, err := fs.Lock(fmt.Sprintf("/data/LOCK-%d", w))
		if err != nil {
			return err
		}
		return l.Close()
	}, "a crash beside concurrent directory locks hung (MemFS.Lock's nested read lock against CrashClone's write lock)")
}

// The same for hard links (a checkpoint links the parent's tables into a
// child): MemFS.Link read-locks the clone mutex and read-locks it again
// for the new name. A child's checkpoint linking beside a crash point
// fired by the parent's WAL sync hung TestCrashPointEnumeration so.
func TestCrashBesideALinkDoesNotHang(t *testing.T) {
	disk := New()
	fs := disk.FS(nil)
	if err := fs.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("/data/000001.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	raceCrashes(t, disk, func(fs vfs.FS, w, i int) error {
		return fs.Link("/data/000001.sst", fmt.Sprintf("/data/link-%d-%d.sst", w, i))
	}, "a crash beside concurrent hard links hung (MemFS.Link's nested read lock against CrashClone's write lock)")
}
