//go:build invariants || race

package invariants

// Enabled is true in builds with the invariants or race tag: expensive
// checks run and assertion failures panic.
const Enabled = true
