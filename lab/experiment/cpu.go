package experiment

import "time"

// cpuNow is the CPU time this process has used so far (processCPU), or -1
// where the platform does not report it.
func cpuNow() time.Duration {
	if d, ok := processCPU(); ok {
		return d
	}
	return -1
}

// ProcessCPU is the CPU time this process has used so far, user and
// system, and whether the platform reports it (findings' per-write costs).
func ProcessCPU() (time.Duration, bool) { return processCPU() }
