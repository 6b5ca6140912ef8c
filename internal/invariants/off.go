//go:build !(invariants || race)

package invariants

// Enabled is false in ordinary builds: expensive checks compile away.
const Enabled = false
