// Package invariants switches expensive consistency checks on in test
// builds, following Pebble's internal/invariants: build with
// -tags invariants (or -race) and Enabled is true. CI runs
// go test -tags invariants -race ./... .
//
// AssertionFailedf reports a bug: it panics when Enabled and otherwise
// returns an error, so production code degrades to an error rather than
// running on with corrupt state unnoticed.
package invariants

import "fmt"

// AssertionFailedf builds an assertion error; it panics when Enabled.
func AssertionFailedf(format string, args ...any) error {
	err := fmt.Errorf("assertion failed: "+format, args...)
	if Enabled {
		panic(err)
	}
	return err
}
