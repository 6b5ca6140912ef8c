package storage

// The `_id` index: one document per _id in a shard, as OpenSearch keeps it.
//
// A document's key is [keyspace][routing key][_id], so two routing values
// that reach one shard would make two documents with one _id. OpenSearch
// keeps one: its engine looks a document up by the _id term alone
// (VersionsAndSeqNoResolver.loadDocIdAndVersion, ShardGetService.innerGet:
// the routing value only chose the shard), so an index of an _id the shard
// holds replaces it, and a get or delete with any routing value that
// reaches the shard finds it.
//
// Only a document indexed with a routing value can sit under a key its _id
// does not name: without one, its routing key is its _id's own (its home,
// Home). So the index holds an entry for each routed document and nothing
// else:
//
//	tagID 0x18 | keyspace u32 | len(_id) u16 | _id | routing key u32  → (empty)
//
// written in the same batch as the document, so it is exactly as durable.
// The length makes the entries of one _id a prefix of their own. An entry
// names its document's routing key, so the entries of a shard are those
// whose routing key the shard owns: a split or merge in the shared layout
// changes no entry, and a lookup filters by the spans of the shard asking.
//
// The documents of an _id in a shard are then: the one under the op's own
// key, the routed ones the index names inside the shard's spans, and the
// one at its home if the shard owns that key (which a routed op names,
// Op.Home). A write deletes every one of them but its own key's, in the
// same batch, and logs their keys (LogEntry.Removed) so a split's catch-up
// removes them from whichever child they moved to.
//
// What it costs a write: a routed write reads the index (one seek) and its
// home (one point read, when the shard owns it), and writes its entry. A
// write without routing reads the index only while its store may hold an
// entry (store.idEntries: false at open when the store has none, and
// until a routed document is written): an index that nobody routes into
// costs it nothing.
//
// A split's per-shard child is a hard-linked checkpoint of its parent, and
// the index is ordered by _id, not by partition: the child links its
// parent's whole index and must drop the entries of documents it does not
// own. Options.IDIndex chooses how (IDIndexBuild); in the shared layout
// there is nothing to drop. A merge target adds the entries of the sources
// it copies. A merge may so bring two documents of one _id together, one
// from each source (their routing values reached different shards before):
// it keeps both, as OpenSearch's shrink does (its addIndexes copies every
// document of every source), and the next write of that _id on the target
// replaces both.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardsplit/shardsplit/routing"
)

const tagID byte = 0x18

// IDIndexBuild says how a per-shard child of a split gets the `_id`
// entries of its documents out of the parent's whole index, which its
// checkpoint links.
type IDIndexBuild uint8

const (
	// IDIndexRebuild reads the linked index, excises it, and ingests one
	// table of the entries whose routing keys the child owns: it writes
	// the child's entries once, straight into the lowest level. The zero
	// value.
	IDIndexRebuild IDIndexBuild = iota
	// IDIndexScanDelete keeps the linked index and deletes the entries of
	// the documents the child does not own one by one (point tombstones,
	// as Lucene's split marks documents deleted), which compactions drop
	// later.
	IDIndexScanDelete
	// IDIndexOff keeps no `_id` index: a document is only its
	// [keyspace][routing key][_id] key, and one _id written with two
	// routing values that reach one shard is two documents. The layout
	// before the index; for comparison only.
	IDIndexOff
)

func (b IDIndexBuild) String() string {
	switch b {
	case IDIndexRebuild:
		return "rebuild"
	case IDIndexScanDelete:
		return "scan-delete"
	case IDIndexOff:
		return "off"
	}
	return fmt.Sprintf("IDIndexBuild(%d)", uint8(b))
}

// ParseIDIndexBuild parses "rebuild", "scan-delete" or "off".
func ParseIDIndexBuild(s string) (IDIndexBuild, error) {
	switch s {
	case "rebuild":
		return IDIndexRebuild, nil
	case "scan-delete":
		return IDIndexScanDelete, nil
	case "off":
		return IDIndexOff, nil
	}
	return 0, fmt.Errorf("storage: unknown _id index build %q (want rebuild, scan-delete or off)", s)
}

// Home is the routing key under which a document of an _id lives when it
// was indexed without a routing value: the key its _id alone routes to, in
// the op's keyspace. A routed op names it (Set) so that the shard finds
// such a document, which has no `_id` entry. The node computes it
// (routing.Table.Route(id, "")); it is not set when the _id alone routes
// to another keyspace (opensearch mode: another root, so another shard).
type Home struct {
	Key routing.Key
	Set bool
}

// idKey returns the `_id` entry of the document of id under routing key
// key of keyspace ks.
func idKey(buf []byte, ks routing.ShardID, id string, key routing.Key) []byte {
	buf = idPrefix(buf, ks, id)
	return binary.BigEndian.AppendUint32(buf, uint32(key))
}

// idPrefix is the prefix every entry of id in keyspace ks starts with.
func idPrefix(buf []byte, ks routing.ShardID, id string) []byte {
	buf = append(buf[:0], tagID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(ks))
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(id)))
	return append(buf, id...)
}

// idPrefixLen is the length of an entry's fixed fields before its _id.
const idPrefixLen = 1 + 4 + 2

// decodeIDKey splits an `_id` entry into its parts.
func decodeIDKey(k []byte) (ks routing.ShardID, id string, key routing.Key, err error) {
	if len(k) < idPrefixLen+4 || k[0] != tagID {
		return 0, "", 0, fmt.Errorf("storage: %x is not an _id entry", k)
	}
	n := int(binary.BigEndian.Uint16(k[5:]))
	if len(k) != idPrefixLen+n+4 {
		return 0, "", 0, fmt.Errorf("storage: corrupt _id entry %x", k)
	}
	return routing.ShardID(binary.BigEndian.Uint32(k[1:])), string(k[idPrefixLen : idPrefixLen+n]),
		routing.Key(binary.BigEndian.Uint32(k[idPrefixLen+n:])), nil
}

// allIDs bounds every `_id` entry.
var allIDs = [2][]byte{{tagID}, {tagID + 1}}

// idHit is a document of an _id that a lookup found: its routing key, and
// whether the index has an entry for it.
type idHit struct {
	key   routing.Key
	entry bool
}

// lookupID returns the documents of id in keyspace ks whose routing keys in
// accepts: the routed ones the index names (when entries: the store may
// hold entries) and the one at home (when checkHome), whatever routing
// value each was indexed with. r sees the writes it must (the DB under the
// apply lock, an indexed batch, a snapshot).
func lookupID(r pebble.Reader, ks routing.ShardID, id string, in func(routing.Key) bool, entries bool, home routing.Key, checkHome bool) ([]idHit, error) {
	var hits []idHit
	if entries {
		lo := idPrefix(nil, ks, id)
		hi := append(idKey(nil, ks, id, ^routing.Key(0)), 0)
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return nil, err
		}
		for it.First(); it.Valid(); it.Next() {
			k := it.Key()
			if len(k) != len(lo)+4 {
				_ = it.Close()
				return nil, fmt.Errorf("storage: corrupt _id entry %x", k)
			}
			if key := routing.Key(binary.BigEndian.Uint32(k[len(lo):])); in(key) {
				hits = append(hits, idHit{key: key, entry: true})
			}
		}
		if err := it.Close(); err != nil {
			return nil, err
		}
	}
	if checkHome && in(home) && !hasHit(hits, home) {
		_, c, err := r.Get(DocKey(nil, ks, home, id))
		switch {
		case errors.Is(err, pebble.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			c.Close()
			hits = append(hits, idHit{key: home})
		}
	}
	return hits, nil
}

func hasHit(hits []idHit, k routing.Key) bool {
	for _, h := range hits {
		if h.key == k {
			return true
		}
	}
	return false
}

// hasIDEntries reports whether a store holds any `_id` entry.
func hasIDEntries(r pebble.Reader) (bool, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: allIDs[0], UpperBound: allIDs[1]})
	if err != nil {
		return false, err
	}
	found := it.First()
	return found, it.Close()
}

// indexOpLocked adds to b what op does to the `_id` index, and the deletes
// of the other documents of op's _id in the shard, and returns their
// routing keys. r reads the store as b will apply to it (the DB, or b
// itself when it is indexed). s.mu is held.
func (s *Shard) indexOpLocked(b *pebble.Batch, r pebble.Reader, op Op, buf []byte) ([]routing.Key, []byte, error) {
	routed := op.Kind == OpIndex && op.Routing != ""
	entries := s.st.idEntries.Load()
	checkHome := op.Routing != "" && op.Home.Set && op.Home.Key != op.Key
	if !entries && !checkHome {
		if routed {
			s.st.idEntries.Store(true)
			buf = idKey(buf, op.Root, op.ID, op.Key)
			_ = b.Set(buf, nil, nil)
		}
		return nil, buf, nil
	}
	hits, err := lookupID(r, op.Root, op.ID, func(k routing.Key) bool { ok, _ := s.owns(op.Root, k); return ok }, entries, op.Home.Key, checkHome)
	if err != nil {
		return nil, buf, fmt.Errorf("storage: shard %d: look up _id %q: %w", s.id, op.ID, err)
	}
	var removed []routing.Key
	entryAtKey := false
	for _, h := range hits {
		if h.key == op.Key {
			entryAtKey = h.entry
			continue
		}
		_ = b.Delete(DocKey(nil, op.Root, h.key, op.ID), nil)
		if h.entry {
			_ = b.Delete(idKey(nil, op.Root, op.ID, h.key), nil)
		}
		removed = append(removed, h.key)
	}
	switch {
	case routed && !entryAtKey:
		s.st.idEntries.Store(true)
		buf = idKey(buf, op.Root, op.ID, op.Key)
		_ = b.Set(buf, nil, nil)
	case !routed && entryAtKey:
		buf = idKey(buf, op.Root, op.ID, op.Key)
		_ = b.Delete(buf, nil)
	}
	return removed, buf, nil
}

// putEntryLocked adds to b the `_id` entry a document stored without a
// lookup needs (a copy: CopyFrom; a replayed log entry: ApplyLog): set for
// a routed document, deleted (if the store may hold one) otherwise.
func (s *Shard) putEntryLocked(b *pebble.Batch, ks routing.ShardID, id string, key routing.Key, routed bool, buf []byte) []byte {
	switch {
	case routed:
		s.st.idEntries.Store(true)
		buf = idKey(buf, ks, id, key)
		_ = b.Set(buf, nil, nil)
	case s.st.idEntries.Load():
		buf = idKey(buf, ks, id, key)
		_ = b.Delete(buf, nil)
	}
	return buf
}

// GetID returns the document of _id id in span sp of keyspace ks, whatever
// routing value it was indexed with: the one under routing key key if there
// is one, else one the `_id` index names or the one at home. A merge can
// leave two documents of one _id in a shard (see the package's `_id` index
// notes); then the one under key wins, else the one with the highest
// sequence number. Like GetAny it reads regardless of the spans the shard
// owns now: sp is the span of the shard in the table the caller checked
// ownership against.
func (s *Shard) GetID(ks routing.ShardID, sp routing.Span, key routing.Key, id string, home Home) (Doc, bool, error) {
	if s.beforeGet != nil {
		s.beforeGet(s.id)
	}
	d, found, err := s.GetAny(ks, key, id)
	if err != nil || found || !s.ids {
		return d, found, err
	}
	entries := s.st.idEntries.Load()
	checkHome := home.Set && home.Key != key && sp.Contains(home.Key)
	if !entries && !checkHome {
		return Doc{}, false, nil
	}
	// Read again from one snapshot: a write that moved the document from
	// another key to key after the read above must not be missed.
	if s.closed.Load() || !s.st.beginScan() {
		return Doc{}, false, ErrShardClosed
	}
	defer s.st.endScan()
	snap := s.st.db.NewSnapshot()
	defer snap.Close()
	if err := s.st.readDurable(); err != nil { // the snapshot may see writes the read above did not
		return Doc{}, false, fmt.Errorf("storage: shard %d: get %q: %w", s.id, id, err)
	}
	hits, err := lookupID(snap, ks, id, sp.Contains, entries, home.Key, checkHome)
	if err != nil {
		return Doc{}, false, fmt.Errorf("storage: shard %d: get %q: %w", s.id, id, err)
	}
	if !hasHit(hits, key) {
		hits = append(hits, idHit{key: key})
	}
	var best Doc
	for _, h := range hits {
		v, c, err := snap.Get(DocKey(nil, ks, h.key, id))
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return Doc{}, false, fmt.Errorf("storage: shard %d: get %q: %w", s.id, id, err)
		}
		seq, r, src, err := decodeDocValue(v)
		if err == nil && (!found || h.key == key || best.Key != key && seq > best.Seq) {
			best, found = Doc{Root: ks, Key: h.key, ID: id, Routing: r, Seq: seq, Source: bytes.Clone(src)}, true
		}
		c.Close()
		if err != nil {
			return Doc{}, false, fmt.Errorf("storage: shard %d: get %q: %w", s.id, id, err)
		}
	}
	return best, found, nil
}

// IDIndexReport is what CheckIDIndex found.
type IDIndexReport struct {
	Entries int // entries of the span
	Routed  int // routed documents in the span
	// Missing are routed documents of the span without an entry, Orphans
	// entries of the span without a routed document under their key (as
	// "_id@routing key"; the first ten of each, with their counts).
	Missing, Orphans          []string
	MissingCount, OrphanCount int
	// Outside counts the entries in the shard's store outside the span
	// (other keyspaces included). A store of its own (per-shard layout)
	// must hold none once any keep-all cleanup has ended; a shared store
	// holds the other shards'.
	Outside int
	// SharedIDs counts the _ids with more than one document in the span:
	// none but those a merge brought together from two sources (see the
	// package's `_id` index notes).
	SharedIDs int
}

// OK reports whether the span's entries are exactly its routed documents.
func (r IDIndexReport) OK() bool { return r.MissingCount == 0 && r.OrphanCount == 0 }

// CheckIDIndex compares the `_id` entries of span sp of the shard's
// keyspace with its routed documents, from one snapshot.
func (s *Shard) CheckIDIndex(sp routing.Span) (IDIndexReport, error) {
	var r IDIndexReport
	if s.closed.Load() || !s.st.beginScan() {
		return r, ErrShardClosed
	}
	defer s.st.endScan()
	snap := s.st.db.NewSnapshot()
	defer snap.Close()
	type docKey struct {
		id  string
		key routing.Key
	}
	routed := map[docKey]bool{}
	perID := map[string]int{}
	err := scanSpan(snap, s.keyspace, sp, s.stopOnClose(func(d Doc) error {
		if perID[d.ID]++; perID[d.ID] == 2 {
			r.SharedIDs++
		}
		if d.Routing != "" {
			routed[docKey{d.ID, d.Key}] = false
			r.Routed++
		}
		return nil
	}))
	if err != nil {
		return r, fmt.Errorf("storage: shard %d: check _id index: %w", s.id, err)
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: allIDs[0], UpperBound: allIDs[1]})
	if err != nil {
		return r, err
	}
	for it.First(); it.Valid(); it.Next() {
		ks, id, key, err := decodeIDKey(it.Key())
		if err != nil {
			_ = it.Close()
			return r, err
		}
		if ks != s.keyspace || !sp.Contains(key) {
			r.Outside++
			continue
		}
		r.Entries++
		k := docKey{id, key}
		if seen, ok := routed[k]; !ok || seen {
			if r.OrphanCount++; len(r.Orphans) < 10 {
				r.Orphans = append(r.Orphans, fmt.Sprintf("%s@%d", id, key))
			}
			continue
		}
		routed[k] = true
	}
	if err := it.Close(); err != nil {
		return r, err
	}
	for k, seen := range routed {
		if !seen {
			if r.MissingCount++; len(r.Missing) < 10 {
				r.Missing = append(r.Missing, fmt.Sprintf("%s@%d", k.id, k.key))
			}
		}
	}
	return r, nil
}

// IDIndexStats measures what a child's build did to the index it linked.
type IDIndexStats struct {
	Build   IDIndexBuild
	Scanned int   // entries read
	Kept    int   // entries of documents the child owns
	Dropped int   // entries of the others
	Written int64 // bytes written: the rebuilt tables, or the tombstones' batch
	Tables  int   // tables ingested (a rebuild)
}

// idIndexTableDir is where a rebuild's table is built, inside the child's
// store directory (which a failed build removes whole, as a merge target's
// mergeTableDir).
const idIndexTableDir = "id-ingest"

// trimIDIndex makes a fresh child's store (its checkpoint linked its
// parent's whole index) hold the entries of span of keyspace ks and no
// other, as how says. The store serves no one yet.
func (e *Engine) trimIDIndex(st *store, ks routing.ShardID, span routing.Span, how IDIndexBuild) (IDIndexStats, error) {
	stats := IDIndexStats{Build: how}
	nothing := func([]byte) error { return nil }
	switch how {
	case IDIndexOff:
		return stats, nil
	case IDIndexScanDelete:
		b := st.db.NewBatch()
		defer b.Close()
		err := sortIDIndex(st, ks, span, &stats, nothing, func(k []byte) error { return b.Delete(bytes.Clone(k), nil) })
		if err != nil {
			return stats, err
		}
		stats.Written = int64(b.Len())
		if stats.Dropped > 0 {
			if err := st.applySynced(b); err != nil {
				return stats, fmt.Errorf("storage: delete %d foreign _id entries: %w", stats.Dropped, err)
			}
		}
		return stats, st.setIDEntries()
	}
	// Rebuild: the kept entries, read in key order, into tables of their
	// own; the index range excised; the tables ingested into the emptied
	// range (the lowest level: nothing overlaps them). An index with no
	// other entry is left as it is.
	tmp := filepath.Join(st.dir, idIndexTableDir)
	if err := e.opts.FS.MkdirAll(tmp, 0o755); err != nil {
		return stats, fmt.Errorf("storage: create %s: %w", tmp, err)
	}
	opts := e.so.pebbleOptions(nil, nil)
	tb := &tableBuilder{fs: e.opts.FS, dir: tmp, limit: mergeTableSize,
		opts: opts.MakeWriterOptions(len(opts.Levels)-1, st.db.TableFormat())}
	defer tb.abort()
	if err := sortIDIndex(st, ks, span, &stats, func(k []byte) error { return tb.add(k, nil) }, nothing); err != nil {
		return stats, err
	}
	if stats.Dropped == 0 { // all its own already (a merge target's checkpoint of a child)
		tb.abort()
		if err := e.opts.FS.RemoveAll(tmp); err != nil {
			return stats, fmt.Errorf("storage: remove %s: %w", tmp, err)
		}
		st.idEntries.Store(stats.Kept > 0)
		return stats, nil
	}
	if err := tb.finish(); err != nil {
		return stats, err
	}
	stats.Written, stats.Tables = tb.bytes, len(tb.paths)
	if stats.Scanned > 0 {
		if err := st.excise(allIDs[0], allIDs[1]); err != nil {
			return stats, err
		}
	}
	if len(tb.paths) > 0 {
		if !st.enter() {
			return stats, ErrShardClosed
		}
		err := st.db.Ingest(context.Background(), tb.paths)
		st.exit()
		if err != nil {
			return stats, fmt.Errorf("storage: ingest %d _id tables into %s: %w", len(tb.paths), st.dir, err)
		}
	}
	if err := e.opts.FS.RemoveAll(tmp); err != nil {
		return stats, fmt.Errorf("storage: remove %s: %w", tmp, err)
	}
	if err := syncDir(e.opts.FS, st.dir); err != nil {
		return stats, err
	}
	st.idEntries.Store(stats.Kept > 0)
	return stats, nil
}

// sortIDIndex reads every `_id` entry of st in key order, counting them in
// stats, and hands each to kept if the span of keyspace ks holds its
// document, else to dropped.
func sortIDIndex(st *store, ks routing.ShardID, span routing.Span, stats *IDIndexStats, kept, dropped func([]byte) error) error {
	it, err := st.db.NewIter(&pebble.IterOptions{LowerBound: allIDs[0], UpperBound: allIDs[1]})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		stats.Scanned++
		eks, _, key, err := decodeIDKey(it.Key())
		switch {
		case err != nil:
		case eks == ks && span.Contains(key):
			stats.Kept++
			err = kept(it.Key())
		default:
			stats.Dropped++
			err = dropped(it.Key())
		}
		if err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// setIDEntries reads whether the store holds an `_id` entry now.
func (st *store) setIDEntries() error {
	if !st.enter() {
		return ErrShardClosed
	}
	defer st.exit()
	ok, err := hasIDEntries(st.db)
	if err != nil {
		return fmt.Errorf("storage: %s: look for _id entries: %w", st.dir, err)
	}
	st.idEntries.Store(ok)
	return nil
}

// dropForeignIDEntries deletes, batch by batch, the `_id` entries of s's
// store whose documents lie outside spans of keyspace ks (every other
// keyspace's too), and returns how many it deleted. keep-all children's
// cleanup and the new-index resize's range cleanup use it.
func dropForeignIDEntries(ctx context.Context, s *Shard, ks routing.ShardID, spans []routing.Span, batch int, pause func()) (int, error) {
	deleted := 0
	for from := allIDs[0]; from != nil; {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		if s.closed.Load() || !s.st.enter() {
			return deleted, ErrShardClosed
		}
		b := s.st.db.NewBatch()
		n, next, err := func() (int, []byte, error) {
			it, err := s.st.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: allIDs[1]})
			if err != nil {
				return 0, nil, err
			}
			n := 0
			var next []byte
			for it.First(); it.Valid(); it.Next() {
				if n == batch {
					next = bytes.Clone(it.Key())
					break
				}
				eks, _, key, err := decodeIDKey(it.Key())
				if err != nil {
					_ = it.Close()
					return 0, nil, err
				}
				if eks == ks && inSpans(spans, key) {
					continue
				}
				_ = b.Delete(bytes.Clone(it.Key()), nil)
				n++
			}
			return n, next, it.Close()
		}()
		if err == nil && n > 0 {
			err = s.st.db.Apply(b, pebble.NoSync)
		}
		_ = b.Close()
		s.st.exit()
		if err != nil {
			return deleted, fmt.Errorf("storage: shard %d: delete foreign _id entries: %w", s.id, err)
		}
		deleted += n
		from = next
		if from != nil && pause != nil {
			pause()
		}
	}
	return deleted, nil
}

// HomeOf is where a document of id indexed without routing lives, for a
// request routed by routingValue to root under t: the key the _id alone
// routes to, when that is in root's keyspace (in opensearch mode another
// root is another keyspace, so another shard). A shard keeps one document
// per _id; a routed write or get must find such a document too, and it has
// no `_id` entry.
func HomeOf(t *routing.Table, root routing.ShardID, id, routingValue string) Home {
	if routingValue == "" {
		return Home{}
	}
	p, _ := t.Route(id, "")
	if t.Keyspace(p.Root) != t.Keyspace(root) {
		return Home{}
	}
	return Home{Key: t.KeyOf(p), Set: true}
}
