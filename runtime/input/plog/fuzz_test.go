package plog

import (
	"encoding/binary"
	"testing"
	"time"
)

// FuzzDatagrams feeds a sequence of datagrams (each prefixed by a 2-byte length)
// through the header parser and the defragmenter, as the UDP reader does, and
// checks that the bound holds, the accounting adds up and every delivered message
// matches its header.
func FuzzDatagrams(f *testing.F) {
	seq := func(ds ...[]byte) []byte {
		var b []byte
		for _, d := range ds {
			b = binary.BigEndian.AppendUint16(b, uint16(len(d)))
			b = append(b, d...)
		}
		return b
	}
	frags, _ := Fragments(1, []byte("a message split into several fragments"), []string{"kt:x"}, 8)
	f.Add(seq(frags...))
	f.Add(seq(frags[3], frags[0], frags[0], frags[1], frags[4], frags[2]))
	f.Add(seq(frags[0][:20], frags[1]))
	one, _ := Fragments(2, []byte("single"), nil, 100)
	f.Add(seq(one...))
	f.Add(seq((raw{typ: 1, count: 65535, fragSize: 65535, length: 2147483646}).bytes()))
	f.Fuzz(func(t *testing.T, in []byte) {
		const maxBytes = 4096
		st := &stats{}
		d := newDefrag(maxBytes, time.Second, st)
		now := time.Unix(1e9, 0)
		for len(in) >= 2 {
			n := int(binary.BigEndian.Uint16(in))
			in = in[2:]
			if n > len(in) {
				n = len(in)
			}
			dg := in[:n]
			in = in[n:]
			from := clientA
			if len(dg) > 0 && dg[len(dg)-1]&1 == 1 {
				from = clientB
			}
			now = now.Add(100 * time.Millisecond)
			h, tags, payload, err := parseHeader(dg)
			if err != nil {
				continue
			}
			if h.count > 1 && h.maxCost() > maxBytes {
				continue
			}
			if h.tagLen+len(payload) != len(dg)-headerLen {
				t.Fatalf("split lost bytes")
			}
			c, ok := d.add(now, from, h, tags, payload)
			if ok {
				if len(c.body) != h.length || murmur32(c.body) != h.checksum {
					t.Fatalf("delivered %d bytes, header says %d (checksum %#x)", len(c.body), h.length, h.checksum)
				}
			}
			if d.bytes > maxBytes || d.bytes < 0 {
				t.Fatalf("defragmenter holds %d bytes, bound %d", d.bytes, maxBytes)
			}
			checkCharges(t, d)
			var sum int64
			entries := 0
			for p := d.head; p != nil; p = p.next {
				sum += p.cost
				entries++
			}
			if sum != d.bytes || entries != len(d.m) || int64(entries) != st.defragMessages.Load() || sum != st.defragBytes.cur.Load() {
				t.Fatalf("accounting: list %d/%d bytes, map %d, gauges %d/%d", entries, sum, len(d.m), st.defragMessages.Load(), st.defragBytes.cur.Load())
			}
		}
		d.drop()
		if d.bytes != 0 || len(d.m) != 0 {
			t.Fatal("drop left entries")
		}
	})
}
