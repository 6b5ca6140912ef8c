// Package storage holds a node's shards in Pebble: documents keyed by
// [keyspace][routing key][_id], per-shard sequence numbers, an operation log for
// catching up children, hard-linked child creation, and dropping spans in
// O(metadata).
//
// # Contract
//
// storage is the only package that imports Pebble, and it imports nothing of
// ours but routing and internal packages. Every store takes a vfs.FS, so
// tests can run it on Pebble's in-memory, crashable and error-injecting
// filesystems, and storage tells time only through Options.Clock
// (internal/clock), so a simulation can run its deadlines and tickers on a
// manual clock.
//
// A Shard is a span of an engine. In the per-shard layout (the default, like
// OpenSearch's one Lucene index per shard) each shard has its own store and
// all stores share one block cache; a child is a hard-linked checkpoint of
// its parent's store, excised to its span. In the shared layout every shard
// of the node lives in one store and a child is metadata only. The splitter
// drives both through the same calls: CreateChildren (CreateChild, one
// after another or at the same time), CatchUp, DestroyShard.
// DropSpans drops a span from a live shard in place (Excise, or a range
// deletion and compaction); no protocol uses it yet, its benchmarks compare
// the two ways.
//
// Writes are atomic batches with consecutive sequence numbers, committed
// under the shard's apply lock in sequence-number order, so that a
// checkpoint always holds a prefix of them. With DurabilityRequest a write
// returns after its WAL fsync (concurrent writers share fsyncs); with
// DurabilityAsync after the memtable insert, with an fsync on an interval.
// Pebble makes a batch readable before its fsync ends, so with
// DurabilityRequest a read (Get, GetID, Scan, ScanSpan) that may have seen
// a batch whose sync has not succeeded syncs the WAL before it returns: no
// read returns a value that a power loss takes back (store.readDurable).
// A shard refuses any key outside the spans it owns (*OutOfSpanError).
//
// A shard keeps one document per _id, as OpenSearch does, whatever routing
// value led there: routed documents have an entry in an `_id` index kept in
// the document's batch, and a write deletes the shard's other documents of
// its _id (idindex.go). A split's per-shard child drops its parent's other
// entries (Options.IDIndex); a merge keeps a document of an _id from each
// source, as OpenSearch's shrink does.
//
// While a split holds a shard's log (HoldLog), every write also appends an
// operation-log record in the same batch; when the last hold is released the
// log is trimmed. Independently, a per-shard store retains in memory every
// operation its tables may lack, from its commit to the flush that puts it
// in a table (history.go): a split's children are made from the parent's
// last flushed state, without flushing it, and take the operations above
// that state's sequence number from this history up to the log hold's
// start.
//
// Concurrency: Engine and Shard methods are safe for concurrent use. The
// engine's stores run background goroutines (Pebble's, and the async WAL
// syncer) that stop on Close. Closing a store (Engine.Close, DestroyShard)
// waits for what is inside it: writes pass the store's gate (store.enter)
// once they hold the apply lock, and scans, operation-log reads
// (LogSince) and a merge's copies of its sources register with it
// (store.beginScan), so a close refuses new scans, stops running ones at
// their next document and waits for them before Pebble closes. A scan's
// callback must therefore not wait for the store's close.
package storage
