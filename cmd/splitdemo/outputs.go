package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// prepareOutputs makes sure a run's outputs can be written before the run
// starts: it creates the --out directory, proves it writable with a file it
// removes again, and checks that --json (if given) names a file in an
// existing directory. compare and autosplit measure for a minute or more
// and write only at the end; without this a typo in --out cost the whole
// run and was reported after it.
//
// The returned undo removes the directories prepareOutputs made, if they
// are still empty: a run that fails before writing its outputs calls it,
// so that it leaves the file system as it found it. When prepareOutputs
// itself fails it has undone its work already (bad input changes
// nothing).
func prepareOutputs(out, jsonPath string) (undo func(), err error) {
	if out == "" {
		return func() {}, errors.New("--out must name a directory")
	}
	made, err := missingDirs(out)
	if err != nil {
		return func() {}, fmt.Errorf("--out %q: %w", out, err)
	}
	undo = func() {
		for _, d := range made { // deepest first; a directory with anything in it stays
			_ = os.Remove(d)
		}
	}
	defer func() {
		if err != nil {
			undo()
		}
	}()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return undo, fmt.Errorf("--out %q: %w", out, err)
	}
	probe, err := os.CreateTemp(out, ".splitdemo-probe-*")
	if err != nil {
		return undo, fmt.Errorf("--out %q: not writable: %w", out, err)
	}
	probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return undo, fmt.Errorf("--out %q: %w", out, err)
	}
	if jsonPath == "" {
		return undo, nil
	}
	if fi, err := os.Stat(jsonPath); err == nil && fi.IsDir() {
		return undo, fmt.Errorf("--json %q: is a directory, want a file name", jsonPath)
	}
	file, err := linkTarget(jsonPath)
	if err != nil {
		return undo, fmt.Errorf("--json %q: %w", jsonPath, err)
	}
	dir := filepath.Dir(file)
	fi, err := os.Stat(dir)
	if err != nil {
		return undo, fmt.Errorf("--json %q: %w", jsonPath, err)
	}
	if !fi.IsDir() {
		return undo, fmt.Errorf("--json %q: %q is not a directory", jsonPath, dir)
	}
	return undo, nil
}

// linkTarget returns the file that writing path writes: path itself, or,
// when path is a symbolic link (a chain of them), the file it names, which
// need not exist yet.
func linkTarget(path string) (string, error) {
	for range 40 { // Linux's own limit on a chain of links
		fi, err := os.Lstat(path)
		if errors.Is(err, os.ErrNotExist) || (err == nil && fi.Mode()&os.ModeSymlink == 0) {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		next, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(next) {
			next = filepath.Join(filepath.Dir(path), next)
		}
		path = next
	}
	return "", fmt.Errorf("too many levels of symbolic links")
}

// missingDirs returns path and those of its ancestors that do not exist,
// deepest first: what MkdirAll(path) would make.
func missingDirs(path string) ([]string, error) {
	var missing []string
	for p := filepath.Clean(path); ; {
		_, err := os.Lstat(p)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, p)
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}
	return slices.Clip(missing), nil
}
