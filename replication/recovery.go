package replication

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/transport"
)

// Message kinds of peer recovery (RecoverySourceHandler and
// PeerRecoveryTargetService): the target asks, the source sends the files
// of a checkpoint in chunks, the target opens them, the source streams the
// history above the checkpoint as to any copy, and finalizes once the
// target caught up.
const (
	KindRecoveryStart    = "rec/start"    // target → source
	KindRecoveryManifest = "rec/manifest" // source → target: the checkpoint's files and local checkpoint
	KindRecoveryChunk    = "rec/chunk"    // source → target: bytes of one file
	KindRecoveryAck      = "rec/ack"      // target → source: what it has written
	KindRecoveryOpened   = "rec/opened"   // target → source: it opened the files
	KindRecoveryFinalize = "rec/finalize" // source → target: in sync; report started
	KindRecoveryCancel   = "rec/cancel"   // either way: give up this recovery
)

// ChunkBytes is the size of a file chunk (OpenSearch's
// indices.recovery.chunk_size is 512kb).
const ChunkBytes = 512 << 10

// resendTicks is how long a target silent with chunks unacknowledged
// waits before they are sent again; maxResendTicks caps its backoff while
// the target stays silent; giveUp ticks of silence cancel the recovery.
const resendTicks, maxResendTicks, giveUp = 5, 40, 100

// chunkWindow bounds the chunks sent and not yet acknowledged
// (indices.recovery.max_concurrent_file_chunks is 2; a window of a few
// keeps a loopback link busy).
const chunkWindow = 8

type recoveryStart struct {
	Shard      ShardKey `json:"shard"`
	ID         string   `json:"id"`
	Target     string   `json:"target"` // allocation id
	TargetNode string   `json:"target_node"`
}

// FileInfo names a file of a checkpoint and its size.
type FileInfo struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

type recoveryManifest struct {
	Shard ShardKey   `json:"shard"`
	ID    string     `json:"id"`
	LCP   int64      `json:"lcp"`
	Files []FileInfo `json:"files"`
}

type recoveryChunk struct {
	Shard  ShardKey `json:"shard"`
	ID     string   `json:"id"`
	File   int      `json:"file"`
	Offset int64    `json:"offset"`
	Data   []byte   `json:"data"`
}

type recoveryAck struct {
	Shard    ShardKey `json:"shard"`
	ID       string   `json:"id"`
	Manifest bool     `json:"manifest,omitempty"`
	File     int      `json:"file"`
	Offset   int64    `json:"offset"` // the chunk's offset
}

type recoveryOpened struct {
	Shard ShardKey `json:"shard"`
	ID    string   `json:"id"`
	LCP   int64    `json:"lcp"`
}

type recoveryFinalize struct {
	Shard ShardKey `json:"shard"`
	ID    string   `json:"id"`
}

type recoveryCancel struct {
	Shard  ShardKey `json:"shard"`
	ID     string   `json:"id"`
	Reason string   `json:"reason"`
}

// Checkpointer makes the file copy a recovery sends: a consistent copy of
// a store in dir, and the local checkpoint it holds.
type Checkpointer interface {
	Checkpoint(dir string) (lcp int64, err error)
}

// chunkRef is one chunk of one file.
type chunkRef struct {
	file   int
	offset int64
}

// Source is the sending side of one peer recovery, on the primary's node.
type Source struct {
	copy *Copy
	// shard is the recovered copy's shard: the source copy's, or, for a
	// follower, a child of a split of it.
	shard    ShardKey
	follower bool
	fs       storage.FS
	dir      string // the checkpoint, deleted when the recovery ends
	id       string
	target   string
	node     string
	lcp      int64
	files    []FileInfo
	todo     []chunkRef          // not yet sent
	flight   map[chunkRef]uint64 // sent, not acknowledged: the tick it was sent
	backoff  uint64              // ticks a chunk waits before it is resent to a silent target
	mfAcked  bool
	mfSent   uint64
	opened   bool
	done     bool
	tick     uint64
	heard    uint64
	log      *zap.Logger

	BytesSent int64
}

// StartSource begins a recovery of target on node from the primary copy c:
// a checkpoint of its store in dir, a retention lease on the history above
// it, and the manifest. It returns nil and cancels the recovery if the
// checkpoint cannot be made.
func StartSource(c *Copy, cp Checkpointer, fs storage.FS, dir, id, target, node string) (*Source, error) {
	return startSource(c, cp, c.cfg.Shard, false, fs, dir, id, target, node)
}

// StartFollowerSource begins the recovery of a replica of a split's child
// (target on node, a copy of shard) while the split runs: its files are a
// checkpoint of the child primary's store (cp), and the rest is the parent
// primary c's stream, which retains its history from the checkpoint on
// (a retention lease) and, once the target opened the files, makes it a
// follower from there. The target is finalized once it caught up with the
// parent's global checkpoint.
func StartFollowerSource(c *Copy, cp Checkpointer, shard ShardKey, fs storage.FS, dir, id, target, node string) (*Source, error) {
	return startSource(c, cp, shard, true, fs, dir, id, target, node)
}

func startSource(c *Copy, cp Checkpointer, shard ShardKey, follower bool, fs storage.FS, dir, id, target, node string) (*Source, error) {
	if !c.IsPrimary() {
		return nil, ErrNotPrimary
	}
	lcp, err := cp.Checkpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("replication: recovery %s of %s: checkpoint: %w", id, c.cfg.Shard, err)
	}
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("replication: recovery %s: list checkpoint: %w", id, err)
	}
	slices.Sort(names)
	s := &Source{copy: c, shard: shard, follower: follower, fs: fs, dir: dir, id: id, target: target, node: node, lcp: lcp,
		flight: map[chunkRef]uint64{}, backoff: resendTicks, log: c.log}
	for _, name := range names {
		st, err := fs.Stat(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("replication: recovery %s: stat %s: %w", id, name, err)
		}
		if st.IsDir() {
			continue
		}
		s.files = append(s.files, FileInfo{Name: name, Size: st.Size()})
	}
	for i, f := range s.files {
		for off := int64(0); off < f.Size || (off == 0 && f.Size == 0); off += ChunkBytes {
			s.todo = append(s.todo, chunkRef{file: i, offset: off})
			if f.Size == 0 {
				break
			}
		}
	}
	c.addLease(id, lcp+1)
	s.sendManifest()
	return s, nil
}

// ID returns the recovery's id.
func (s *Source) ID() string { return s.id }

// Done reports whether the recovery ended (finalized or cancelled).
func (s *Source) Done() bool { return s.done }

func (s *Source) sendManifest() {
	s.mfSent = s.tick
	s.copy.env.Send(s.node, KindRecoveryManifest, recoveryManifest{Shard: s.shard, ID: s.id, LCP: s.lcp, Files: s.files})
}

// pump sends chunks while the window has room.
func (s *Source) pump() {
	if !s.mfAcked {
		return
	}
	for len(s.flight) < chunkWindow && len(s.todo) > 0 {
		ref := s.todo[0]
		s.todo = s.todo[1:]
		if err := s.sendChunk(ref); err != nil {
			s.Cancel(err.Error())
			return
		}
	}
}

func (s *Source) sendChunk(ref chunkRef) error {
	f := s.files[ref.file]
	n := min(int64(ChunkBytes), f.Size-ref.offset)
	data := make([]byte, n)
	if n > 0 {
		file, err := s.fs.Open(filepath.Join(s.dir, f.Name))
		if err != nil {
			return fmt.Errorf("open %s: %w", f.Name, err)
		}
		_, err = file.ReadAt(data, ref.offset)
		_ = file.Close()
		if err != nil && err != io.EOF {
			return fmt.Errorf("read %s: %w", f.Name, err)
		}
	}
	s.flight[ref] = s.tick
	s.BytesSent += n
	s.copy.env.Send(s.node, KindRecoveryChunk, recoveryChunk{Shard: s.shard, ID: s.id, File: ref.file, Offset: ref.offset, Data: data})
	return nil
}

// flightOrder returns the chunks in flight in file and offset order, so
// that resends go out in a deterministic order.
func (s *Source) flightOrder() []chunkRef {
	refs := make([]chunkRef, 0, len(s.flight))
	for ref := range s.flight {
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(a, b chunkRef) int {
		if a.file != b.file {
			return a.file - b.file
		}
		return int(a.offset - b.offset)
	})
	return refs
}

// OnAck takes the target's acknowledgement of the manifest or a chunk.
func (s *Source) OnAck(a recoveryAck) {
	if s.done {
		return
	}
	s.heard = s.tick
	s.backoff = resendTicks
	if a.Manifest {
		s.mfAcked = true
	} else {
		delete(s.flight, chunkRef{file: a.File, offset: a.Offset})
	}
	s.pump()
}

// OnOpened takes the target's word that it opened the files: from here on
// it is tracked, and the history above the checkpoint reaches it through
// the ordinary stream (recovery's phase 2).
func (s *Source) OnOpened(o recoveryOpened) {
	if s.done {
		return
	}
	s.heard = s.tick // the target says it again until finalized
	if s.opened {
		return
	}
	s.opened = true
	// The target has every file: a chunk whose acknowledgement is still
	// missing is not sent again (its checkpoint is deleted below).
	s.todo, s.flight = nil, map[chunkRef]uint64{}
	if s.follower {
		s.copy.StartFollowing(s.target, s.node, s.shard, o.LCP)
	} else {
		s.copy.StartTracking(s.target, o.LCP)
	}
	s.copy.removeLease(s.id)
	_ = s.fs.RemoveAll(s.dir)
}

// Tick resends what was lost, finalizes a caught-up target, and cancels a
// silent one.
func (s *Source) Tick() {
	s.tick++
	if s.done {
		return
	}
	if !s.copy.IsPrimary() {
		s.Cancel("the source is no longer the primary")
		return
	}
	if s.tick-s.heard > giveUp {
		s.Cancel("the target stopped answering")
		return
	}
	if !s.mfAcked && s.tick-s.mfSent >= resendTicks {
		s.sendManifest()
	}
	// A chunk is sent again only while the target is silent: a target
	// that acknowledges chunks is receiving them, however far behind, and
	// a chunk resent to it would only queue behind the one not yet
	// answered (OpenSearch answers each chunk request and sends no copy
	// while one is outstanding). A chunk lost on the way is resent once
	// the chunks after it are acknowledged and the target falls silent;
	// while it stays silent the resends back off.
	if s.tick-s.heard >= resendTicks {
		resent := false
		for _, ref := range s.flightOrder() {
			if s.tick-s.flight[ref] >= s.backoff {
				if err := s.sendChunk(ref); err != nil {
					s.Cancel(err.Error())
					return
				}
				resent = true
			}
		}
		if resent {
			s.backoff = min(2*s.backoff, maxResendTicks)
		}
	}
	s.pump()
	if s.opened {
		// finalizeRecovery: in sync once caught up with the global
		// checkpoint; the target reports started.
		if s.follower && s.copy.FollowerCaughtUp(s.target) || !s.follower && s.copy.MarkInSync(s.target) {
			s.copy.env.Send(s.node, KindRecoveryFinalize, recoveryFinalize{Shard: s.shard, ID: s.id})
		}
	}
}

// Finished ends a recovery whose target the cluster state shows started.
func (s *Source) Finished() {
	s.done = true
	s.copy.removeLease(s.id)
	_ = s.fs.RemoveAll(s.dir)
}

// Cancel ends the recovery: the target is told, the checkpoint and the
// lease go.
func (s *Source) Cancel(reason string) {
	if s.done {
		return
	}
	s.done = true
	s.log.Info("recovery cancelled", zap.Stringer("shard", s.shard), zap.String("recovery", s.id), zap.String("reason", reason))
	s.copy.removeLease(s.id)
	_ = s.fs.RemoveAll(s.dir)
	s.copy.env.Send(s.node, KindRecoveryCancel, recoveryCancel{Shard: s.shard, ID: s.id, Reason: reason})
}

// Target is the receiving side of one peer recovery: it writes the files
// into the copy's empty directory, and the node opens them.
type Target struct {
	shard    ShardKey
	fs       storage.FS
	dir      string
	id       string
	source   string // the source's node
	files    []FileInfo
	lcp      int64
	received map[chunkRef]bool
	missing  int
	left     []int // chunks of each file not yet written
	have     bool  // the manifest arrived
	env      Env

	BytesReceived int64
}

// NewTarget prepares to receive recovery id from the node source into dir,
// which must be empty.
func NewTarget(shard ShardKey, env Env, fs storage.FS, dir, id, source, aid, selfNode string) *Target {
	t := &Target{shard: shard, fs: fs, dir: dir, id: id, source: source, env: env, received: map[chunkRef]bool{}}
	t.Ask(aid, selfNode)
	return t
}

// Ask (re)sends the recovery's start request.
func (t *Target) Ask(aid, selfNode string) {
	t.env.Send(t.source, KindRecoveryStart, recoveryStart{Shard: t.shard, ID: t.id, Target: aid, TargetNode: selfNode})
}

// ID returns the recovery's id.
func (t *Target) ID() string { return t.id }

// Complete reports whether every file arrived whole.
func (t *Target) Complete() bool { return t.have && t.missing == 0 }

// LCP is the local checkpoint of the files received.
func (t *Target) LCP() int64 { return t.lcp }

// OnManifest takes the list of files; files are created empty.
func (t *Target) OnManifest(m recoveryManifest) error {
	if !t.have {
		if err := t.fs.MkdirAll(t.dir, 0o755); err != nil {
			return err
		}
		t.files, t.lcp, t.have = m.Files, m.LCP, true
		t.left = make([]int, len(m.Files))
		for i, f := range m.Files {
			file, err := t.fs.Create(filepath.Join(t.dir, f.Name), storage.WriteCategoryUnspecified)
			if err != nil {
				return err
			}
			_ = file.Close()
			for off := int64(0); off < f.Size || (off == 0 && f.Size == 0); off += ChunkBytes {
				t.missing++
				t.left[i]++
				if f.Size == 0 {
					t.received[chunkRef{file: i}] = true
					t.missing--
					t.left[i]--
					break
				}
			}
		}
		if t.missing == 0 {
			if err := t.syncDir(); err != nil {
				return err
			}
		}
	}
	t.env.Send(t.source, KindRecoveryAck, recoveryAck{Shard: t.shard, ID: t.id, Manifest: true})
	return nil
}

// OnChunk writes a chunk at its offset and acknowledges it (a resent
// chunk is acknowledged again). A file is synced once, when its last chunk
// is written, and the directory once every file is: nothing is opened, or
// reported, before the files are durable, and a recovery that does not
// complete starts over from an empty directory, so a chunk need not be
// durable to be acknowledged (the source's window is flow control). One
// fsync per file, not per 512 KiB chunk, as OpenSearch's target syncs its
// files once they are all in (MultiFileWriter, then Store.cleanupAndVerify).
func (t *Target) OnChunk(c recoveryChunk) error {
	if !t.have || c.File < 0 || c.File >= len(t.files) {
		return nil
	}
	ref := chunkRef{file: c.File, offset: c.Offset}
	if !t.received[ref] {
		path := filepath.Join(t.dir, t.files[c.File].Name)
		f, err := t.fs.OpenReadWrite(path, storage.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt(c.Data, c.Offset); err != nil {
			_ = f.Close()
			return err
		}
		if t.left[c.File] == 1 {
			if err := f.Sync(); err != nil {
				_ = f.Close()
				return err
			}
		}
		if err := f.Close(); err != nil {
			return err
		}
		t.received[ref] = true
		t.missing--
		t.left[c.File]--
		t.BytesReceived += int64(len(c.Data))
		if t.missing == 0 {
			if err := t.syncDir(); err != nil {
				return err
			}
		}
	}
	t.env.Send(t.source, KindRecoveryAck, recoveryAck{Shard: t.shard, ID: t.id, File: c.File, Offset: c.Offset})
	return nil
}

// syncDir makes the entries of the files created in the directory
// durable.
func (t *Target) syncDir() error {
	d, err := t.fs.OpenDir(t.dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if e := d.Close(); err == nil {
		err = e
	}
	return err
}

// CancelUnknown answers a target's word that it opened the files of the
// recovery m names, when its source runs no such recovery (it ended, its
// cancel was lost, or the source's node restarted): the target is told to
// give it up and asks for a new one, instead of waiting, open, for a
// finalize that never comes (OpenSearch's target fails a recovery whose
// source answers with an error).
func CancelUnknown(env Env, m transport.Message, reason string) error {
	a, err := peek(m)
	if err != nil {
		return err
	}
	env.Send(m.From, KindRecoveryCancel, recoveryCancel{Shard: a.Shard, ID: a.ID, Reason: reason})
	return nil
}

// Opened tells the source the files are open at the checkpoint's local
// checkpoint. The node says it again until the source finalizes the
// recovery: the word may be lost.
func (t *Target) Opened() {
	t.env.Send(t.source, KindRecoveryOpened, recoveryOpened{Shard: t.shard, ID: t.id, LCP: t.lcp})
}
