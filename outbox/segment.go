package outbox

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/klauspost/compress/s2"
)

// A segment is the value stored under one event key: the events of one
// Append (or of one part of a large Append), compressed together.
//
//	[0]       format (segmentFormat)
//	[1:9]     append time, unix nanoseconds, big-endian
//	uvarint   count of events
//	uvarint   length of each event, count times
//	rest      S2 block of the events concatenated
//
// The lengths sit outside the compressed block so that counting depth and
// bytes (at Open, in Delete) never decompresses.
const (
	segmentFormat = 1

	// segmentMaxEvents and segmentMaxBytes bound one segment; a larger
	// Append is cut into several, so that reading the head of the outbox
	// never decompresses much more than a batch of the sender.
	segmentMaxEvents = 1024
	segmentMaxBytes  = 256 << 10
)

// maxEventLen bounds one length read back from a header (the pipeline keeps
// events far smaller); the decompressed length is checked against the sum.
const maxEventLen = 1 << 30

// segment is a decoded segment header.
type segment struct {
	first uint64 // sequence of the first event (from the key)
	at    int64  // append time, unix ns
	lens  []int  // length of each event
	block []byte // the compressed events (aliases the value)
	total int64  // sum of lens
}

func (s *segment) last() uint64 { return s.first + uint64(len(s.lens)) - 1 }

// bytesFrom is the size of the events with sequence >= seq.
func (s *segment) bytesFrom(seq uint64) int64 {
	if seq <= s.first {
		return s.total
	}
	var n int64
	for i := seq - s.first; i < uint64(len(s.lens)); i++ {
		n += int64(s.lens[i])
	}
	return n
}

// bytesBetween is the size of the events with from <= sequence < to.
func (s *segment) bytesBetween(from, to uint64) int64 {
	return s.bytesFrom(from) - s.bytesFrom(to)
}

// appendSegment appends the segment of events to dst (its value is
// dst[len(dst):] of the result), gathering the raw events in scratch first;
// both are returned for reuse.
func appendSegment(dst []byte, at int64, events [][]byte, scratch []byte) (out, raw []byte) {
	dst = append(dst, segmentFormat)
	dst = binary.BigEndian.AppendUint64(dst, uint64(at))
	dst = binary.AppendUvarint(dst, uint64(len(events)))
	raw = scratch[:0]
	for _, ev := range events {
		dst = binary.AppendUvarint(dst, uint64(len(ev)))
		raw = append(raw, ev...)
	}
	n := len(dst)
	dst = slices.Grow(dst, s2.MaxEncodedLen(len(raw)))
	enc := s2.Encode(dst[n:cap(dst)], raw)
	return dst[:n+len(enc)], raw
}

// parseSegment reads the header of a segment stored under sequence first.
// lens is reused when it has room.
func parseSegment(first uint64, v []byte, lens []int) (segment, error) {
	s := segment{first: first}
	if len(v) < 9 || v[0] != segmentFormat {
		return s, fmt.Errorf("%w: event %d: format or length", errSegment, first)
	}
	s.at = int64(binary.BigEndian.Uint64(v[1:9]))
	p := v[9:]
	count, k := binary.Uvarint(p)
	if k <= 0 || count == 0 || count > uint64(len(p)) {
		return s, fmt.Errorf("%w: event %d: count", errSegment, first)
	}
	p = p[k:]
	s.lens = lens[:0]
	for range count {
		l, k := binary.Uvarint(p)
		if k <= 0 || l > maxEventLen {
			return s, fmt.Errorf("%w: event %d: lengths", errSegment, first)
		}
		p = p[k:]
		s.lens = append(s.lens, int(l))
		s.total += int64(l)
	}
	s.block = p
	return s, nil
}

// events decompresses the segment and returns the events with sequence >=
// from, at most max of them. Each is its own slice of one fresh buffer (capped,
// so appending to one never overwrites the next).
func (s *segment) events(from uint64, max int, out [][]byte) ([][]byte, error) {
	n, err := s2.DecodedLen(s.block)
	if err != nil || int64(n) != s.total {
		return out, fmt.Errorf("%w: event %d: block length", errSegment, s.first)
	}
	buf, err := s2.Decode(make([]byte, n), s.block)
	if err != nil {
		return out, fmt.Errorf("%w: event %d: %w", errSegment, s.first, err)
	}
	off := 0
	for i, l := range s.lens {
		if max <= 0 {
			break
		}
		if s.first+uint64(i) >= from {
			out = append(out, buf[off:off+l:off+l])
			max--
		}
		off += l
	}
	return out, nil
}
