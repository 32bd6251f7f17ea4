package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"testing"
)

func readOne(t *testing.T, b []byte) (FrameType, []byte) {
	t.Helper()
	ft, p, err := NewReader(bytes.NewReader(b), 0).Next()
	if err != nil {
		t.Fatal(err)
	}
	return ft, p
}

func TestRoundTrip(t *testing.T) {
	var b []byte
	b = AppendHello(b[:0], Hello{Modes: ModePublish | ModeSubscribe, Name: "meter"})
	ft, p := readOne(t, b)
	if h, err := ParseHello(p); ft != FrameHello || err != nil || h.Name != "meter" || h.Modes != 3 {
		t.Fatalf("hello %v %+v %v", ft, h, err)
	}

	b = AppendWelcome(b[:0], Welcome{MaxData: MaxData, UID: 1000, GID: 100})
	ft, p = readOne(t, b)
	if w, err := ParseWelcome(p); ft != FrameWelcome || err != nil || w != (Welcome{MaxData: MaxData, UID: 1000, GID: 100, IdleTimeoutMillis: 0}) {
		t.Fatalf("welcome %v %+v %v", ft, w, err)
	}

	pub := Publish{Seq: 7, PublishedAt: 1714564800123456789, UID: 1, GID: 2, Perm: 0o440, Type: JSON,
		Tag: []byte("usage.license"), Data: []byte(`{"a":1}`)}
	b = AppendPublish(b[:0], &pub)
	ft, p = readOne(t, b)
	var got Publish
	if err := ParsePublish(p, &got); ft != FramePublish || err != nil || !reflect.DeepEqual(got, pub) {
		t.Fatalf("publish %v %+v %v", ft, got, err)
	}

	acks := []AckEntry{{Seq: 1, Status: Committed}, {Seq: 2, Status: Refused, Reason: "credentials"}}
	b = AppendAck(b[:0], acks)
	ft, p = readOne(t, b)
	if ga, err := ParseAck(p, nil); ft != FrameAck || err != nil || !reflect.DeepEqual(ga, acks) {
		t.Fatalf("ack %v %+v %v", ft, ga, err)
	}

	b = AppendSubscribe(b[:0], Subscribe{ID: 9, Raw: true, Regex: `^compute\.`})
	ft, p = readOne(t, b)
	if s, err := ParseSubscribe(p); ft != FrameSubscribe || err != nil || s != (Subscribe{ID: 9, Raw: true, Regex: `^compute\.`}) {
		t.Fatalf("subscribe %v %+v %v", ft, s, err)
	}

	b = AppendUnsubscribe(b[:0], 9)
	ft, p = readOne(t, b)
	if id, err := ParseUnsubscribe(p); ft != FrameUnsubscribe || err != nil || id != 9 {
		t.Fatalf("unsubscribe %v %d %v", ft, id, err)
	}

	b = AppendSubStatus(b[:0], SubStatus{ID: 9, OK: false, Text: "bad"})
	ft, p = readOne(t, b)
	if s, err := ParseSubStatus(p); ft != FrameSubStatus || err != nil || s != (SubStatus{9, false, "bad"}) {
		t.Fatalf("substatus %v %+v %v", ft, s, err)
	}

	dl := Deliver{Dropped: 3, Raw: true, Type: JSON, UID: 0, GID: 0, Perm: 0o400, Origin: "amqp",
		Tag: []byte("compute.instance.exists"), Subs: []uint32{1, 4}, Data: []byte(`{}`), PID: 4242}
	b = AppendDeliver(b[:0], &dl)
	ft, p = readOne(t, b)
	var gd Deliver
	if err := ParseDeliver(p, &gd); ft != FrameDeliver || err != nil || !reflect.DeepEqual(gd, dl) {
		t.Fatalf("deliver %v %+v %v", ft, gd, err)
	}

	b = AppendError(b[:0], "unsupported version 2")
	ft, p = readOne(t, b)
	if s, err := ParseError(p); ft != FrameError || err != nil || s != "unsupported version 2" {
		t.Fatalf("error %v %q %v", ft, s, err)
	}
}

// The layout is fixed byte for byte: a client in another language is
// written from docs/channel.md, which shows this frame.
func TestPublishLayout(t *testing.T) {
	b := AppendPublish(nil, &Publish{Seq: 1, PublishedAt: 2, UID: 3, GID: 4, Perm: 0o444, Type: String,
		Tag: []byte("t"), Data: []byte("hi")})
	want := []byte{
		0, 0, 0, 0x28, // length: 40 bytes follow
		1, 3, // version 1, PUBLISH
		0, 0, 0, 0, 0, 0, 0, 1, // seq
		0, 0, 0, 0, 0, 0, 0, 2, // published_at
		0, 0, 0, 3, // uid
		0, 0, 0, 4, // gid
		0, 0, 1, 0x24, // perm 0444
		1,         // STRING
		0, 1, 't', // tag
		0, 0, 0, 2, 'h', 'i', // data
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("layout\n got %v\nwant %v", b, want)
	}
}

func TestReaderBounds(t *testing.T) {
	big := AppendPublish(nil, &Publish{Tag: []byte("t"), Data: make([]byte, 100)})
	if _, _, err := NewReader(bytes.NewReader(big), 50).Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("over the bound: %v", err)
	}
	if _, _, err := NewReader(bytes.NewReader(big[:20]), 0).Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut: %v", err)
	}
	if _, _, err := NewReader(bytes.NewReader(nil), 0).Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("empty: %v", err)
	}
	v2 := AppendHello(nil, Hello{})
	v2[4] = 2
	if ft, _, err := NewReader(bytes.NewReader(v2), 0).Next(); !errors.Is(err, ErrVersion) || ft != FrameHello {
		t.Fatalf("version: %v %v", ft, err)
	}
	if _, _, err := NewReader(bytes.NewReader([]byte{0, 0, 0, 1, 1}), 0).Next(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("length 1: %v", err)
	}
}

// A payload cut anywhere is refused, never read past its end.
func TestTruncatedPayloads(t *testing.T) {
	pub := AppendPublish(nil, &Publish{Seq: 1, Type: JSON, Tag: []byte("abc"), Data: []byte(`{"x":1}`)})[headerLen:]
	for i := range len(pub) {
		var p Publish
		if err := ParsePublish(pub[:i], &p); !errors.Is(err, ErrMalformed) {
			t.Fatalf("publish cut at %d: %v", i, err)
		}
	}
	del := AppendDeliver(nil, &Deliver{Subs: []uint32{1, 2}, Tag: []byte("x"), Data: []byte("y"), Origin: "amqp"})[headerLen:]
	for i := range len(del) {
		var d Deliver
		err := ParseDeliver(del[:i], &d)
		if i == len(del)-4 { // the earlier layout, without the pid
			if err != nil {
				t.Fatalf("deliver without its pid: %v", err)
			}
			continue
		}
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("deliver cut at %d: %v", i, err)
		}
	}
	if _, err := ParseAck([]byte{0xff, 0xff, 0xff, 0xff}, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ack count past the payload: %v", err)
	}
}

// Bytes past the known fields are ignored: later revisions may append.
func TestTrailingBytesIgnored(t *testing.T) {
	b := AppendWelcome(nil, Welcome{MaxData: 5, UID: 6, GID: 7})
	b = append(b, 0xaa, 0xbb)
	b[3] += 2
	_, p := readOne(t, b)
	if w, err := ParseWelcome(p); err != nil || w != (Welcome{MaxData: 5, UID: 6, GID: 7}) {
		t.Fatalf("%+v %v", w, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(AppendPublish(nil, &Publish{Seq: 1, Type: JSON, Tag: []byte("abc"), Data: []byte(`{}`)})[headerLen:])
	f.Add(AppendDeliver(nil, &Deliver{Subs: []uint32{1}, Tag: []byte("x")})[headerLen:])
	f.Add(AppendAck(nil, []AckEntry{{Seq: 1, Reason: "r"}})[headerLen:])
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Publish
		_ = ParsePublish(b, &p)
		var d Deliver
		_ = ParseDeliver(b, &d)
		_, _ = ParseAck(b, nil)
		_, _ = ParseHello(b)
		_, _ = ParseSubscribe(b)
		_, _ = ParseSubStatus(b)
		_, _ = ParseError(b)
	})
}

func TestParseType(t *testing.T) {
	for s, want := range map[string]Type{"STRING": String, "json": JSON, "Json": JSON} {
		if got, ok := ParseType(s); !ok || got != want {
			t.Fatalf("%s: %v %v", s, got, ok)
		}
	}
	if _, ok := ParseType("xml"); ok {
		t.Fatal("xml accepted")
	}
}

// The spellings in logs and errors, and the fallback for a value the
// protocol does not define.
func TestNames(t *testing.T) {
	for _, c := range []struct {
		got  fmt.Stringer
		want string
	}{
		{FrameHello, "HELLO"}, {FrameSubStatus, "SUB_STATUS"}, {FramePing, "PING"},
		{FrameType(0), "frame(0)"}, {FrameType(12), "frame(12)"},
		{String, "STRING"}, {JSON, "JSON"}, {Type(0), "type(0)"}, {Type(3), "type(3)"},
		{Committed, "committed"}, {DeadLettered, "dead_lettered"}, {Refused, "refused"}, {Status(4), "status(4)"},
	} {
		if s := c.got.String(); s != c.want {
			t.Errorf("%#v spelt %q, want %q", c.got, s, c.want)
		}
	}
}

// The fields a later revision appended (WELCOME's idle timeout, SUBSCRIBE's
// exact flag, DELIVER's pid, UNSUB_STATUS, PING) round-trip, and a payload
// of the earlier layout still parses with them zero.
func TestAppendedFields(t *testing.T) {
	b := AppendWelcome(nil, Welcome{MaxData: 1, UID: 2, GID: 3, IdleTimeoutMillis: 60000})
	_, p := readOne(t, b)
	if w, err := ParseWelcome(p); err != nil || w.IdleTimeoutMillis != 60000 {
		t.Fatalf("welcome %+v %v", w, err)
	}
	if w, err := ParseWelcome(p[:12]); err != nil || w.IdleTimeoutMillis != 0 || w.GID != 3 {
		t.Fatalf("earlier welcome %+v %v", w, err)
	}
	b = AppendSubscribe(nil, Subscribe{ID: 1, Exact: true, Regex: "usage.license"})
	_, p = readOne(t, b)
	if s, err := ParseSubscribe(p); err != nil || !s.Exact || s.Raw || s.Regex != "usage.license" {
		t.Fatalf("exact subscribe %+v %v", s, err)
	}
	dl := Deliver{Type: JSON, Tag: []byte("t"), Data: []byte(`1`), PID: 77}
	b = AppendDeliver(nil, &dl)
	_, p = readOne(t, b)
	var gd Deliver
	if err := ParseDeliver(p[:len(p)-4], &gd); err != nil || gd.PID != 0 || string(gd.Data) != "1" {
		t.Fatalf("earlier deliver %+v %v", gd, err)
	}
	b = AppendUnsubStatus(nil, SubStatus{ID: 5, OK: true})
	ft, p := readOne(t, b)
	if s, err := ParseSubStatus(p); ft != FrameUnsubStatus || err != nil || !s.OK || s.ID != 5 {
		t.Fatalf("unsub status %v %+v %v", ft, s, err)
	}
	if ft, p := readOne(t, AppendPing(nil)); ft != FramePing || len(p) != 0 {
		t.Fatalf("ping %v %v", ft, p)
	}
}

// A frame that announces the largest length and ends after a few bytes
// costs a small buffer, not the announced size.
func TestReaderGrowsWithTheBytes(t *testing.T) {
	hdr := binary.BigEndian.AppendUint32(nil, MaxFrame)
	hdr = append(hdr, Version, byte(FramePublish), 1, 2, 3, 4, 5)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 16
	for range n {
		r := NewReader(bytes.NewReader(hdr), 0)
		if _, _, err := r.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut frame: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 128<<10 {
		t.Fatalf("%d bytes allocated per cut frame (announced %d)", per, MaxFrame)
	}
	// A whole large frame still reads, and the next small one after it.
	big := AppendPublish(nil, &Publish{Seq: 1, Type: String, Tag: []byte("t"), Data: bytes.Repeat([]byte("x"), MaxData)})
	small := AppendPublish(nil, &Publish{Seq: 2, Type: String, Tag: []byte("t"), Data: []byte("y")})
	r := NewReader(bytes.NewReader(append(big, small...)), 0)
	var p1, p2 Publish
	ft, p, err := r.Next()
	if err != nil || ft != FramePublish || ParsePublish(p, &p1) != nil || len(p1.Data) != MaxData {
		t.Fatalf("large frame: %v %v %d", ft, err, len(p1.Data))
	}
	ft, p, err = r.Next()
	if err != nil || ParsePublish(p, &p2) != nil || string(p2.Data) != "y" || p2.Seq != 2 {
		t.Fatalf("frame after it: %v %v %+v", ft, err, p2)
	}
}
