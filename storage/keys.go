package storage

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/shardsplit/shardsplit/routing"
)

// Key layout. Every key starts with a one-byte tag that puts each kind in its
// own reserved range, so no scan, checkpoint span or excise of documents can
// touch metadata or the operation log, and vice versa.
//
//	tagMeta 0x01 | kind byte | shard u32           per-shard metadata (last sequence number)
//	tagDoc  0x10 | keyspace u32 | routing key u32 | _id   a document
//	tagID   0x18 | keyspace u32 | len u16 | _id | routing key u32   the `_id` entry of a routed document (idindex.go)
//	tagLog  0x20 | shard u32 | seq u64             an operation-log entry
//
// All integers are big-endian, so byte order is numeric order and a leaf of
// the routing table (one root, a contiguous span of routing keys) is one
// contiguous span of document keys.
//
// The keyspace is the root in opensearch mode and 0 in partition mode
// (routing.Table.Keyspace): partitions are unique across roots, so a
// partition-mode index can be resized into another without rewriting keys.
// storage only sees keyspaces: the fields named Root of Doc, Op and
// OutOfSpanError hold one (their names predate the distinction).
//
// Worked example: _id "user-42" on an 8-shard index (R = 1024) lands in
// partition 361 of root 2. In partition mode its routing key is 361 and its
// key is
//
//	10 | 00 00 00 00 | 00 00 01 69 | 75 73 65 72 2d 34 32
//	tag  keyspace 0    key 361       "user-42"
//
// In opensearch mode the routing key is the wrapped hash -1591625367 biased
// by 2^31, 0x2121b969, and the keyspace is root 2, so the key is
// 10 | 00000002 | 2121b969 | "user-42".
const (
	tagMeta byte = 0x01
	tagDoc  byte = 0x10
	tagLog  byte = 0x20
	tagEnd  byte = 0x21 // first byte past every key we write

	metaSeq byte = 's' // last sequence number of a shard

	docPrefixLen = 1 + 4 + 4
	logKeyLen    = 1 + 4 + 8
)

// DocKey returns the key of a document. buf is reused when it has capacity.
func DocKey(buf []byte, keyspace routing.ShardID, key routing.Key, id string) []byte {
	buf = append(buf[:0], tagDoc)
	buf = binary.BigEndian.AppendUint32(buf, uint32(keyspace))
	buf = binary.BigEndian.AppendUint32(buf, uint32(key))
	return append(buf, id...)
}

// DecodeDocKey splits a document key into its parts.
func DecodeDocKey(k []byte) (keyspace routing.ShardID, key routing.Key, id string, err error) {
	if len(k) < docPrefixLen || k[0] != tagDoc {
		return 0, 0, "", fmt.Errorf("storage: %x is not a document key", k)
	}
	return routing.ShardID(binary.BigEndian.Uint32(k[1:])), routing.Key(binary.BigEndian.Uint32(k[5:])), string(k[docPrefixLen:]), nil
}

// SpanBounds returns the document key range [start, end) of a span of
// routing keys of a keyspace.
func SpanBounds(keyspace routing.ShardID, sp routing.Span) (start, end []byte) {
	start = docBound(keyspace, sp.Start)
	end = docBound(keyspace, sp.End)
	return start, end
}

// docBound is the first document key at or after routing key k of a
// keyspace; k may be 1<<32, which is the start of the next keyspace.
func docBound(keyspace routing.ShardID, k uint64) []byte {
	if k >= 1<<32 {
		keyspace, k = keyspace+1, 0
		if keyspace == 0 { // wrapped: past every keyspace
			return []byte{tagDoc + 1}
		}
	}
	b := append(make([]byte, 0, docPrefixLen), tagDoc)
	b = binary.BigEndian.AppendUint32(b, uint32(keyspace))
	return binary.BigEndian.AppendUint32(b, uint32(k))
}

// allDocs bounds every document key.
var allDocs = [2][]byte{{tagDoc}, {tagDoc + 1}}

func metaKey(kind byte, shard routing.ShardID) []byte {
	return binary.BigEndian.AppendUint32([]byte{tagMeta, kind}, uint32(shard))
}

func logKey(buf []byte, shard routing.ShardID, seq uint64) []byte {
	buf = append(buf[:0], tagLog)
	buf = binary.BigEndian.AppendUint32(buf, uint32(shard))
	return binary.BigEndian.AppendUint64(buf, seq)
}

// logBounds bounds the operation log of a shard.
func logBounds(shard routing.ShardID) (start, end []byte) {
	return logKey(nil, shard, 0), logKey(nil, shard+1, 0)
}

// Doc is a stored document.
type Doc struct {
	Root    routing.ShardID // the keyspace (routing.Table.Keyspace), not always the root
	Key     routing.Key
	ID      string
	Routing string // the routing value it was indexed with, "" if none
	Seq     uint64 // sequence number of the write that stored it
	Source  []byte
}

// docValue encodes what a document key maps to: seq u64 | uvarint len(routing)
// | routing | source.
func docValue(buf []byte, seq uint64, routingValue string, source []byte) []byte {
	buf = binary.BigEndian.AppendUint64(buf[:0], seq)
	buf = binary.AppendUvarint(buf, uint64(len(routingValue)))
	buf = append(buf, routingValue...)
	return append(buf, source...)
}

var errCorruptValue = errors.New("storage: corrupt document value")

func decodeDocValue(v []byte) (seq uint64, routingValue string, source []byte, err error) {
	if len(v) < 9 {
		return 0, "", nil, errCorruptValue
	}
	seq = binary.BigEndian.Uint64(v)
	n, w := binary.Uvarint(v[8:])
	if w <= 0 || uint64(len(v)-8-w) < n {
		return 0, "", nil, errCorruptValue
	}
	off := 8 + w
	return seq, string(v[off : off+int(n)]), v[off+int(n):], nil
}

// OpKind is the kind of a document operation.
type OpKind uint8

const (
	// OpIndex stores (upserts) a document.
	OpIndex OpKind = iota + 1
	// OpDelete removes a document.
	OpDelete
	// OpNoop changes no document: it holds a sequence number in a copy's
	// history (OpenSearch's NoOp), as a child that follows its parent's
	// operations records those of the ranges it does not own, so its
	// local checkpoint advances over them.
	OpNoop
)

func (k OpKind) String() string {
	switch k {
	case OpIndex:
		return "index"
	case OpDelete:
		return "delete"
	case OpNoop:
		return "noop"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one document operation.
type Op struct {
	Kind    OpKind
	Root    routing.ShardID // the keyspace (routing.Table.Keyspace), not always the root
	Key     routing.Key
	ID      string
	Routing string
	Source  []byte
	// Home is where a document of the _id indexed without routing lives
	// (a routed op names it; idindex.go).
	Home Home
}

// LogEntry is an operation-log record: an operation with the sequence
// number it was applied at.
type LogEntry struct {
	Seq uint64
	Op  Op
	// Removed are the routing keys of the other documents of the op's _id
	// that it deleted (idindex.go), in the op's keyspace.
	Removed []routing.Key
}

// logRemoved flags a log value's kind byte: a count and the removed
// routing keys follow it.
const logRemoved byte = 0x80

// logValue encodes an operation: kind | [uvarint n | n × routing key u32,
// when kind has logRemoved] | uvarint len(docKey) | docKey | docValue.
func logValue(buf []byte, op Op, seq uint64, dk []byte, removed []routing.Key) []byte {
	buf = append(buf[:0], byte(op.Kind))
	if len(removed) > 0 {
		buf[0] |= logRemoved
		buf = binary.AppendUvarint(buf, uint64(len(removed)))
		for _, k := range removed {
			buf = binary.BigEndian.AppendUint32(buf, uint32(k))
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(dk)))
	buf = append(buf, dk...)
	if op.Kind == OpIndex {
		buf = append(buf, docValue(nil, seq, op.Routing, op.Source)...)
	}
	return buf
}

func decodeLogEntry(k, v []byte) (LogEntry, error) {
	if len(k) != logKeyLen || len(v) < 2 {
		return LogEntry{}, fmt.Errorf("storage: corrupt log entry %x", k)
	}
	e := LogEntry{Seq: binary.BigEndian.Uint64(k[5:])}
	e.Op.Kind = OpKind(v[0] &^ logRemoved)
	if v[0]&logRemoved != 0 {
		n, w := binary.Uvarint(v[1:])
		if w <= 0 || n == 0 || uint64(len(v)-1-w)/4 < n {
			return LogEntry{}, fmt.Errorf("storage: corrupt log entry %x", k)
		}
		e.Removed = make([]routing.Key, n)
		for i := range e.Removed {
			e.Removed[i] = routing.Key(binary.BigEndian.Uint32(v[1+w+4*i:]))
		}
		v = v[w+4*int(n):] // the kind byte stays at v[0]
	}
	n, w := binary.Uvarint(v[1:])
	if w <= 0 || uint64(len(v)-1-w) < n {
		return LogEntry{}, fmt.Errorf("storage: corrupt log entry %x", k)
	}
	dk := v[1+w : 1+w+int(n)]
	if e.Op.Kind == OpNoop {
		return e, nil
	}
	var err error
	if e.Op.Root, e.Op.Key, e.Op.ID, err = DecodeDocKey(dk); err != nil {
		return LogEntry{}, err
	}
	if e.Op.Kind == OpIndex {
		var src []byte
		if _, e.Op.Routing, src, err = decodeDocValue(v[1+w+int(n):]); err != nil {
			return LogEntry{}, err
		}
		e.Op.Source = append([]byte(nil), src...)
	}
	return e, nil
}
