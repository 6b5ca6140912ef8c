package storage

import (
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// DiskUsage is the space an engine's data directory takes.
type DiskUsage struct {
	// Live is the sum of the sizes of every file, counting a file
	// hard-linked into two stores twice (what per-store "du" would say).
	Live int64
	// Unique counts each underlying file once: the space actually used.
	// On filesystems without inode information it equals Live.
	Unique int64
}

// DiskUsage walks the data directory.
func (e *Engine) DiskUsage() (DiskUsage, error) { return dirUsage(e.opts.FS, e.opts.Dir) }

// DirUsage measures any directory tree on the OS filesystem (several
// engines' directories together, hard links between them counted once).
func DirUsage(dir string) (DiskUsage, error) { return dirUsage(vfs.Default, dir) }

func dirUsage(fsys vfs.FS, dir string) (DiskUsage, error) {
	var u DiskUsage
	seen := map[[2]uint64]bool{}
	err := walk(fsys, dir, func(path string, fi fs.FileInfo) {
		u.Live += fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			id := [2]uint64{uint64(st.Dev), st.Ino}
			if seen[id] {
				return
			}
			seen[id] = true
		}
		u.Unique += fi.Size()
	})
	return u, err
}

// walk calls fn for every regular file under dir.
func walk(fsys vfs.FS, dir string, fn func(string, fs.FileInfo)) error {
	names, err := fsys.List(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		fi, err := fsys.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if err := walk(fsys, p, fn); err != nil {
				return err
			}
			continue
		}
		fn(p, fi)
	}
	return nil
}

// linkedBytes splits the files of a fresh checkpoint into bytes hard-linked
// from the parent and bytes copied. With inode information a file is linked
// when it has more than one link; without it, Pebble's tables and blob
// files are the linked ones (checkpoints link those and copy the rest).
func (e *Engine) linkedBytes(dir string) (linked, copied int64) {
	_ = walk(e.opts.FS, dir, func(path string, fi fs.FileInfo) {
		isLinked := strings.HasSuffix(path, ".sst") || strings.HasSuffix(path, ".blob")
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			isLinked = st.Nlink > 1
		}
		if isLinked {
			linked += fi.Size()
		} else {
			copied += fi.Size()
		}
	})
	return linked, copied
}

// BytesWritten is the table bytes written to disk (flushes, compactions,
// ingested tables; not the WAL) through every store opened since the
// engine was, including stores since destroyed.
func (e *Engine) BytesWritten() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	total := e.retiredWritten
	for _, st := range e.stores {
		total += st.bytesWritten()
	}
	return total
}
