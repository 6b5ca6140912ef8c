package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// FS is the filesystem data directories live on: Pebble's VFS, the
// operating system's by default, a crashable one in crash tests. Packages
// above storage name it through this alias (only storage imports Pebble).
type FS = vfs.FS

// DefaultFS returns the operating system's filesystem, Options.FS's
// default.
func DefaultFS() FS { return vfs.Default }

// WriteFileAtomic replaces name in the data directory with data durably
// (WriteFileAtomicIn). The node's routing table and the split journal are
// written this way.
func (e *Engine) WriteFileAtomic(name string, data []byte) error {
	return WriteFileAtomicIn(e.opts.FS, e.opts.Dir, name, data)
}

// WriteFileAtomicIn replaces dir/name on fs with data durably: a temporary
// file, fsync, rename over name, fsync of the directory. A crash leaves
// the old or the new contents, never a mix. Every durable file outside a
// store is written this way, on the filesystem its data directory lives
// on, so a crash test reaches each one.
func WriteFileAtomicIn(fs FS, dir, name string, data []byte) error {
	f, err := stageFile(fs, dir, name, data)
	if err != nil {
		return err
	}
	return f.Install()
}

// StagedFile is the durable first half of WriteFileAtomic: the new contents
// are synced in a temporary file that nothing reads yet.
type StagedFile struct {
	fs         vfs.FS
	dir        string
	tmp, final string
}

// StageFile writes and syncs the new contents of name to a temporary file.
// Install makes them name's contents; until then a crash leaves name as it
// was. Staging can overlap other work (the node stages its table while the
// children sync), leaving only the rename on the critical path.
func (e *Engine) StageFile(name string, data []byte) (*StagedFile, error) {
	return stageFile(e.opts.FS, e.opts.Dir, name, data)
}

func stageFile(fs vfs.FS, dir, name string, data []byte) (*StagedFile, error) {
	tmp, final := filepath.Join(dir, name+".tmp"), filepath.Join(dir, name)
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("storage: write %s: %w", final, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("storage: write %s: %w", final, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("storage: write %s: sync: %w", final, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("storage: write %s: %w", final, err)
	}
	return &StagedFile{fs: fs, dir: dir, tmp: tmp, final: final}, nil
}

// Install renames the staged file over its name and syncs the directory:
// from its return on, the new contents survive a crash.
func (f *StagedFile) Install() error {
	if err := f.fs.Rename(f.tmp, f.final); err != nil {
		return fmt.Errorf("storage: write %s: %w", f.final, err)
	}
	d, err := f.fs.OpenDir(f.dir)
	if err != nil {
		return fmt.Errorf("storage: write %s: %w", f.final, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("storage: write %s: sync directory: %w", f.final, err)
	}
	return nil
}

// ReadFile reads name from the data directory (ReadFileIn).
func (e *Engine) ReadFile(name string) (data []byte, ok bool, err error) {
	return ReadFileIn(e.opts.FS, e.opts.Dir, name)
}

// ReadFileIn reads dir/name on fs; ok is false if it does not exist. Any
// other failure is an error: an unreadable table must never look like a
// missing one (recovery would start a new index over the stores).
func ReadFileIn(fs FS, dir, name string) (data []byte, ok bool, err error) {
	path := filepath.Join(dir, name)
	f, err := fs.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("storage: read %s: %w", path, err)
	}
	defer f.Close()
	data, err = io.ReadAll(f)
	if err != nil {
		return nil, false, fmt.Errorf("storage: read %s: %w", path, err)
	}
	return data, true, nil
}

// MkdirAllDurable creates dir and its missing parents on fs and syncs
// every ancestor's directory entries, so dir survives a crash.
func MkdirAllDurable(fs FS, dir string) error { return mkdirAllDurable(fs, dir) }

// ShardDirs returns, ascending, the ids of the shards that have a store
// directory of their own (per-shard layout), open or not, so recovery can
// find the stores a crash left behind.
func (e *Engine) ShardDirs() ([]routing.ShardID, error) {
	names, err := e.StoreDirs()
	if err != nil {
		return nil, err
	}
	var ids []routing.ShardID
	for _, n := range names {
		if id, ok := parseShardDir(n); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// sharedStoreDir is the name of the node's only store in the shared layout.
const sharedStoreDir = "node"

// StoreDirs returns the names of the store directories in the data
// directory, of either layout ("shard-N", "node"), sorted.
func (e *Engine) StoreDirs() ([]string, error) {
	names, err := e.opts.FS.List(e.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("storage: list %s: %w", e.opts.Dir, err)
	}
	var dirs []string
	for _, n := range names {
		if _, ok := parseShardDir(n); !ok && n != sharedStoreDir {
			continue
		}
		fi, err := e.opts.FS.Stat(filepath.Join(e.opts.Dir, n))
		if err != nil {
			return nil, fmt.Errorf("storage: list %s: %w", e.opts.Dir, err)
		}
		if fi.IsDir() {
			dirs = append(dirs, n)
		}
	}
	slices.Sort(dirs)
	return dirs, nil
}

// parseShardDir parses a per-shard store directory name, "shard-N" with N
// in canonical decimal form.
func parseShardDir(name string) (routing.ShardID, bool) {
	digits, ok := strings.CutPrefix(name, "shard-")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(digits, 10, 32)
	if err != nil || strconv.FormatUint(id, 10) != digits {
		return 0, false
	}
	return routing.ShardID(id), true
}

// TrimLog deletes the shard's whole operation log. Recovery calls it: after
// a restart no split holds any log.
func (s *Shard) TrimLog() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logHold = 0
	s.logged.Store(0)
	return s.trimLogLocked()
}

// syncDir fsyncs a directory, making the entries created or removed in it
// durable. Pebble syncs the contents of a store's directory, not the entry
// of the directory itself in its parent: that is the caller's job.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("storage: open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("storage: sync directory %s: %w", dir, err)
	}
	return nil
}

// mkdirAllDurable creates dir and its missing parents and syncs every
// ancestor's directory entries, so dir survives a crash.
func mkdirAllDurable(fs vfs.FS, dir string) error {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("storage: create %s: %w", dir, err)
	}
	// Sync every ancestor, not only those of directories made now: an
	// existing directory may be one an earlier open created and then failed
	// to sync the entry of, and a power loss would still take it (and the
	// index in it) away.
	for d := filepath.Clean(dir); filepath.Dir(d) != d; d = filepath.Dir(d) {
		if err := syncDir(fs, filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}
