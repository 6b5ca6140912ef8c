package routing

import (
	"encoding/binary"

	"github.com/twmb/murmur3"
)

// hashStackUnits is the number of UTF-16 code units Hash encodes on the
// stack. An _id is at most 512 UTF-8 bytes (MaxIDBytes), which is at most 512
// code units, so every valid _id hashes without allocating. Longer routing
// values fall back to a heap buffer.
const hashStackUnits = MaxIDBytes

// hashShortUnits is the length up to which Hash uses a small stack buffer.
// Zeroing a 1 KiB buffer costs more than hashing a typical 20-byte id, so
// short strings get their own path.
const hashShortUnits = 32

// Hash returns OpenSearch's routing hash of s: murmur3 x86_32 with seed 0
// over the UTF-16 code units of s written little-endian (a character outside
// the Basic Multilingual Plane becomes a surrogate pair), read as a signed
// Java int. It matches Murmur3HashFunction.hash(String).
//
// Invalid UTF-8 in s is encoded as U+FFFD, as Go's range loop decodes it.
// Java strings can hold lone surrogates that a Go string cannot; only a
// JSON/HTTP boundary can tell the difference.
//
// Hash does not allocate for strings of at most hashStackUnits code units.
func Hash(s string) int32 {
	if len(s) <= hashShortUnits { // n UTF-8 bytes are at most n code units
		var buf [2 * hashShortUnits]byte
		return int32(murmur3.SeedSum32(0, buf[:encodeUTF16LE(buf[:], s)]))
	}
	return hashLong(s)
}

// hashLong hashes strings longer than hashShortUnits bytes.
//
//go:noinline
func hashLong(s string) int32 {
	var stack [2 * hashStackUnits]byte
	buf := stack[:]
	if len(s) > hashStackUnits && utf16Len(s) > hashStackUnits {
		buf = make([]byte, 2*len(s)) // len(s) bytes are at most len(s) code units
	}
	return int32(murmur3.SeedSum32(0, buf[:encodeUTF16LE(buf, s)]))
}

// encodeUTF16LE writes the UTF-16LE encoding of s to buf, which must hold
// 2*utf16Len(s) bytes, and returns the number of bytes written. ASCII takes
// a byte loop; anything else falls back to decoding runes.
func encodeUTF16LE(buf []byte, s string) int {
	n, i := 0, 0
	// Four ASCII characters at a time: one 8-byte store.
	for ; i+4 <= len(s); i += 4 {
		c0, c1, c2, c3 := s[i], s[i+1], s[i+2], s[i+3]
		if (c0|c1|c2|c3)&0x80 != 0 {
			break
		}
		binary.LittleEndian.PutUint64(buf[n:], uint64(c0)|uint64(c1)<<16|uint64(c2)<<32|uint64(c3)<<48)
		n += 8
	}
	for ; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return n + encodeRunes(buf[n:], s[i:])
		}
		buf[n], buf[n+1] = c, 0
		n += 2
	}
	return n
}

func encodeRunes(buf []byte, s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			hi := 0xD800 + (r>>10)&0x3FF
			lo := 0xDC00 + r&0x3FF
			buf[n], buf[n+1], buf[n+2], buf[n+3] = byte(hi), byte(hi>>8), byte(lo), byte(lo>>8)
			n += 4
			continue
		}
		buf[n], buf[n+1] = byte(r), byte(r>>8)
		n += 2
	}
	return n
}

// appendUTF16LE appends the UTF-16LE encoding of s to buf.
func appendUTF16LE(buf []byte, s string) []byte {
	n := len(buf)
	buf = append(buf, make([]byte, 2*utf16Len(s))...)
	return buf[:n+encodeUTF16LE(buf[n:], s)]
}

// utf16Len returns the number of UTF-16 code units in s.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r >= 0x10000 {
			n++
		}
	}
	return n
}
