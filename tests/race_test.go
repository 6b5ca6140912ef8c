//go:build race

package tests

// raceEnabled is true under the race detector (about 10x slower), where
// the longest enumerations run fewer seeds.
const raceEnabled = true
