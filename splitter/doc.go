// Package splitter will hold the online in-place split as an explicit state
// machine (prepare, clone, catch-up, handoff, cleanup, abort) whose
// transitions live in one switch and whose effects are intents a small
// driver executes through storage. It imports routing and storage only.
//
// Status: not built yet (issue 4).
package splitter
