package plog

import (
	"net/netip"
	"time"
)

// entryOverhead is what one pending message is charged on top of its payload
// buffer and bitmap: the map entry, the struct and the tag strings' headers.
const entryOverhead = 160

// recentCap is how many completed message keys the defragmenter remembers, so
// that a late duplicate of a completed message is recognised instead of opening
// an entry that could only be evicted.
const recentCap = 4096

type msgKey struct {
	from netip.AddrPort
	id   uint32
}

type pending struct {
	key        msgKey
	h          header
	buf        []byte
	got        []uint64 // one bit per fragment
	received   int
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
		cost := int64(h.length) + int64((h.count+63)/64*8) + entryOverhead
		if cost > d.maxBytes {
			// parseFragment rejects these first; kept as a guard.
			d.st.v0InvalidHeader.Add(1)
			return completed{}, false
		}
		d.expire(now)
		for d.bytes+cost > d.maxBytes && d.head != nil {
			d.evict(d.head)
		}
		p = &pending{
			key:  key,
			h:    h,
			buf:  make([]byte, h.length),
			got:  make([]uint64, (h.count+63)/64),
			cost: cost,
			born: now,
		}
		d.m[key] = p
		d.push(p)
	} else {
		d.st.cacheHits.Add(1)
		if h.count != p.h.count || h.fragSize != p.h.fragSize || h.length != p.h.length || h.checksum != p.h.checksum ||
			len(payload) != p.h.expectedPayload(h.index) {
			d.st.v0InvalidFragments[sizeBucket(p.h.length)][indexBucket(h.index)].Add(1)
			return completed{}, false
		}
		if p.got[h.index/64]&(1<<(h.index%64)) != 0 {
			d.st.v0DuplicateFrags.Add(1)
			return completed{}, false
		}
	}

	copy(p.buf[h.index*p.h.fragSize:], payload)
	p.got[h.index/64] |= 1 << (h.index % 64)
	p.received++
	if len(tagBytes) > 0 {
		// Tags of the last processed fragment that carries any win.
		tags := splitTags(tagBytes)
		d.charge(p, tagCost(tags)-tagCost(p.tags))
		p.tags = tags
	}
	if p.received < p.h.count {
		return completed{}, false
	}
	d.remove(p)
	d.remember(key)
	if murmur32(p.buf) != p.h.checksum {
		d.st.v0InvalidChecksum[countBucket(p.h.count)].Add(1)
		return completed{}, false
	}
	return completed{body: p.buf, tags: p.tags}, true
}

func tagCost(tags []string) int64 {
	var n int64
	for _, t := range tags {
		n += int64(len(t)) + 16
	}
	return n
}

func (d *defrag) charge(p *pending, delta int64) {
	p.cost += delta
	d.bytes += delta
	d.st.defragBytes.Add(delta)
}

// expire evicts every entry older than maxAge.
func (d *defrag) expire(now time.Time) {
	for d.head != nil && now.Sub(d.head.born) > d.maxAge {
		d.evict(d.head)
	}
}

// evict drops an incomplete message and counts each fragment it still lacked.
func (d *defrag) evict(p *pending) {
	d.st.cacheEvictions.Add(1)
	sb := sizeBucket(p.h.length)
	for i := 0; i < p.h.count; i++ {
		if p.got[i/64]&(1<<(i%64)) == 0 {
			d.st.droppedFragments[sb][indexBucket(i)].Add(1)
		}
	}
	d.remove(p)
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
	d.st.defragBytes.Add(p.cost)
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
	d.st.defragBytes.Add(-p.cost)
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
