package plog

import (
	"encoding/binary"
	"math/bits"
)

// murmur32 is MurmurHash3 x86 32-bit with seed 0, the checksum of version 0
// fragmented messages. It is written here rather than taken from
// github.com/spaolacci/murmur3 because that implementation walks the input with
// uintptr arithmetic, which the race detector's pointer checks reject, and reads
// words in the machine's byte order; this one reads little-endian words as the
// algorithm specifies. A test checks both agree.
func murmur32(data []byte) uint32 {
	const (
		c1 = 0xcc9e2d51
		c2 = 0x1b873593
	)
	var h uint32
	n := len(data) &^ 3
	for i := 0; i < n; i += 4 {
		k := binary.LittleEndian.Uint32(data[i:])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	switch tail := data[n:]; len(tail) {
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
	h ^= uint32(len(data)) //nolint:gosec // G115: murmur3 mixes in the length modulo 2^32, as the reference does
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}
