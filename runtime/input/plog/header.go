package plog

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// Wire constants of protocol version 0.
const (
	headerLen = 24

	packetCommand  = 0x00
	packetFragment = 0x01

	// maxMessageLen is the largest total length a header may announce: the seed
	// asks for a signed 32-bit value below 2,147,483,647.
	maxMessageLen = math.MaxInt32 - 1

	sizeBuckets  = 32 // log2(message size - 1) of a 31-bit size
	indexBuckets = 17 // log2 of a 16-bit fragment index (0 has its own bucket)
)

// header is the fixed part of a version 0 fragment (packet type 01):
//
//	off len  field
//	 0   1   version (0)
//	 1   1   packet type (1)
//	 2   2   fragment count, uint16 BE, 1..65535
//	 4   2   fragment index, uint16 BE, 0..count-1
//	 6   2   fragment size (payload bytes of every fragment but the last), uint16 BE;
//	         a tagged message may have a last fragment with tags and no payload
//	 8   4   message id (second half of the identifier; the first is the client port), uint32 BE
//	12   4   message length, int32 BE, 0..2147483646
//	16   4   MurmurHash3 x86 32-bit (seed 0) of the whole message, uint32 BE
//	20   2   tag length, uint16 BE
//	22   2   reserved, must be zero
//	24   -   tags (tag length bytes, \0-separated), then the payload of this fragment
type header struct {
	count    int // fragment count
	index    int
	fragSize int
	id       uint32
	length   int // total message length
	checksum uint32
	tagLen   int
}

// parseHeader validates every field of a fragment datagram and splits it into
// header, tag bytes and payload. It allocates nothing, not even
// for an error; tags and payload alias d.
//
// A datagram whose payload length disagrees with the header is not rejected here:
// the seed counts that as an invalid fragment (see defrag.add), not as a header
// that could not be parsed.
func parseHeader(d []byte) (h header, tags, payload []byte, err error) {
	if len(d) < headerLen {
		return h, nil, nil, ErrShortHeader
	}
	if d[0] != 0 || d[1] != packetFragment {
		return h, nil, nil, errNotFragment
	}
	h.count = int(binary.BigEndian.Uint16(d[2:4]))
	h.index = int(binary.BigEndian.Uint16(d[4:6]))
	h.fragSize = int(binary.BigEndian.Uint16(d[6:8]))
	h.id = binary.BigEndian.Uint32(d[8:12])
	length := int32(binary.BigEndian.Uint32(d[12:16]))
	h.checksum = binary.BigEndian.Uint32(d[16:20])
	h.tagLen = int(binary.BigEndian.Uint16(d[20:22]))
	h.length = int(length)

	switch {
	case h.count == 0:
		return h, nil, nil, errCountZero
	case h.index >= h.count:
		return h, nil, nil, errIndexPastCount
	case length < 0 || length > maxMessageLen:
		return h, nil, nil, errLengthRange
	case d[22] != 0 || d[23] != 0:
		return h, nil, nil, errReserved
	case headerLen+h.tagLen > len(d):
		return h, nil, nil, errTagLength
	}
	// The three sizes must describe one message: count fragments of fragSize
	// bytes, the last one holding what remains (at least one byte when count > 1).
	// One exception: the original client counts the tags into the last
	// fragment's room, so a tagged message whose length is a whole number of
	// fragments gets a last fragment holding only its tags. Its length is then
	// exactly (count-1)·size; the last fragment must carry tags, the others
	// (which never do) are accepted so that the message can complete.
	if h.count == 1 {
		if h.length > h.fragSize && h.fragSize != 0 {
			return h, nil, nil, errSizes
		}
	} else {
		if h.fragSize == 0 {
			return h, nil, nil, errFragSizeZero
		}
		full := (h.count - 1) * h.fragSize
		switch {
		case h.length > full+h.fragSize, h.length < full:
			return h, nil, nil, errSizes
		case h.length == full && h.index == h.count-1 && h.tagLen == 0:
			return h, nil, nil, errSizes
		}
	}
	tags = d[headerLen : headerLen+h.tagLen]
	payload = d[headerLen+h.tagLen:]
	return h, tags, payload, nil
}

// expectedPayload is the payload length fragment index must carry under h.
func (h *header) expectedPayload(index int) int {
	if index < h.count-1 {
		return h.fragSize
	}
	return h.length - (h.count-1)*h.fragSize
}

// appendHeader writes a version 0 fragment header (the client side).
func appendHeader(dst []byte, h header) []byte {
	dst = append(dst, 0, packetFragment)
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.count))    //nolint:gosec // G115: the client splits into at most 65535 fragments
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.index))    //nolint:gosec // G115: an index below count
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.fragSize)) //nolint:gosec // G115: a fragment fits a datagram
	dst = binary.BigEndian.AppendUint32(dst, h.id)
	dst = binary.BigEndian.AppendUint32(dst, uint32(int32(h.length))) //nolint:gosec // G115: the protocol's signed 32-bit length, as the reference client writes it
	dst = binary.BigEndian.AppendUint32(dst, h.checksum)
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.tagLen)) //nolint:gosec // G115: the tag is cut to the protocol's uint16 length
	return append(dst, 0, 0)
}

// splitTags reads the \0-separated tag list; empty entries (a trailing \0, or
// \0\0) are skipped.
func splitTags(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	var tags []string
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		if i > 0 {
			tags = append(tags, string(b[:i]))
		}
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return tags
}

// indexBucket clusters a fragment index by log2: 0, 1, 2-3, 4-7, ...
func indexBucket(index int) int { return bits.Len16(uint16(index)) } //nolint:gosec // G115: an index read from a uint16 field

// sizeBucket clusters a message length by log2(length-1); lengths 0 and 1 share
// bucket 0.
func sizeBucket(length int) int {
	if length <= 1 {
		return 0
	}
	return bits.Len32(uint32(length - 1)) //nolint:gosec // G115: a length read from a 32-bit field
}

// countBucket clusters a fragment count by log2(count-1).
func countBucket(count int) int {
	if count <= 1 {
		return 0
	}
	return bits.Len16(uint16(count - 1)) //nolint:gosec // G115: a count read from a uint16 field
}
