// Package tests holds cross-package harnesses: house-rule lints now, and
// later the simulation, crash-enumeration and end-to-end tests. Nothing
// imports it.
package tests
