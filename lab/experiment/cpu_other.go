//go:build !unix

package experiment

import "time"

// processCPU reports nothing where getrusage does not exist.
func processCPU() (time.Duration, bool) { return 0, false }
