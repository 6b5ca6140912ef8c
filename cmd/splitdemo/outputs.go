package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// prepareOutputs makes sure a run's outputs can be written before the run
// starts: it creates the --out directory, proves it writable with a file it
// removes again, and checks that --json (if given) names a file in an
// existing directory. compare and autosplit measure for a minute or more
// and write only at the end; without this a typo in --out cost the whole
// run and was reported after it.
func prepareOutputs(out, jsonPath string) error {
	if out == "" {
		return errors.New("--out must name a directory")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("--out %q: %w", out, err)
	}
	probe, err := os.CreateTemp(out, ".splitdemo-probe-*")
	if err != nil {
		return fmt.Errorf("--out %q: not writable: %w", out, err)
	}
	probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return fmt.Errorf("--out %q: %w", out, err)
	}
	if jsonPath == "" {
		return nil
	}
	if fi, err := os.Stat(jsonPath); err == nil && fi.IsDir() {
		return fmt.Errorf("--json %q: is a directory, want a file name", jsonPath)
	}
	dir := filepath.Dir(jsonPath)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--json %q: %w", jsonPath, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--json %q: %q is not a directory", jsonPath, dir)
	}
	return nil
}
