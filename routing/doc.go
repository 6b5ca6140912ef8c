// Package routing decides where documents live: OpenSearch's exact document
// routing, its resize (split/shrink/clone) selection and validation rules,
// adaptive replica selection, and the versioned routing table that an
// in-place shard split edits.
//
// # Contract
//
// The package is pure: no I/O, no clock, no goroutines, no logging, no
// randomness. Everything it needs arrives as arguments; callers that need
// randomness (ARS rotation) pass it in. Its only dependency outside the
// standard library is murmur3.
//
// Routing matches OpenSearch "to the integer": Hash is murmur3 x86_32 with
// seed 0 over UTF-16LE code units read as a signed int; a document's
// partition (routing slot) is floorMod(hash(routing ?? _id) + offset, R)
// with int32 wrap-around and offset = floorMod(hash(_id), P); its root shard
// is partition / (R / N). The golden vectors in testdata/ come from
// OpenSearch's own tests.
//
// # Tables
//
// A Table is an immutable value with a version. Each root shard owns a
// contiguous span of a 32-bit routing-key space and is divided into leaves,
// each owned by one shard. Lookup finds the root by the classic formula and
// then binary-searches the root's leaves. Edits (BeginSplit, CommitSplit,
// CancelSplit; BeginMerge, CommitMerge, CancelMerge for adjacent leaves of
// one root becoming one new shard) go through Apply, which validates its input and its output
// and returns the next version; a *Table is never modified once returned,
// so it may be shared by any number of goroutines.
//
// Two modes share the table: ModePartition (routing key = partition, splits
// cut at partition boundaries) and ModeOpenSearch (routing key = the wrapped
// hash, the hash-range rules of OpenSearch #20859). Storage keys documents
// by [root][routing key][_id], so every leaf is one contiguous key span.
//
// # Errors
//
// A rule OpenSearch enforces fails with an *Error carrying the Java
// exception class and OpenSearch's message verbatim. Merges have no
// OpenSearch counterpart: a refused merge is an IllegalArgumentException
// in OpenSearch's style, naming the shards. Other errors are
// prefixed "routing:"; a damaged table encoding wraps ErrCorruptTable.
package routing
