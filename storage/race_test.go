//go:build race

package storage

// raceEnabled is true under the race detector (about 10x slower), where
// the longest randomized tests run fewer rounds.
const raceEnabled = true
