package outbox

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestSegmentRoundTrip(t *testing.T) {
	var evs [][]byte
	for i := range 40 {
		evs = append(evs, bytes.Repeat([]byte{byte('a' + i%26)}, i*7)) // includes an empty event
	}
	v, _ := appendSegment([]byte("prefix"), 1234567890, evs, nil)
	v = v[len("prefix"):]
	seg, err := parseSegment(100, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	if seg.first != 100 || seg.last() != 139 || seg.at != 1234567890 {
		t.Fatalf("header: first %d last %d at %d", seg.first, seg.last(), seg.at)
	}
	var total int64
	for _, e := range evs {
		total += int64(len(e))
	}
	if seg.total != total || seg.bytesFrom(100) != total || seg.bytesFrom(139) != int64(len(evs[39])) || seg.bytesFrom(140) != 0 {
		t.Fatalf("sizes: total %d, from 100 %d, from 139 %d", seg.total, seg.bytesFrom(100), seg.bytesFrom(139))
	}
	if got := seg.bytesBetween(105, 110); got != int64(7*(5+6+7+8+9)) {
		t.Fatalf("bytesBetween(105, 110) = %d", got)
	}
	out, err := seg.events(110, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 5 {
		t.Fatalf("%d events, want 5", len(out))
	}
	for i, e := range out {
		if !bytes.Equal(e, evs[10+i]) {
			t.Fatalf("event %d differs", 110+i)
		}
	}
	// Appending to one returned event never overwrites the next.
	_ = append(out[0], 'Z')
	if !bytes.Equal(out[1], evs[11]) {
		t.Fatal("events share capacity")
	}
}

func TestSegmentMalformed(t *testing.T) {
	good, _ := appendSegment(nil, 1, [][]byte{[]byte(`{"a":1}`), []byte(`{"b":2}`)}, nil)
	cases := map[string][]byte{
		"empty":           nil,
		"format":          append([]byte{9}, good[1:]...),
		"short header":    good[:5],
		"no count":        good[:9],
		"zero count":      append(append([]byte{}, good[:9]...), 0),
		"lengths cut":     good[:10],
		"block cut":       good[:len(good)-2],
		"block garbage":   append(append([]byte{}, good[:12]...), 0xff, 0xff, 0xff, 0xff),
		"length too big":  append(append(append([]byte{}, good[:10]...), 0x80, 0x80, 0x80, 0x80, 0x10, 7), good[12:]...),
		"lengths ≠ block": append(append(append([]byte{}, good[:10]...), 8, 7), good[12:]...),
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			seg, err := parseSegment(1, v, nil)
			if err == nil {
				_, err = seg.events(1, 10, nil)
			}
			if !errors.Is(err, errSegment) {
				t.Fatalf("got %v, want errSegment", err)
			}
		})
	}
}

func TestSegmentCompresses(t *testing.T) {
	var evs [][]byte
	for i := range 33 {
		evs = append(evs, fmt.Appendf(nil, `{"event_id":"%08x-1111-2222-3333-444444444444","timestamp":"2024-05-01T12:00:%02d.123456Z","event_type":"compute.instance.exists","service":"nova","resource_type":"instance","resource_id":"9f1b2c3d-aaaa-bbbb-cccc-%012d","project_id":"p-%d","attributes":{"vcpus":2,"memory_mb":4096,"flavor_name":"m1.medium"}}`, i, i, i, i%3))
	}
	v, raw := appendSegment(nil, 1, evs, nil)
	if len(v)*2 > len(raw) {
		t.Fatalf("segment of %d bytes for %d bytes of events: expected at least 2:1", len(v), len(raw))
	}
	t.Logf("%d events: %d bytes stored for %d bytes", len(evs), len(v), len(raw))
}

// A highly compressible event (a long run of one byte) reads back: the
// header's lengths are bounded by an absolute limit, not by the stored size.
func TestSegmentHighRatio(t *testing.T) {
	ev := bytes.Repeat([]byte{'x'}, 200<<10)
	v, _ := appendSegment(nil, 1, [][]byte{ev}, nil)
	seg, err := parseSegment(1, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := seg.events(1, 1, nil)
	if err != nil || len(out) != 1 || !bytes.Equal(out[0], ev) {
		t.Fatalf("%d bytes stored; read back %d events, %v", len(v), len(out), err)
	}
}
