package storage

import (
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// failWALSyncs fails every sync of a WAL file once armed: the writes the
// WAL holds from then on never become durable.
type failWALSyncs struct{ armed atomic.Bool }

func (f *failWALSyncs) MaybeError(op errorfs.Op) error {
	sync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
	if sync && f.armed.Load() && strings.HasSuffix(op.Path, ".log") {
		return syscall.EIO
	}
	return nil
}

func (f *failWALSyncs) String() string { return "fail-wal-syncs" }

// Pebble makes a batch readable once it is in the memtable, before its WAL
// fsync ends, so a read between the two saw a value that a power loss then
// took back: a dirty read of a write its writer was not yet told about (a
// routed get in a split's handoff window returned a write parked on the
// pending table, the shared layout's parent reading the child's key, and a
// crash before the write's fsync lost it). A read returns only what a power
// loss at that instant keeps: here the write's sync never succeeds, so a
// get, a routed get and a scan that see it must fail instead, before
// and after the failed sync is reported, and a delete counts as a read
// of the absence it made.
func TestAReadReturnsNoWriteBeforeItsWALSync(t *testing.T) {
	reads := []struct {
		name string
		read func(s *Shard, op Op) (string, bool, error)
	}{
		{"get", func(s *Shard, op Op) (string, bool, error) {
			d, ok, err := s.Get(op.Root, op.Key, op.ID)
			return string(d.Source), ok, err
		}},
		{"routed get", func(s *Shard, op Op) (string, bool, error) {
			d, ok, err := s.GetID(op.Root, rootSpan(op.Root), op.Key, op.ID, Home{})
			return string(d.Source), ok, err
		}},
		{"scan", func(s *Shard, op Op) (src string, ok bool, err error) {
			err = s.ScanSpan(rootSpan(op.Root), func(d Doc) error {
				if d.ID == op.ID {
					src, ok = string(d.Source), true
				}
				return nil
			})
			return src, ok, err
		}},
	}
	for _, r := range reads {
		for _, kind := range []OpKind{OpIndex, OpDelete} {
			for _, reported := range []bool{false, true} {
				name := r.name + "/index"
				if kind == OpDelete {
					name = r.name + "/delete"
				}
				if reported {
					name += "/after-the-failed-sync"
				}
				t.Run(name, func(t *testing.T) {
					forLayouts(t, func(t *testing.T, layout Layout) {
						readBeforeTheWALSync(t, layout, kind, reported, r.read)
					})
				})
			}
		}
	}
}

// readBeforeTheWALSync writes a document durably, then a write of kind to
// it whose WAL sync fails, reads it before (or after, if reported) that
// write's wait returns, and checks that the read returned nothing a power
// loss right after it loses.
func readBeforeTheWALSync(t *testing.T, layout Layout, kind OpKind, reported bool, read func(*Shard, Op) (string, bool, error)) {
	mem := vfs.NewCrashableMem()
	fault := &failWALSyncs{}
	// Pebble may call Fatalf on a WAL it cannot write: a panic, not an exit.
	logger := zap.NewNop().WithOptions(zap.WithFatalHook(zapcore.WriteThenPanic))
	e := openEngine(t, Options{FS: errorfs.Wrap(mem, fault), Layout: layout, Logger: logger})
	defer func() { _ = e.Close() }()
	s := openShard(t, e, 0, 0, rootSpan(0))
	id := idsInRoot(0, 1)[0]
	if _, err := s.Write([]Op{opFor(id, OpIndex, "durable")}, nil); err != nil {
		t.Fatal(err)
	}
	op := opFor(id, kind, "dirty")
	fault.armed.Store(true)
	_, wait, err := s.WriteNoWait([]Op{op}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	if reported {
		if werr = wait(); werr == nil {
			t.Fatal("the write's WAL sync succeeded: the injected fault did not fire")
		}
	}
	src, found, rerr := read(s, op)
	if !reported {
		if werr = wait(); werr == nil {
			t.Fatal("the write's WAL sync succeeded: the injected fault did not fire")
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // a power loss keeps only what was synced
	e2 := openEngine(t, Options{FS: crashed, Layout: layout})
	defer func() { _ = e2.Close() }()
	d, kept, err := openShard(t, e2, 0, 0, rootSpan(0)).Get(op.Root, op.Key, id)
	if err != nil {
		t.Fatal(err)
	}
	if !kept || string(d.Source) != "durable" {
		t.Fatalf("after the power loss %s = %q (found %v), want the synced write %q", id, d.Source, kept, "durable")
	}
	if rerr != nil {
		return // refused: the store cannot tell what is durable
	}
	if found != kept || src != string(d.Source) {
		t.Errorf("the read returned %s = %q (found %v) while the write (failed: %v) was not durable; after a power loss %s = %q (found %v): a value a reader saw vanished",
			id, src, found, werr, id, d.Source, kept)
	}
}
