package plog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// errOriginalRefuses is what originalFragments answers where the original
// client throws instead of sending (see below).
var errOriginalRefuses = errors.New("the original client throws on this message")

// originalFragments lays a message out as plog's own Java client does
// (com.airbnb.plog.client.fragmentation.Fragmenter), so that the listener is
// checked against the client operators run, not only against this package's
// Client:
//
//   - maxFragmentSize counts the 24-byte header; the payload room of a
//     fragment is maxFragmentSize-24, and every header says that room as the
//     fragment size, the last fragment's too.
//   - The tags, joined by \0 without a final one, count into the room: the
//     fragment count is ceil((length+tags)/room). So a tagged message whose
//     length is a whole number of rooms gets one more fragment, holding only
//     the tags.
//   - Only the last fragment carries the tags (the others say a tag length of
//     0); the checksum is MurmurHash3 of the payload alone.
//
// Where the original's arithmetic leaves the last fragment a negative
// payload (a tagged message a few bytes short of a whole number of rooms), or
// an empty message without tags has no fragment at all, the original throws
// while building the fragments and sends nothing: errOriginalRefuses.
func originalFragments(payload []byte, tags []string, messageIndex uint32, maxFragmentSize int) ([][]byte, error) {
	room := maxFragmentSize - headerLen
	if room < 1 {
		return nil, fmt.Errorf("fragment size < %d: %w", headerLen+1, errOriginalRefuses)
	}
	tagsLen := 0
	if len(tags) > 1 {
		tagsLen += len(tags) - 1
	}
	for _, t := range tags {
		tagsLen += len(t)
	}
	length := len(payload)
	count := (length + tagsLen + room - 1) / room
	lastLen := length - room*(count-1)
	if count == 0 || lastLen < 0 {
		return nil, errOriginalRefuses
	}
	hash := murmur32(payload)
	header := func(tagLen, idx int) []byte {
		b := make([]byte, headerLen, maxFragmentSize)
		b[0], b[1] = 0, 1
		binary.BigEndian.PutUint16(b[2:], uint16(count))
		binary.BigEndian.PutUint16(b[4:], uint16(idx))
		binary.BigEndian.PutUint16(b[6:], uint16(room))
		binary.BigEndian.PutUint32(b[8:], messageIndex)
		binary.BigEndian.PutUint32(b[12:], uint32(length))
		binary.BigEndian.PutUint32(b[16:], hash)
		binary.BigEndian.PutUint16(b[20:], uint16(tagLen))
		return b
	}
	out := make([][]byte, 0, count)
	content := 0
	for idx := 0; idx < count-1; idx, content = idx+1, content+room {
		out = append(out, append(header(0, idx), payload[content:content+room]...))
	}
	last := header(tagsLen, count-1)
	last = append(last, strings.Join(tags, "\x00")...)
	out = append(out, append(last, payload[content:content+lastLen]...))
	return out, nil
}

// canonicalOfLength is a canonical event padded with trailing white space
// (which JSON ignores) to exactly n bytes.
func canonicalOfLength(t *testing.T, id string, n int) []byte {
	t.Helper()
	b := canonical(id)
	if len(b) > n {
		t.Fatalf("a canonical event needs at least %d bytes", len(b))
	}
	return append(b, strings.Repeat(" ", n-len(b))...)
}

// TestOriginalFragmenterLayout checks the port against the original's rule on
// the case that matters: a tagged message of a whole number of rooms gets a
// last fragment with the tags and nothing else.
func TestOriginalFragmenterLayout(t *testing.T) {
	msg := make([]byte, 2*1376)
	frags, err := originalFragments(msg, []string{"rk:a", "kt:b"}, 9, 1400)
	if err != nil {
		t.Fatal(err)
	}
	if len(frags) != 3 || len(frags[0]) != 1400 || len(frags[1]) != 1400 || len(frags[2]) != 24+9 {
		t.Fatalf("%d fragments of %d, %d, %d bytes", len(frags), len(frags[0]), len(frags[1]), len(frags[len(frags)-1]))
	}
	for i, f := range frags {
		h, tags, payload, err := parseHeader(f)
		if err != nil {
			t.Fatalf("fragment %d refused: %v", i, err)
		}
		if len(payload) != h.expectedPayload(i) {
			t.Fatalf("fragment %d carries %d bytes, the header expects %d", i, len(payload), h.expectedPayload(i))
		}
		if i == 2 && string(tags) != "rk:a\x00kt:b" {
			t.Fatalf("last fragment's tags %q", tags)
		}
	}
	// The same message without tags is two full fragments, as before.
	if frags, _ := originalFragments(msg, nil, 9, 1400); len(frags) != 2 {
		t.Fatalf("untagged: %d fragments", len(frags))
	}
	// A few bytes short of a whole number of rooms, with more bytes of tags
	// than that: the original throws.
	if _, err := originalFragments(msg[:2*1376-3], []string{"rk:abc"}, 9, 1400); !errors.Is(err, errOriginalRefuses) {
		t.Fatalf("err %v, want errOriginalRefuses", err)
	}
}

// TestOriginalClientMessagesArrive sends, laid out by the original client's
// rules at its usual 1,400-byte packets, tagged and untagged messages of the
// lengths around one, two and three whole fragments, the tags-only last
// fragment among them: every message the original client sends arrives.
func TestOriginalClientMessagesArrive(t *testing.T) {
	h := newHarness(t, 0, udpOnly())
	conn := h.rawConn(0)
	const room = 1400 - headerLen
	tags := []string{"rk:orig"}
	var lengths []int
	for k := 1; k <= 3; k++ {
		lengths = append(lengths, k*room, k*room-len("rk:orig"), k*room+1, k*room-100)
	}
	sent, tagsOnly, id := 0, 0, uint32(0)
	for _, n := range lengths {
		for _, tg := range [][]string{tags, nil} {
			id++
			frags, err := originalFragments(canonicalOfLength(t, fmt.Sprintf("vm-%d", id), n), tg, id, 1400)
			if err != nil {
				t.Fatalf("length %d tags %v: %v", n, tg, err)
			}
			if last := frags[len(frags)-1]; len(last) == headerLen+len("rk:orig") && tg != nil {
				tagsOnly++
			}
			for _, f := range frags {
				if _, err := conn.Write(f); err != nil {
					t.Fatal(err)
				}
			}
			sent++
		}
	}
	if tagsOnly != 3 {
		t.Fatalf("%d messages with a tags-only last fragment, want 3", tagsOnly)
	}
	testkit.WaitUntil(t, 10*time.Second, "every message", func() (bool, string) {
		s := h.srv.Stats(0)
		b, _ := json.Marshal(s)
		return s.EventsCommitted == uint64(sent), string(b)
	})
	evs := h.events(sent)
	byKey := map[any]int{}
	for _, ev := range evs {
		byKey[ev["source"].(map[string]any)["routing_key"]]++
	}
	if byKey["rk:orig"] != 0 || byKey["orig"] != sent/2 {
		t.Fatalf("routing keys %v", byKey)
	}
	s := h.waitStat(0, "committed", func(s Snapshot) bool { return s.EventsCommitted == uint64(sent) })
	if s.V0InvalidMultipartHeader != 0 || s.Cache.Evictions != 0 {
		t.Fatalf("invalid headers %d, evictions %d", s.V0InvalidMultipartHeader, s.Cache.Evictions)
	}
}

// TestTagsOnlyLastFragmentMustCarryTags: a last fragment with no payload and
// no tags is no layout any client makes; it is refused as a header, and the
// message it would complete waits and is evicted.
func TestTagsOnlyLastFragmentMustCarryTags(t *testing.T) {
	o := udpOnly()
	o.Listeners[0].Settings.DefragMaxAge = 50 * time.Millisecond
	h := newHarness(t, 0, o)
	conn := h.rawConn(0)
	frags, err := originalFragments(canonicalOfLength(t, "vm-x", 2*176), []string{"rk:x"}, 1, 200)
	if err != nil || len(frags) != 3 {
		t.Fatalf("%d fragments: %v", len(frags), err)
	}
	last := frags[2][:headerLen]
	binary.BigEndian.PutUint16(last[20:], 0) // tags taken away
	for _, f := range [][]byte{frags[0], frags[1], last} {
		conn.Write(f)
	}
	s := h.waitStat(0, "eviction", func(s Snapshot) bool { return s.Cache.Evictions == 1 })
	if s.V0InvalidMultipartHeader != 1 || s.EventsCommitted != 0 {
		t.Fatalf("invalid headers %d, committed %d", s.V0InvalidMultipartHeader, s.EventsCommitted)
	}
}

// TestSTATReadsAsTheOriginalDatadogCheck asks for STAT the way plog's Datadog
// check does and reads every key it reads, and the keys the original has
// written since 2014 beside the ones its README lists.
func TestSTATReadsAsTheOriginalDatadogCheck(t *testing.T) {
	h := newHarness(t, 0, udpOnly())
	c := h.dial(0)
	if err := c.SendUnboxed(canonical("vm-stat")); err != nil {
		t.Fatal(err)
	}
	h.waitStat(0, "committed", func(s Snapshot) bool { return s.EventsCommitted == 1 })
	c.conn.Write([]byte("\x00\x00statfordatadogplease"))
	buf := make([]byte, 65536)
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	var stats map[string]any
	if err := json.Unmarshal(buf[:n], &stats); err != nil {
		t.Fatal(err)
	}
	num := func(k string) float64 {
		v, ok := stats[k].(float64)
		if !ok {
			t.Fatalf("STAT %q is %T %v, want a number", k, stats[k], stats[k])
		}
		return v
	}
	sum := func(k string) {
		if _, ok := stats[k].([]any); !ok {
			t.Fatalf("STAT %q is %T, want an array", k, stats[k])
		}
	}
	for _, k := range []string{"uptime", "exceptions", "unhandled_objects", "udp_simple_messages",
		"holes_from_dead_port", "holes_from_new_message", "failed_to_send"} {
		num(k)
	}
	for _, k := range []string{"v0_invalid_checksum", "v0_fragments", "dropped_fragments", "v0_invalid_fragments"} {
		sum(k)
	}
	for _, section := range []string{"cache", "defragmenter"} {
		m, ok := stats[section].(map[string]any)
		if !ok {
			t.Fatalf("STAT %q missing", section)
		}
		for _, k := range []string{"evictions", "hits", "misses"} {
			if _, ok := m[k].(float64); !ok {
				t.Fatalf("STAT %s.%s missing", section, k)
			}
		}
	}
	kafka := stats["kafka"].(map[string]any)
	for _, k := range []string{"messageRate", "droppedMessageRate", "byteRate", "resendRate", "failedSendRate", "serializationErrorRate"} {
		if r := kafka[k].(map[string]any)["rate"].([]any); len(r) < 1 {
			t.Fatalf("kafka %s rate %v", k, r)
		}
	}
	handlers, ok := stats["handlers"].([]any)
	if !ok || len(handlers) != 1 {
		t.Fatalf("handlers %v", stats["handlers"])
	}
	if hd := handlers[0].(map[string]any); hd["name"] != "canonical" || hd["mapped"] != 1.0 || hd["events"] != 1.0 {
		t.Fatalf("handler %v", hd)
	}
	if num("uptime") < 0 {
		t.Fatalf("uptime %v", stats["uptime"])
	}
}

// TestTextNotUTF8IsKeptAsADeadLetter: the original client's send(String)
// writes ISO-8859-1, so "José" arrives as bytes that are not UTF-8, which no
// JSON reader takes. The message is counted unparseable and kept, byte for
// byte, as an undeliverable dead letter; never silently lost.
func TestTextNotUTF8IsKeptAsADeadLetter(t *testing.T) {
	h := newHarness(t, 0, udpOnly())
	c := h.dial(0)
	body := []byte(strings.Replace(string(canonical("vm-latin1")), `"p1"`, "\"Jos\xe9\"", 1))
	if err := c.Send(body, "rk:latin"); err != nil {
		t.Fatal(err)
	}
	h.waitStat(0, "unparseable", func(s Snapshot) bool { return s.Unparseable == 1 })
	dl := h.deadLetter()
	if string(dl.Body) != string(body) || !dl.Undeliverable || dl.Reason != "not_json" ||
		dl.Exchange != "plog" || dl.RoutingKey != "latin" {
		t.Fatalf("dead letter %+v", dl.DeadLetter)
	}
	if h.box.Depth() != 0 {
		t.Fatal("an event was made of it")
	}
}
