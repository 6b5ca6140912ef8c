package routing

import (
	"encoding/binary"
	"math/bits"
	"strings"
	"testing"
	"unicode/utf16"
)

// referenceMurmur3 is murmur3 x86_32 written from the algorithm's
// description with no unsafe code, to check Hash on inputs the golden
// vectors do not cover.
func referenceMurmur3(data []byte, seed uint32) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	h := seed
	n := len(data) / 4
	for i := range n {
		k := binary.LittleEndian.Uint32(data[4*i:])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	tail := data[4*n:]
	switch len(tail) {
	case 3:
		k ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(tail[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(len(data))
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// referenceHash encodes with the standard library's UTF-16 encoder.
func referenceHash(s string) int32 {
	units := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(units))
	for i, u := range units {
		binary.LittleEndian.PutUint16(b[2*i:], u)
	}
	return int32(referenceMurmur3(b, 0))
}

// TestHashEveryLength hashes strings of every length 0..1100 characters,
// ASCII and mixed with non-BMP characters, and compares with the reference.
// Under -race this is the regression test for spaolacci/murmur3's checkptr
// abort: an input ending exactly at the end of its allocation would kill the
// test binary. Lengths above hashStackUnits exercise the heap path.
func TestHashEveryLength(t *testing.T) {
	alphabets := []string{"a", "é", "漢", "😀", "ab😀c"}
	for _, alpha := range alphabets {
		var sb strings.Builder
		runes := []rune(alpha)
		for n := 0; n <= 1100; n++ {
			s := sb.String()
			if got, want := Hash(s), referenceHash(s); got != want {
				t.Fatalf("Hash(%d chars of %q) = %d, want %d", n, alpha, got, want)
			}
			sb.WriteRune(runes[n%len(runes)])
		}
	}
}

// TestHashNoAllocs checks the stack-buffer promise: no allocation for ids up
// to MaxIDBytes, including the longest non-BMP id that fits.
func TestHashNoAllocs(t *testing.T) {
	ids := []string{
		"user-42",
		strings.Repeat("x", MaxIDBytes),
		strings.Repeat("😀", MaxIDBytes/4), // 512 UTF-8 bytes, 256 surrogate pairs
		strings.Repeat("é", MaxIDBytes/2),
	}
	for _, id := range ids {
		if n := testing.AllocsPerRun(100, func() { Hash(id) }); n != 0 {
			t.Errorf("Hash(%d-byte id) allocates %.0f times, want 0", len(id), n)
		}
	}
}

func TestUTF16Encoding(t *testing.T) {
	for _, s := range []string{"", "a", "😀", "a😀b", "\U0010FFFF", "\uFFFF", "日本"} {
		got := appendUTF16LE(nil, s)
		units := utf16.Encode([]rune(s))
		if len(got) != 2*len(units) || utf16Len(s) != len(units) {
			t.Fatalf("appendUTF16LE(%q) has %d bytes, want %d", s, len(got), 2*len(units))
		}
		for i, u := range units {
			if binary.LittleEndian.Uint16(got[2*i:]) != u {
				t.Errorf("appendUTF16LE(%q) unit %d = %#x, want %#x", s, i, binary.LittleEndian.Uint16(got[2*i:]), u)
			}
		}
	}
}

func TestPlaceWrapsLikeJava(t *testing.T) {
	// derived.json's int32-overflow case: hash(routing) 2147483603 plus
	// offset 254 wraps; R=768 is not a power of two, so widening to int64
	// would give shard 2 instead of 1.
	s := Settings{Shards: 3, RoutingShards: 768, PartitionSize: 255}
	p := s.placeHash(2147483603, 254)
	if p.Sum != -2147483439 || p.Root != 1 {
		t.Errorf("placeHash(2147483603, 254) = %+v, want sum -2147483439 root 1", p)
	}
	got := s.Place("id302", "r8868765")
	if got.Hash != 2147483603 || got.Root != 1 {
		t.Errorf("Place(id302, r8868765) = %+v, want hash 2147483603 root 1", got)
	}
}

func TestPlaceUser42(t *testing.T) {
	s, err := NewSettings("i", 8, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := s.Place("user-42", "")
	if p.Hash != -1591625367 || p.Partition != 361 || p.Root != 2 {
		t.Errorf("Place(user-42) = %+v, want hash -1591625367 partition 361 root 2", p)
	}
	if q := s.Place("user-42", ""); q != p {
		t.Errorf("empty routing must route by id: %+v vs %+v", q, p)
	}
}

func TestValidateID(t *testing.T) {
	tests := []struct {
		name string
		id   string
		ok   bool
	}{
		{"empty", "", false},
		{"512 bytes", strings.Repeat("a", 512), true},
		{"513 bytes", strings.Repeat("a", 513), false},
		{"512 bytes of 2-byte chars", strings.Repeat("é", 256), true},
		{"514 bytes of 2-byte chars", strings.Repeat("é", 257), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateID(tt.id)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateID(%d bytes) = %v, want ok=%v", len(tt.id), err, tt.ok)
			}
			if err != nil && ExceptionOf(err) != IllegalArgument {
				t.Errorf("ValidateID: exception %v, want IllegalArgumentException", ExceptionOf(err))
			}
		})
	}
}

func TestNewSettingsPartitionAgainstRoutingShards(t *testing.T) {
	// 5 shards with partition size 6 passes at index creation because the
	// check is against routing_num_shards (640), not number_of_shards.
	if _, err := NewSettings("i", 5, 0, 6); err != nil {
		t.Errorf("NewSettings(5, default, 6) = %v, want ok", err)
	}
	_, err := NewSettings("i", 5, 5, 6)
	want := "routing partition size [6] should be a positive number less than the number of shards [5] for [i]"
	if err == nil || err.Error() != want {
		t.Errorf("NewSettings(5, 5, 6) = %v, want %q", err, want)
	}
	if _, err := NewSettings("i", 1025, 0, 1); ExceptionOf(err) != IllegalArgument {
		t.Errorf("NewSettings(1025) = %v, want IllegalArgumentException", err)
	}
}
