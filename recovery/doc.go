// Package recovery will replay the split journal when an index is opened: a
// pure decision (journal + table + what is on disk -> roll back or roll
// forward) and a thin driver. It imports routing, storage and splitter.
//
// Status: not built yet (issue 5).
package recovery
