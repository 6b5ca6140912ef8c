// Package tests holds cross-package harnesses: the house-rule lints, the
// crash-point enumeration, the failure-path regressions, the concurrent
// split stress test with its porcupine linearizability check, and the real
// kill -9 test. The seeded simulation is its own package, tests/sim.
// Nothing imports these.
package tests
