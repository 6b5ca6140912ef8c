package routing

import "github.com/twmb/murmur3"

// hashStackUnits is the number of UTF-16 code units Hash encodes on the
// stack. An _id is at most 512 UTF-8 bytes (MaxIDBytes), which is at most 512
// code units, so every valid _id hashes without allocating. Longer routing
// values fall back to a heap buffer.
const hashStackUnits = MaxIDBytes

// hashSpareBytes is spare capacity kept past the encoded bytes. It is a
// leftover guard from spaolacci/murmur3 v1.1.0, whose uintptr walk aborts
// under -race (checkptr); it is harmless with twmb/murmur3, which indexes
// its input safely (see DESIGN.md, "murmur3 library").
const hashSpareBytes = 8

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
	var stack [2*hashStackUnits + hashSpareBytes]byte
	buf := stack[:0]
	if len(s) > hashStackUnits {
		// A UTF-8 string of n bytes has at most n UTF-16 code units.
		if utf16Len(s) > hashStackUnits {
			buf = make([]byte, 0, 2*len(s)+hashSpareBytes)
		}
	}
	buf = appendUTF16LE(buf, s)
	return int32(murmur3.SeedSum32(0, buf))
}

// appendUTF16LE appends the UTF-16LE encoding of s to buf.
func appendUTF16LE(buf []byte, s string) []byte {
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			hi := 0xD800 + (r>>10)&0x3FF
			lo := 0xDC00 + r&0x3FF
			buf = append(buf, byte(hi), byte(hi>>8), byte(lo), byte(lo>>8))
			continue
		}
		buf = append(buf, byte(r), byte(r>>8))
	}
	return buf
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
