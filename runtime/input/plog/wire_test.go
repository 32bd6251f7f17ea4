package plog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// raw builds a fragment datagram byte by byte from the seed's table, independently
// of appendHeader.
type raw struct {
	version, typ    byte
	count, index    uint16
	fragSize        uint16
	id              uint32
	length          int32
	checksum        uint32
	tagLen          uint16
	reserved0, res1 byte
	tags, payload   []byte
}

func (r raw) bytes() []byte {
	b := make([]byte, 24, 24+len(r.tags)+len(r.payload))
	b[0], b[1] = r.version, r.typ
	binary.BigEndian.PutUint16(b[2:], r.count)
	binary.BigEndian.PutUint16(b[4:], r.index)
	binary.BigEndian.PutUint16(b[6:], r.fragSize)
	binary.BigEndian.PutUint32(b[8:], r.id)
	binary.BigEndian.PutUint32(b[12:], uint32(r.length))
	binary.BigEndian.PutUint32(b[16:], r.checksum)
	binary.BigEndian.PutUint16(b[20:], r.tagLen)
	b[22], b[23] = r.reserved0, r.res1
	return append(append(b, r.tags...), r.payload...)
}

// fragmentsOf splits msg by hand the way the seed describes.
func fragmentsOf(id uint32, msg []byte, fragSize int, tags []byte) []raw {
	count := (len(msg) + fragSize - 1) / fragSize
	if count == 0 {
		count = 1
	}
	sum := murmur32(msg)
	var out []raw
	for i := 0; i < count; i++ {
		end := min((i+1)*fragSize, len(msg))
		r := raw{typ: 1, count: uint16(count), index: uint16(i), fragSize: uint16(fragSize), id: id,
			length: int32(len(msg)), checksum: sum, payload: msg[i*fragSize : end]}
		if i == count-1 {
			r.tags, r.tagLen = tags, uint16(len(tags))
		}
		out = append(out, r)
	}
	return out
}

func TestParseHeaderLayout(t *testing.T) {
	r := raw{typ: 1, count: 3, index: 2, fragSize: 10, id: 0xdeadbeef, length: 25, checksum: 0x01020304,
		tagLen: 6, tags: []byte("kt:a\x00b"), payload: []byte("12345")}
	h, tags, payload, err := parseHeader(r.bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := header{count: 3, index: 2, fragSize: 10, id: 0xdeadbeef, length: 25, checksum: 0x01020304, tagLen: 6}
	if h != want {
		t.Fatalf("header %+v, want %+v", h, want)
	}
	if string(tags) != "kt:a\x00b" || string(payload) != "12345" {
		t.Fatalf("tags %q payload %q", tags, payload)
	}
	if got := appendHeader(nil, h); !bytes.Equal(got, r.bytes()[:24]) {
		t.Fatalf("appendHeader %x, want %x", got, r.bytes()[:24])
	}
	if h.expectedPayload(0) != 10 || h.expectedPayload(2) != 5 {
		t.Fatalf("expected payloads %d %d", h.expectedPayload(0), h.expectedPayload(2))
	}
}

func TestParseHeaderRejects(t *testing.T) {
	ok := raw{typ: 1, count: 2, index: 0, fragSize: 4, length: 6, payload: []byte("abcd")}
	cases := map[string]func(r *raw){
		"count zero":           func(r *raw) { r.count = 0 },
		"index past count":     func(r *raw) { r.index = 2 },
		"negative length":      func(r *raw) { r.length = -1 },
		"length max int32":     func(r *raw) { r.length = 2147483647 },
		"reserved byte 22":     func(r *raw) { r.reserved0 = 1 },
		"reserved byte 23":     func(r *raw) { r.res1 = 1 },
		"tags past datagram":   func(r *raw) { r.tagLen = 100 },
		"fragment size zero":   func(r *raw) { r.fragSize = 0 },
		"length too short":     func(r *raw) { r.length = 3 },
		"untagged empty last":  func(r *raw) { r.index = 1; r.length = 4; r.payload = nil },
		"length too long":      func(r *raw) { r.length = 9 },
		"absurd count":         func(r *raw) { r.count = 65535; r.length = 7 },
		"single over fragsize": func(r *raw) { r.count = 1; r.fragSize = 2 },
	}
	if _, _, _, err := parseHeader(ok.bytes()); err != nil {
		t.Fatalf("baseline rejected: %v", err)
	}
	for name, mutate := range cases {
		r := ok
		mutate(&r)
		if _, _, _, err := parseHeader(r.bytes()); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%s: err %v, want ErrBadHeader", name, err)
		}
	}
	for n := 0; n < 24; n++ {
		if _, _, _, err := parseHeader(ok.bytes()[:n]); !errors.Is(err, ErrShortHeader) {
			t.Errorf("%d bytes: err %v, want ErrShortHeader", n, err)
		}
	}
}

func TestSplitTags(t *testing.T) {
	cases := map[string][]string{
		"":                     nil,
		"kt:a":                 {"kt:a"},
		"kt:a\x00":             {"kt:a"},
		"kt:a\x00rk:b":         {"kt:a", "rk:b"},
		"\x00\x00kt:a\x00\x00": {"kt:a"},
	}
	for in, want := range cases {
		got := splitTags([]byte(in))
		if len(got) != len(want) {
			t.Errorf("%q: %q, want %q", in, got, want)
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%q: %q, want %q", in, got, want)
			}
		}
	}
}

func TestBuckets(t *testing.T) {
	for _, c := range []struct{ in, idx, size int }{
		{0, 0, 0}, {1, 1, 0}, {2, 2, 1}, {3, 2, 2}, {4, 3, 2}, {5, 3, 3}, {8, 4, 3}, {65534, 16, 16},
	} {
		if got := indexBucket(c.in); got != c.idx {
			t.Errorf("indexBucket(%d) = %d, want %d", c.in, got, c.idx)
		}
		if got := sizeBucket(c.in); got != c.size {
			t.Errorf("sizeBucket(%d) = %d, want %d", c.in, got, c.size)
		}
	}
	if sizeBucket(maxMessageLen) != sizeBuckets-1 || countBucket(65535) != indexBuckets-1 {
		t.Fatal("largest values fall outside the arrays")
	}
}

var (
	clientA = netip.MustParseAddrPort("127.0.0.1:40000")
	clientB = netip.MustParseAddrPort("127.0.0.1:40001")
)

// feed parses and adds one datagram, as the UDP reader does.
func feed(t *testing.T, d *defrag, now time.Time, from netip.AddrPort, r raw) (completed, bool) {
	t.Helper()
	h, tags, payload, err := parseHeader(r.bytes())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return d.add(now, from, h, tags, payload)
}

func newTestDefrag(maxBytes int64) (*defrag, *stats) {
	st := &stats{}
	return newDefrag(maxBytes, 10*time.Second, st), st
}

func TestDefragInOrderAndOutOfOrder(t *testing.T) {
	msg := bytes.Repeat([]byte("0123456789"), 100) // 1000 bytes
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 1, 0, 2}, {2, 3, 1, 0}} {
		d, st := newTestDefrag(1 << 20)
		frags := fragmentsOf(7, msg, 256, []byte("kt:x"))
		now := time.Now()
		var got completed
		var n int
		for _, i := range order {
			if c, ok := feed(t, d, now, clientA, frags[i]); ok {
				got = c
				n++
			}
		}
		if n != 1 || !bytes.Equal(got.body, msg) {
			t.Fatalf("order %v: %d messages, body ok=%v", order, n, bytes.Equal(got.body, msg))
		}
		if len(got.tags) != 1 || got.tags[0] != "kt:x" {
			t.Fatalf("order %v: tags %q", order, got.tags)
		}
		if st.cacheMisses.Load() != 1 || st.cacheHits.Load() != 3 {
			t.Fatalf("order %v: misses %d hits %d", order, st.cacheMisses.Load(), st.cacheHits.Load())
		}
		if d.bytes != 0 || len(d.m) != 0 || st.defragBytes.cur.Load() != 0 || st.defragMessages.Load() != 0 {
			t.Fatalf("order %v: defragmenter not empty: %d bytes, %d entries", order, d.bytes, len(d.m))
		}
		if st.v0Fragments[0].Load() != 1 || st.v0Fragments[1].Load() != 1 || st.v0Fragments[2].Load() != 2 {
			t.Fatalf("order %v: fragment buckets %d %d %d", order,
				st.v0Fragments[0].Load(), st.v0Fragments[1].Load(), st.v0Fragments[2].Load())
		}
	}
}

func TestDefragSingleFragment(t *testing.T) {
	d, st := newTestDefrag(1 << 20)
	msg := []byte(`{"event_type":"x"}`)
	c, ok := feed(t, d, time.Now(), clientA, fragmentsOf(1, msg, 1400, nil)[0])
	if !ok || !bytes.Equal(c.body, msg) {
		t.Fatalf("single fragment: ok=%v body %q", ok, c.body)
	}
	if st.cacheMisses.Load() != 0 || st.cacheHits.Load() != 0 || len(d.m) != 0 {
		t.Fatal("a single-fragment message touched the cache")
	}
	// Empty message.
	if c, ok := feed(t, d, time.Now(), clientA, fragmentsOf(2, nil, 1400, nil)[0]); !ok || len(c.body) != 0 {
		t.Fatalf("empty message: ok=%v", ok)
	}
}

func TestDefragDuplicates(t *testing.T) {
	d, st := newTestDefrag(1 << 20)
	msg := bytes.Repeat([]byte("ab"), 300)
	frags := fragmentsOf(9, msg, 200, nil)
	now := time.Now()
	feed(t, d, now, clientA, frags[0])
	feed(t, d, now, clientA, frags[0])
	feed(t, d, now, clientA, frags[1])
	c, ok := feed(t, d, now, clientA, frags[2])
	if !ok || !bytes.Equal(c.body, msg) {
		t.Fatal("message with a duplicate fragment not completed")
	}
	// A late duplicate after completion neither delivers again nor opens an entry.
	if _, ok := feed(t, d, now, clientA, frags[1]); ok || len(d.m) != 0 {
		t.Fatal("late duplicate reopened the message")
	}
	if st.v0DuplicateFrags.Load() != 2 {
		t.Fatalf("duplicates %d, want 2", st.v0DuplicateFrags.Load())
	}
	// The same id from another client port is another message.
	feed(t, d, now, clientB, frags[0])
	if len(d.m) != 1 {
		t.Fatal("id from another port was not a new message")
	}
}

func TestDefragLostFragmentEvictedByAge(t *testing.T) {
	d, st := newTestDefrag(1 << 20)
	msg := bytes.Repeat([]byte("x"), 1000)
	frags := fragmentsOf(3, msg, 100, nil) // 10 fragments, size bucket log2(999)=10
	start := time.Now()
	for i, f := range frags {
		if i == 5 || i == 9 {
			continue // lost
		}
		feed(t, d, start, clientA, f)
	}
	d.expire(start.Add(9 * time.Second))
	if st.cacheEvictions.Load() != 0 {
		t.Fatal("evicted before max age")
	}
	d.expire(start.Add(11 * time.Second))
	if st.cacheEvictions.Load() != 1 || len(d.m) != 0 || d.bytes != 0 {
		t.Fatalf("evictions %d entries %d bytes %d", st.cacheEvictions.Load(), len(d.m), d.bytes)
	}
	// Index 5 is in bucket 3 (4-7), index 9 in bucket 4 (8-15).
	if st.droppedFragments[10][3].Load() != 1 || st.droppedFragments[10][4].Load() != 1 {
		t.Fatalf("dropped fragments not counted where expected: %v", st.snapshot("").DroppedFragments[10])
	}
	// The lost fragment arriving after eviction opens a new entry; it never completes.
	if _, ok := feed(t, d, start.Add(12*time.Second), clientA, frags[5]); ok {
		t.Fatal("message completed from one fragment")
	}
}

// TestDefragEvictsOldestForRoom: entries are charged what arrived of them;
// the fragment that would take the total past the bound evicts the oldest
// entry, whose missing fragments are counted.
func TestDefragEvictsOldestForRoom(t *testing.T) {
	d, st := newTestDefrag(3000)
	now := time.Now()
	var m [4][]raw
	for i := range m {
		m[i] = fragmentsOf(uint32(i+1), bytes.Repeat([]byte{byte('a' + i)}, 1500), 500, nil)
	}
	// Each first fragment costs 160 + 8 (bitmap) + 6 (indices) + 500; a's
	// second one 500 more: 2,522 bytes, under the bound.
	for _, r := range []raw{m[0][0], m[0][1], m[1][0], m[2][0]} {
		feed(t, d, now, clientA, r)
	}
	if st.cacheEvictions.Load() != 0 || d.bytes != 2522 {
		t.Fatalf("evictions %d, %d bytes held", st.cacheEvictions.Load(), d.bytes)
	}
	feed(t, d, now, clientA, m[3][0]) // 674 more: a, the oldest, is evicted
	if st.cacheEvictions.Load() != 1 || len(d.m) != 3 || d.bytes > 3000 {
		t.Fatalf("evictions %d entries %d bytes %d", st.cacheEvictions.Load(), len(d.m), d.bytes)
	}
	if _, ok := d.m[msgKey{clientA, 1}]; ok {
		t.Fatal("the oldest entry survived")
	}
	s := st.snapshot("")
	var dropped uint64
	for _, v := range s.DroppedFragments[sizeBucket(1500)] {
		dropped += v
	}
	if dropped != 1 || s.DroppedFragments[sizeBucket(1500)][indexBucket(2)] != 1 {
		t.Fatalf("dropped fragments %v, want a's third", s.DroppedFragments[sizeBucket(1500)])
	}
	feed(t, d, now, clientA, m[1][1])
	if c, ok := feed(t, d, now, clientA, m[1][2]); !ok || !bytes.Equal(c.body, bytes.Repeat([]byte("b"), 1500)) {
		t.Fatal("surviving message not completed")
	}
}

// TestDefragChargesWhatArrived: a first fragment announcing nearly the whole
// bound costs what it carried, not what it announced, and the buffers it
// holds are what it is charged.
func TestDefragChargesWhatArrived(t *testing.T) {
	d, _ := newTestDefrag(1 << 20)
	now := time.Now()
	big := raw{typ: 1, count: 1000, fragSize: 1000, id: 1, length: 1_000_000, payload: bytes.Repeat([]byte("x"), 1000)}
	tiny := raw{typ: 1, count: 65535, fragSize: 1, id: 2, length: 65535, payload: []byte("y")}
	feed(t, d, now, clientA, big)
	feed(t, d, now, clientA, tiny)
	p := d.m[msgKey{clientA, 1}]
	if p == nil || cap(p.data) != 1000 || p.got != nil || p.cost != entryOverhead+1000+2*4 {
		t.Fatalf("announcing 1,000,000 bytes: data cap %d, bitmap %d words, cost %d", cap(p.data), len(p.got), p.cost)
	}
	q := d.m[msgKey{clientA, 2}]
	if q == nil || q.got != nil || q.cost != entryOverhead+1+2*4 {
		t.Fatalf("announcing 65,535 fragments: bitmap %d words, cost %d", len(q.got), q.cost)
	}
	if d.bytes != p.cost+q.cost {
		t.Fatalf("%d bytes held, entries cost %d", d.bytes, p.cost+q.cost)
	}
	checkCharges(t, d)
}

// checkCharges asserts that every entry is charged exactly the buffers it
// holds, and that the total is the sum of the entries.
func checkCharges(t *testing.T, d *defrag) {
	t.Helper()
	var sum int64
	for p := d.head; p != nil; p = p.next {
		held := int64(entryOverhead+cap(p.data)+2*cap(p.order)+8*len(p.got)) + tagCost(p.tags)
		if p.cost != held {
			t.Fatalf("entry %v charged %d, holds %d", p.key, p.cost, held)
		}
		if int64(cap(p.data)) > int64(p.h.length) || cap(p.order) > p.h.count {
			t.Fatalf("entry %v grew past its message: data %d of %d, indices %d of %d",
				p.key, cap(p.data), p.h.length, cap(p.order), p.h.count)
		}
		sum += p.cost
	}
	if sum != d.bytes {
		t.Fatalf("entries cost %d, defragmenter holds %d", sum, d.bytes)
	}
}

// TestDefragManyFragmentsOutOfOrder: a message of more fragments than get a
// bitmap at once, received backwards with duplicates, is assembled in order;
// the duplicates are recognised before and after its bitmap exists.
func TestDefragManyFragmentsOutOfOrder(t *testing.T) {
	d, st := newTestDefrag(1 << 20)
	now := time.Now()
	msg := make([]byte, 1999)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	frags := fragmentsOf(9, msg, 2, nil) // 1,000 fragments: a 128-byte bitmap, made after 256 arrived
	var got completed
	dups := 0
	for i := len(frags) - 1; i >= 0; i-- {
		if c, ok := feed(t, d, now, clientA, frags[i]); ok {
			got = c
		}
		if i%100 == 0 && i > 0 {
			feed(t, d, now, clientA, frags[len(frags)-1]) // again
			dups++
		}
		checkCharges(t, d)
	}
	if !bytes.Equal(got.body, msg) {
		t.Fatal("message not assembled in order")
	}
	if st.v0DuplicateFrags.Load() != uint64(dups) || d.bytes != 0 {
		t.Fatalf("duplicates %d of %d, %d bytes left", st.v0DuplicateFrags.Load(), dups, d.bytes)
	}
}

func TestDefragWrongChecksum(t *testing.T) {
	d, st := newTestDefrag(1 << 20)
	now := time.Now()
	frags := fragmentsOf(4, []byte("hello, world"), 5, nil) // 3 fragments
	for i := range frags {
		frags[i].checksum ^= 1
	}
	for _, f := range frags {
		if _, ok := feed(t, d, now, clientA, f); ok {
			t.Fatal("message with a wrong checksum delivered")
		}
	}
	if st.v0InvalidChecksum[countBucket(3)].Load() != 1 {
		t.Fatalf("invalid checksum not counted: %v", st.snapshot("").V0InvalidChecksum)
	}
	single := fragmentsOf(5, []byte("hi"), 100, nil)[0]
	single.payload = []byte("ho")
	if _, ok := feed(t, d, now, clientA, single); ok || st.v0InvalidChecksum[0].Load() != 1 {
		t.Fatal("single fragment with a wrong checksum delivered or not counted")
	}
	if len(d.m) != 0 {
		t.Fatal("entry left behind")
	}
}

func TestDefragInconsistentFragments(t *testing.T) {
	msg := bytes.Repeat([]byte("z"), 100)
	mutations := map[string]func(r *raw){
		"other checksum": func(r *raw) { r.checksum++ },
		"other count":    func(r *raw) { r.count = 5; r.length = 100; r.fragSize = 25 },
		"other size":     func(r *raw) { r.fragSize = 50; r.count = 2 },
		"other length":   func(r *raw) { r.length = 95 },
		"short payload":  func(r *raw) { r.payload = r.payload[:10] },
		"long payload":   func(r *raw) { r.payload = append(append([]byte{}, r.payload...), 'x') },
	}
	for name, mutate := range mutations {
		d, st := newTestDefrag(1 << 20)
		now := time.Now()
		frags := fragmentsOf(6, msg, 40, nil) // 40+40+20
		feed(t, d, now, clientA, frags[0])
		bad := frags[1]
		mutate(&bad)
		if h, tags, payload, err := parseHeader(bad.bytes()); err == nil {
			d.add(now, clientA, h, tags, payload)
		} else {
			st.v0InvalidHeader.Add(1)
		}
		invalid := st.v0InvalidFragments[sizeBucket(100)][1].Load() + st.v0InvalidHeader.Load()
		if invalid != 1 {
			t.Errorf("%s: not counted as invalid", name)
		}
		feed(t, d, now, clientA, frags[1])
		if c, ok := feed(t, d, now, clientA, frags[2]); !ok || !bytes.Equal(c.body, msg) {
			t.Errorf("%s: the invalid fragment corrupted the message", name)
		}
	}
	// A first fragment whose payload disagrees with its own header.
	d, st := newTestDefrag(1 << 20)
	f := fragmentsOf(8, msg, 40, nil)[0]
	f.payload = f.payload[:39]
	feed(t, d, time.Now(), clientA, f)
	if st.v0InvalidFragments[sizeBucket(100)][0].Load() != 1 || len(d.m) != 0 {
		t.Fatal("bad first fragment accepted or not counted")
	}
}

func TestDefragTagsLastWins(t *testing.T) {
	d, _ := newTestDefrag(1 << 20)
	now := time.Now()
	frags := fragmentsOf(10, []byte("abcdefghij"), 4, nil)
	frags[0].tags, frags[0].tagLen = []byte("kt:first"), 8
	frags[1].tags, frags[1].tagLen = []byte("kt:second\x00rk:r"), 14
	feed(t, d, now, clientA, frags[1])
	feed(t, d, now, clientA, frags[0])
	c, ok := feed(t, d, now, clientA, frags[2]) // no tags: does not erase
	if !ok || len(c.tags) != 1 || c.tags[0] != "kt:first" {
		t.Fatalf("tags %q", c.tags)
	}
}

func TestDefragInvalidAllocatesNothing(t *testing.T) {
	d, _ := newTestDefrag(1 << 20)
	now := time.Now()
	frags := fragmentsOf(11, bytes.Repeat([]byte("q"), 1000), 100, nil)
	bad := frags[0]
	bad.payload = bad.payload[:50]
	b := bad.bytes()
	allocs := testing.AllocsPerRun(100, func() {
		h, tags, payload, err := parseHeader(b)
		if err == nil {
			d.add(now, clientA, h, tags, payload)
		}
	})
	if allocs != 0 || len(d.m) != 0 {
		t.Fatalf("invalid fragment allocated %.0f times, %d entries", allocs, len(d.m))
	}
	b = (raw{typ: 1, count: 0}).bytes()
	if allocs := testing.AllocsPerRun(100, func() { parseHeader(b) }); allocs != 0 {
		t.Fatalf("header rejection allocated %.0f times", allocs)
	}
}

func TestHoles(t *testing.T) {
	st := &stats{}
	h := newHoles(10*time.Second, st)
	now := time.Now()
	for _, id := range []uint32{100, 101, 103, 102, 104, 106} { // 105 missing, 102 late
		h.observe(now, clientA, id)
	}
	if st.holesFromNewMessage.Load() != 0 {
		t.Fatal("holes counted inside the window")
	}
	h.observe(now, clientA, 106+64) // the window moves past 100..106: only 105 was never seen
	if got := st.holesFromNewMessage.Load(); got != 1 {
		t.Fatalf("holes %d, want 1", got)
	}
	st2 := &stats{}
	h2 := newHoles(10*time.Second, st2)
	for _, id := range []uint32{1, 2, 3, 5, 6} {
		h2.observe(now, clientA, id)
	}
	h2.observe(now, clientA, 1+64) // window was 1..64; now 2..65: id 1 was seen, nothing lost
	if st2.holesFromNewMessage.Load() != 0 {
		t.Fatalf("holes %d, want 0", st2.holesFromNewMessage.Load())
	}
	h2.observe(now, clientA, 5+64) // window 6..69: ids 2,3 seen, 4 lost, 5 seen
	if st2.holesFromNewMessage.Load() != 1 {
		t.Fatalf("holes %d, want 1", st2.holesFromNewMessage.Load())
	}
	// Other ports are independent; wrap-around is not a hole.
	h2.observe(now, clientB, 0xFFFFFFFF)
	h2.observe(now, clientB, 0)
	h2.observe(now, clientB, 1)
	if st2.holesFromNewMessage.Load() != 1 {
		t.Fatal("wrap-around counted as a hole")
	}
	// A huge jump is a restarted client, not a hole.
	h2.observe(now, clientB, 1<<30)
	if st2.holesFromNewMessage.Load() != 1 {
		t.Fatal("restart counted as holes")
	}
	// A dead port: clientA last sent 69 with 7..68 partly unseen.
	h2.sweep(now.Add(time.Minute))
	if st2.holesFromDeadPort.Load() == 0 || len(h2.ports) != 0 {
		t.Fatalf("dead port holes %d, ports %d", st2.holesFromDeadPort.Load(), len(h2.ports))
	}
}

func TestCommands(t *testing.T) {
	st := &stats{}
	env := commandEnv{
		snapshot: func() Snapshot { return st.snapshot("1.2.3") },
		environ:  func() []string { return []string{"A=1"} },
		canStop:  true,
		trusted:  true,
	}
	c, known := runCommand(st, env, []byte("PingFor42\n\n"))
	if !known || string(c.reply) != "PONGFor42\n\n" {
		t.Fatalf("PING answered %q", c.reply)
	}
	c, _ = runCommand(st, env, []byte("stat please"))
	if !bytes.HasPrefix(c.reply, []byte(`{"version":"1.2.3"`)) {
		t.Fatalf("STAT answered %q", c.reply)
	}
	if c, _ := runCommand(st, env, []byte("ENVI")); c.reply != nil || c.refused != "ENVI" {
		t.Fatal("ENVI answered while disabled")
	}
	if c, _ := runCommand(st, env, []byte("kill")); c.kill || c.refused != "KILL" {
		t.Fatal("KILL accepted while disabled")
	}
	env.allowEnvi, env.allowKill = true, true
	if c, _ := runCommand(st, env, []byte("Envi")); string(c.reply) != "A=1\n" {
		t.Fatalf("ENVI answered %q", c.reply)
	}
	if c, _ := runCommand(st, env, []byte("KILL")); !c.kill {
		t.Fatal("KILL refused while enabled")
	}
	env.canStop = false
	if c, _ := runCommand(st, env, []byte("KILL")); c.kill {
		t.Fatal("KILL accepted without a stop callback")
	}
	for _, bad := range []string{"KLIL", "PIN", ""} {
		if _, known := runCommand(st, env, []byte(bad)); known {
			t.Fatalf("%q known", bad)
		}
	}
	if st.v0Commands.Load() != 7 || st.unknownCommand.Load() != 3 || st.v0RefusedCommands.Load() != 3 {
		t.Fatalf("commands %d unknown %d refused %d", st.v0Commands.Load(), st.unknownCommand.Load(), st.v0RefusedCommands.Load())
	}
}

func TestEnvironRedaction(t *testing.T) {
	out := string(redactedEnviron([]string{
		"HOME=/root",
		"DB_PASSWORD=hunter2",
		"api_token=abc",
		"AWS_SECRET_ACCESS_KEY=k",
		"SSH_KEY=k2",
		"OS_CREDENTIAL_FILE=/credfile",
		"TRANSPORT=rabbit://nova:s3cret@h1:5672,nova:s3cret@h2:5672/",
		"REPORTING=https://u:p@example.org/api",
		"PLAIN_URL=https://example.org/x",
		"EMPTY=",
	}))
	for _, leak := range []string{"hunter2", "abc", "=k\n", "k2", "/credfile", "s3cret", "u:p"} {
		if bytes.Contains([]byte(out), []byte(leak)) {
			t.Errorf("ENVI leaks %q:\n%s", leak, out)
		}
	}
	for _, keep := range []string{"HOME=/root\n", "PLAIN_URL=https://example.org/x\n", "EMPTY=\n", "DB_PASSWORD=[redacted]\n"} {
		if !bytes.Contains([]byte(out), []byte(keep)) {
			t.Errorf("ENVI lacks %q:\n%s", keep, out)
		}
	}
}
