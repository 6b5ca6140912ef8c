package routing

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// The durable encoding of a Table. All integers are big-endian.
//
//	+--------+---------+------+---------+---------+--------+---------+---------+---------+
//	| "SSRT" | fmt u16 | mode | version | shards  | R      | P       | maxID   | nroots  |
//	| 4      | 2       | u8   | u64     | u32     | u32    | u32     | u32     | u32     |
//	+--------+---------+------+---------+---------+--------+---------+---------+---------+
//	per root:  nleaves u32, then per leaf: shard u32, start u64, end u64
//	nsplits u32, per split: parent u32, root u32, inprogress u8, nchildren u32, children as leaves
//	nmerges u32, per merge: target u32, root u32, inprogress u8, nsources u32, sources as leaves  (format 2)
//	crc32c u32 of every byte before it
//
// The magic and format version are part of the format and must not change;
// a new layout gets a new format version. Format 1 (before merges) has no
// merge section; Decode still reads it, Encode writes format 2.
const (
	tableMagic          = "SSRT"
	tableFormatVersion  = 2
	tableFormatNoMerges = 1 // the format before merges
	tableHeaderLen      = 4 + 2 + 1 + 8 + 4*5
	leafLen             = 4 + 8 + 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode returns the durable encoding of t.
func (t *Table) Encode() []byte {
	b := make([]byte, 0, 256)
	b = append(b, tableMagic...)
	b = binary.BigEndian.AppendUint16(b, tableFormatVersion)
	b = append(b, byte(t.mode))
	b = binary.BigEndian.AppendUint64(b, uint64(t.version))
	for _, v := range []int{t.settings.Shards, t.settings.RoutingShards, t.settings.PartitionSize, int(t.maxShard), len(t.roots)} {
		b = binary.BigEndian.AppendUint32(b, uint32(v))
	}
	for _, leaves := range t.roots {
		b = appendLeaves(b, leaves)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(t.splits)))
	for _, s := range t.splits {
		b = binary.BigEndian.AppendUint32(b, uint32(s.Parent))
		b = binary.BigEndian.AppendUint32(b, uint32(s.Root))
		var ip byte
		if s.InProgress {
			ip = 1
		}
		b = append(b, ip)
		b = appendLeaves(b, s.Children)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(t.merges)))
	for _, m := range t.merges {
		b = binary.BigEndian.AppendUint32(b, uint32(m.Target))
		b = binary.BigEndian.AppendUint32(b, uint32(m.Root))
		var ip byte
		if m.InProgress {
			ip = 1
		}
		b = append(b, ip)
		b = appendLeaves(b, m.Sources)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendLeaves(b []byte, leaves []Leaf) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(leaves)))
	for _, l := range leaves {
		b = binary.BigEndian.AppendUint32(b, uint32(l.Shard))
		b = binary.BigEndian.AppendUint64(b, l.Span.Start)
		b = binary.BigEndian.AppendUint64(b, l.Span.End)
	}
	return b
}

// Decode parses an encoding made by Encode. Truncation, a wrong magic or
// format version, a checksum mismatch and a table that fails Validate are
// all errors wrapping ErrCorruptTable.
func Decode(data []byte) (*Table, error) {
	if len(data) < tableHeaderLen+4 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the %d-byte minimum", ErrCorruptTable, len(data), tableHeaderLen+4)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if string(body[:4]) != tableMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorruptTable, body[:4])
	}
	format := binary.BigEndian.Uint16(body[4:])
	if format != tableFormatVersion && format != tableFormatNoMerges {
		return nil, fmt.Errorf("%w: format version %d, this build reads %d and %d", ErrCorruptTable, format, tableFormatNoMerges, tableFormatVersion)
	}
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: checksum %08x, stored %08x", ErrCorruptTable, got, sum)
	}
	t, err := decodeBody(&byteReader{b: body[6:]}, format)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptTable, err)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptTable, err)
	}
	return t, nil
}

func decodeBody(r *byteReader, format uint16) (*Table, error) {
	t := &Table{mode: Mode(r.u8()), version: Version(r.u64())}
	t.settings = Settings{Shards: int(r.u32()), RoutingShards: int(r.u32()), PartitionSize: int(r.u32())}
	t.maxShard = ShardID(r.u32())
	nroots := r.count(4)
	if nroots > MaxShards {
		return nil, fmt.Errorf("%d roots", nroots)
	}
	t.roots = make([][]Leaf, nroots)
	for i := range t.roots {
		t.roots[i] = r.leaves()
	}
	nsplits := r.count(4 + 4 + 1 + 4)
	for range nsplits {
		s := SplitRecord{Parent: ShardID(r.u32()), Root: ShardID(r.u32()), InProgress: r.u8() == 1}
		s.Children = r.leaves()
		t.splits = append(t.splits, s)
	}
	if format >= 2 {
		nmerges := r.count(4 + 4 + 1 + 4)
		for range nmerges {
			m := MergeRecord{Target: ShardID(r.u32()), Root: ShardID(r.u32())}
			switch ip := r.u8(); ip {
			case 0:
			case 1:
				m.InProgress = true
			default:
				r.fail(fmt.Errorf("merge into %d: in-progress byte %d", m.Target, ip))
			}
			m.Sources = r.leaves()
			t.merges = append(t.merges, m)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	if t.mode != ModePartition && t.mode != ModeOpenSearch {
		return nil, fmt.Errorf("unknown mode %d", t.mode)
	}
	return t, nil
}

// byteReader reads big-endian values; the first error sticks.
type byteReader struct {
	b   []byte
	err error
}

func (r *byteReader) take(n int) []byte {
	if r.err != nil {
		return make([]byte, n)
	}
	if len(r.b) < n {
		r.err = fmt.Errorf("truncated: want %d bytes, have %d", n, len(r.b))
		return make([]byte, n)
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *byteReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *byteReader) u8() uint8   { return r.take(1)[0] }
func (r *byteReader) u32() uint32 { return binary.BigEndian.Uint32(r.take(4)) }
func (r *byteReader) u64() uint64 { return binary.BigEndian.Uint64(r.take(8)) }

// count reads a u32 element count and checks that that many elements of at
// least elemLen bytes could follow, so corrupt counts cannot allocate.
func (r *byteReader) count(elemLen int) int {
	n := int(r.u32())
	if r.err == nil && n > len(r.b)/elemLen {
		r.err = fmt.Errorf("count %d exceeds the %d bytes left", n, len(r.b))
		return 0
	}
	return n
}

func (r *byteReader) leaves() []Leaf {
	n := r.count(leafLen)
	leaves := make([]Leaf, n)
	for i := range leaves {
		leaves[i] = Leaf{Shard: ShardID(r.u32()), Span: Span{Start: r.u64(), End: r.u64()}}
	}
	return leaves
}
