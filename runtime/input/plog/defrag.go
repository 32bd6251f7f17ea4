package plog

import (
	"net/netip"
	"time"
)

// entryOverhead is what one pending message is charged on top of its buffers:
// the map entry, the struct and the tag strings' headers.
const entryOverhead = 160

// recentCap is how many completed message keys the defragmenter remembers, so
// that a late duplicate of a completed message is recognised instead of opening
// an entry that could only be evicted.
const recentCap = 4096

// bitmapAfter is how many fragments of a message must have arrived before it
// gets its bitmap of received fragments, for messages whose bitmap would be
// larger than bitmapAlways bytes: until then a duplicate is found by scanning
// the indices that arrived. A header announcing 65,535 fragments thus costs the
// bytes of the fragments sent, not the 8 KiB of a bitmap it claims.
const (
	bitmapAlways = 64
	bitmapAfter  = 256
)

type msgKey struct {
	from netip.AddrPort
	id   uint32
}

// pending is an incomplete message. Its fragments are kept as they arrive:
// their payloads one after the other in data, their indices in order. Both
// grow with what arrives, never past the message's length and fragment
// count, whatever a header announces; the message is assembled when its last
// fragment arrives.
type pending struct {
	key        msgKey
	h          header
	data       []byte   // payloads, in arrival order
	order      []uint16 // fragment index of each payload in data
	got        []uint64 // one bit per fragment; nil until bitmapAfter fragments for large counts
	tags       []string
	cost       int64
	born       time.Time
	prev, next *pending // age order, oldest first
}

// defrag reassembles fragmented messages. It is owned by one listener's reader
// goroutine and is not safe for concurrent use; its counters are atomics.
type defrag struct {
	maxBytes int64
	maxAge   time.Duration
	st       *stats

	m          map[msgKey]*pending
	head, tail *pending
	bytes      int64

	recent    map[msgKey]struct{}
	recentArr [recentCap]msgKey
	recentPos int
	recentLen int
}

func newDefrag(maxBytes int64, maxAge time.Duration, st *stats) *defrag {
	return &defrag{
		maxBytes: maxBytes,
		maxAge:   maxAge,
		st:       st,
		m:        make(map[msgKey]*pending),
		recent:   make(map[msgKey]struct{}),
	}
}

// bitmapBytes is the size of the bitmap of a message of count fragments.
func bitmapBytes(count int) int64 { return int64((count+63)/64) * 8 }

// maxCost is the most a message of header h can be charged before its tags:
// its length, two bytes and one bit per fragment, and the fixed overhead. A
// multi-fragment message whose maxCost exceeds the defragmenter's bound is
// refused at its header, before anything is allocated.
func (h *header) maxCost() int64 {
	return int64(h.length) + 2*int64(h.count) + bitmapBytes(h.count) + entryOverhead
}

// completed is a reassembled (or single-fragment) message with a valid checksum.
type completed struct {
	body []byte
	tags []string
}

// add handles one fragment whose header parseHeader accepted. It returns the
// message when this fragment completes it with a valid checksum. Every outcome
// is counted. Nothing is allocated until the fragment has been checked against
// the header and the bounds.
func (d *defrag) add(now time.Time, from netip.AddrPort, h header, tagBytes, payload []byte) (completed, bool) {
	d.st.v0Fragments[indexBucket(h.index)].Add(1)

	if h.count == 1 {
		if len(payload) != h.length {
			d.st.v0InvalidFragments[sizeBucket(h.length)][indexBucket(h.index)].Add(1)
			return completed{}, false
		}
		if murmur32(payload) != h.checksum {
			d.st.v0InvalidChecksum[countBucket(h.count)].Add(1)
			return completed{}, false
		}
		body := make([]byte, len(payload))
		copy(body, payload)
		return completed{body: body, tags: splitTags(tagBytes)}, true
	}

	key := msgKey{from: from, id: h.id}
	p, ok := d.m[key]
	if !ok {
		if _, done := d.recent[key]; done {
			d.st.v0DuplicateFrags.Add(1)
			return completed{}, false
		}
		d.st.cacheMisses.Add(1)
		if len(payload) != h.expectedPayload(h.index) {
			d.st.v0InvalidFragments[sizeBucket(h.length)][indexBucket(h.index)].Add(1)
			return completed{}, false
		}
		if h.maxCost() > d.maxBytes {
			// The UDP reader refuses these at the header; kept as a guard.
			d.st.v0InvalidHeader.Add(1)
			return completed{}, false
		}
		d.expire(now)
		p = &pending{key: key, h: h, born: now}
		if bitmapBytes(h.count) <= bitmapAlways {
			p.got = make([]uint64, (h.count+63)/64)
		}
		d.m[key] = p
		d.push(p)
		if !d.grow(p, entryOverhead+int64(len(p.got))*8) {
			return completed{}, false
		}
	} else {
		d.st.cacheHits.Add(1)
		if h.count != p.h.count || h.fragSize != p.h.fragSize || h.length != p.h.length || h.checksum != p.h.checksum ||
			len(payload) != p.h.expectedPayload(h.index) {
			d.st.v0InvalidFragments[sizeBucket(p.h.length)][indexBucket(h.index)].Add(1)
			return completed{}, false
		}
		if p.has(h.index) {
			d.st.v0DuplicateFrags.Add(1)
			return completed{}, false
		}
	}

	if !d.store(p, h.index, payload) {
		return completed{}, false // evicted: the bound cannot hold it beside its own tags
	}
	if len(tagBytes) > 0 {
		// Tags of the last processed fragment that carries any win.
		tags := splitTags(tagBytes)
		if !d.grow(p, tagCost(tags)-tagCost(p.tags)) {
			return completed{}, false
		}
		p.tags = tags
	}
	if len(p.order) < p.h.count {
		return completed{}, false
	}
	d.remove(p)
	d.remember(key)
	body := p.assemble()
	if murmur32(body) != p.h.checksum {
		d.st.v0InvalidChecksum[countBucket(p.h.count)].Add(1)
		return completed{}, false
	}
	return completed{body: body, tags: p.tags}, true
}

// has reports whether fragment index of p has arrived.
func (p *pending) has(index int) bool {
	if p.got != nil {
		return p.got[index/64]&(1<<(index%64)) != 0
	}
	for _, i := range p.order {
		if int(i) == index {
			return true
		}
	}
	return false
}

// store keeps one fragment's payload, growing p's buffers by what arrived
// (doubling, capped at the message's length and fragment count) and charging
// the growth. It reports false when p had to be evicted to respect the bound.
func (d *defrag) store(p *pending, index int, payload []byte) bool {
	var delta int64
	var data []byte
	if need := len(p.data) + len(payload); need > cap(p.data) {
		data = make([]byte, len(p.data), min(max(2*cap(p.data), need), p.h.length))
		copy(data, p.data)
		delta += int64(cap(data) - cap(p.data))
	}
	var order []uint16
	if need := len(p.order) + 1; need > cap(p.order) {
		order = make([]uint16, len(p.order), min(max(2*cap(p.order), need, 4), p.h.count))
		copy(order, p.order)
		delta += 2 * int64(cap(order)-cap(p.order))
	}
	var got []uint64
	if p.got == nil && len(p.order)+1 >= bitmapAfter {
		got = make([]uint64, (p.h.count+63)/64)
		for _, i := range p.order {
			got[i/64] |= 1 << (i % 64)
		}
		delta += int64(len(got)) * 8
	}
	if !d.grow(p, delta) {
		return false
	}
	if data != nil {
		p.data = data
	}
	if order != nil {
		p.order = order
	}
	if got != nil {
		p.got = got
	}
	p.data = append(p.data, payload...)
	p.order = append(p.order, uint16(index)) //nolint:gosec // G115: a fragment index is read from a uint16 field
	if p.got != nil {
		p.got[index/64] |= 1 << (index % 64)
	}
	return true
}

// assemble puts the payloads of a complete message in index order. Fragments
// that arrived in order are the message already.
func (p *pending) assemble() []byte {
	inOrder := true
	for n, i := range p.order {
		if int(i) != n {
			inOrder = false
			break
		}
	}
	if inOrder {
		return p.data
	}
	body := make([]byte, p.h.length)
	off := 0
	for _, i := range p.order {
		n := p.h.expectedPayload(int(i))
		copy(body[int(i)*p.h.fragSize:], p.data[off:off+n])
		off += n
	}
	return body
}

func tagCost(tags []string) int64 {
	var n int64
	for _, t := range tags {
		n += int64(len(t)) + 16
	}
	return n
}

// grow charges delta more bytes to p, evicting the oldest other entries
// until the total fits under the bound. When only p is left and it still does
// not fit, p itself is evicted and grow reports false.
func (d *defrag) grow(p *pending, delta int64) bool {
	for d.bytes+delta > d.maxBytes {
		victim := d.head
		if victim == p {
			victim = p.next
		}
		if victim == nil {
			d.evict(p)
			return false
		}
		d.evict(victim)
	}
	p.cost += delta
	d.bytes += delta
	d.st.defragBytes.add(delta)
	return true
}

// expire evicts every entry older than maxAge.
func (d *defrag) expire(now time.Time) {
	for d.head != nil && now.Sub(d.head.born) > d.maxAge {
		d.evict(d.head)
	}
}

// evict drops an incomplete message and counts each fragment it still lacked,
// by size and index bucket: every index of the message, less those that
// arrived.
func (d *defrag) evict(p *pending) {
	d.st.cacheEvictions.Add(1)
	sb := sizeBucket(p.h.length)
	var lacking [indexBuckets]int64
	for b := range lacking {
		lacking[b] = indicesInBucket(b, p.h.count)
	}
	for _, i := range p.order {
		lacking[indexBucket(int(i))]--
	}
	for b, n := range lacking {
		if n > 0 {
			d.st.droppedFragments[sb][b].Add(uint64(n))
		}
	}
	d.remove(p)
}

// indicesInBucket is how many of the indices 0..count-1 fall in index bucket
// b (bucket 0: index 0; bucket b: 2^(b-1) to 2^b-1).
func indicesInBucket(b, count int) int64 {
	if b == 0 {
		return int64(min(count, 1))
	}
	lo, hi := 1<<(b-1), 1<<b
	return int64(max(0, min(count, hi)-lo))
}

func (d *defrag) push(p *pending) {
	p.prev = d.tail
	if d.tail != nil {
		d.tail.next = p
	} else {
		d.head = p
	}
	d.tail = p
	d.bytes += p.cost
	d.st.defragBytes.add(p.cost)
	d.st.defragMessages.Add(1)
}

func (d *defrag) remove(p *pending) {
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		d.head = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		d.tail = p.prev
	}
	p.prev, p.next = nil, nil
	delete(d.m, p.key)
	d.bytes -= p.cost
	d.st.defragBytes.add(-p.cost)
	d.st.defragMessages.Add(-1)
}

func (d *defrag) remember(k msgKey) {
	if d.recentLen == recentCap {
		delete(d.recent, d.recentArr[d.recentPos])
	} else {
		d.recentLen++
	}
	d.recentArr[d.recentPos] = k
	d.recentPos = (d.recentPos + 1) % recentCap
	d.recent[k] = struct{}{}
}

// drop empties the defragmenter at shutdown; what was pending is counted as
// evicted.
func (d *defrag) drop() {
	for d.head != nil {
		d.evict(d.head)
	}
}
