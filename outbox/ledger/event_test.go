package ledger_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

var readCases = []struct {
	ev   string
	want ledger.Event
}{
	{
		`{"event_id":"5c0e7c1e-3b9e-4a57-8b1d-2f1d9f5e6a01","event_type":"compute.instance.exists","timestamp":"2026-01-05T10:17:03.123456Z","project_id":"p1","resource_type":"instance","source":{"exchange":"nova"}}`,
		ledger.Event{Source: "nova", Type: "compute.instance.exists", Identity: 16376822015081660244,
			Stored: ledger.StoredKey{Hour: hour.Unix(), Project: "p1", ResourceType: "instance"}},
	},
	{
		`{"event_id":"e\u00e9","event_type":"volume.create.end","timestamp":"2026-01-05T11:00:00Z","project_id":"p2","resource_type":"volume","source":{"exchange":"cinder"}}`,
		ledger.Event{Source: "cinder", Type: "volume.create.end", Identity: 6666713257281159446,
			Stored: ledger.StoredKey{Hour: hour.Unix() + 3600, Project: "p2", ResourceType: "volume"}},
	},
	{`not json`, ledger.Event{Identity: 1314637874776970520, Stored: ledger.StoredKey{Hour: -1}}},
}

// Read answers an event's keys and its identity; the identities are those
// earlier releases computed (they are compared across outboxes), and one
// Reader gives the same answers however many events it read before.
func TestReaderReadsKeysAndIdentity(t *testing.T) {
	var r ledger.Reader
	for round := 0; round < 3; round++ {
		for _, c := range readCases {
			if got := r.Read([]byte(c.ev)); got != c.want {
				t.Fatalf("round %d: Read(%s) = %+v, want %+v", round, c.ev, got, c.want)
			}
		}
	}
}

// However many distinct values pass, the Reader keeps a bounded set and
// still answers each correctly.
func TestReaderBoundsItsNames(t *testing.T) {
	var r ledger.Reader
	for i := 0; i < 10000; i++ {
		p := fmt.Sprintf("project-%d", i)
		ev := fmt.Sprintf(`{"event_id":"x","event_type":"t","timestamp":"2026-01-05T10:00:00Z","project_id":%q,"resource_type":"instance","source":{"exchange":"nova"}}`, p)
		if got := r.Read([]byte(ev)).Stored.Project; got != p {
			t.Fatalf("event %d: project %q, want %q", i, got, p)
		}
	}
	if n := ledger.ReaderNames(&r); n > ledger.MaxNames {
		t.Fatalf("the Reader keeps %d names, more than its bound", n)
	}
}

// A long value is answered as the ledger names it (folded), and the Reader
// keeps no long string: its names take at most MaxNames × MaxNameBytes
// bytes whatever passes.
func TestReaderKeepsNoLongName(t *testing.T) {
	var r ledger.Reader
	long := strings.Repeat("t", 64<<10)
	for i := 0; i < 200; i++ {
		typ := fmt.Sprint(i) + long
		ev := fmt.Sprintf(`{"event_id":"x","event_type":%q,"timestamp":"2026-01-05T10:00:00Z","project_id":"p","resource_type":"instance","source":{"exchange":"nova"}}`, typ)
		if got := r.Read([]byte(ev)).Type; got != ledger.Name(typ) {
			t.Fatalf("event %d: type %.40q, want %q", i, got, ledger.Name(typ))
		}
	}
	if n := ledger.ReaderNameBytes(&r); n > ledger.MaxNames*ledger.MaxNameBytes {
		t.Fatalf("the Reader keeps %d bytes of names", n)
	}
}

func BenchmarkReaderRead(b *testing.B) {
	var r ledger.Reader
	ev := []byte(readCases[0].ev)
	b.ReportAllocs()
	for b.Loop() {
		r.Read(ev)
	}
}

// keysOf locates the members the ledger reads in ev the way a writer would
// say where it wrote them, from the bytes alone (not with the Reader's own
// parse): the content after `"name":"` up to the closing quote.
func keysOf(t *testing.T, ev string) ledger.Keys {
	t.Helper()
	at := func(member string) ledger.Span {
		i := strings.Index(ev, `"`+member+`":"`)
		if i < 0 {
			return ledger.Span{}
		}
		s := i + len(member) + 4
		e := s
		for ev[e] != '"' {
			if ev[e] == '\\' {
				e++
			}
			e++
		}
		return ledger.Span{Start: uint32(s), End: uint32(e)}
	}
	return ledger.Keys{Exchange: at("exchange"), Type: at("event_type"), Project: at("project_id"),
		ResourceType: at("resource_type"), Timestamp: at("timestamp"), ID: at("event_id")}
}

// Given where the members are, ReadKeyed answers what Read answers, escapes,
// long names and absent members included; with no keys, or keys that do not
// fit the event, it reads the event itself.
func TestReadKeyedAnswersWhatReadAnswers(t *testing.T) {
	evs := []string{
		readCases[0].ev,
		readCases[1].ev,
		`{"event_id":"a\"b","event_type":"` + strings.Repeat("x", 300) + `","timestamp":"2026-01-05T10:17:03Z","project_id":"p\\1","resource_type":"instance","source":{"exchange":"no\u0076a"}}`,
		`{"event_type":"t","timestamp":"not a time","source":{"exchange":"nova"}}`,
		`{"event_id":"x","event_type":"t","timestamp":"2026-01-05T10:00:00Z","project_id":"(other)","resource_type":"instance","source":{"exchange":"nova"}}`,
	}
	var keyed, read ledger.Reader
	for _, ev := range evs {
		want := read.Read([]byte(ev))
		k := keysOf(t, ev)
		if k == (ledger.Keys{}) {
			t.Fatalf("no keys found in %s", ev)
		}
		if got := keyed.ReadKeyed(ledger.Keyed{Bytes: []byte(ev), Keys: k}); got != want {
			t.Fatalf("ReadKeyed(%s) = %+v, Read = %+v", ev, got, want)
		}
		if got := keyed.ReadKeyed(ledger.Keyed{Bytes: []byte(ev)}); got != want {
			t.Fatalf("ReadKeyed without keys (%s) = %+v, Read = %+v", ev, got, want)
		}
		bad := k
		bad.Type.End = uint32(len(ev) + 1)
		if got := keyed.ReadKeyed(ledger.Keyed{Bytes: []byte(ev), Keys: bad}); got != want {
			t.Fatalf("ReadKeyed with keys past the end (%s) = %+v, Read = %+v", ev, got, want)
		}
	}
}

// novaEvent is a canonical event as the host writes it for a nova
// compute.instance.exists (745 bytes).
const novaEvent = `{"event_id":"6f1c2b9a-41d3-4e8a-9b7c-0d5e3f2a1b4c","timestamp":"2026-11-14T09:41:27.512334Z","event_type":"compute.instance.exists","service":"nova","resource_type":"instance","resource_id":"c3a1e5f7-92b4-4d6e-8f0a-1b2c3d4e5f60","project_id":"8d2f4a6c000000000000000000000000","user_id":"4b6d8f0a2c4e6a8c0e2a4c6e8a0c2e4a","action":"exists","attributes":{"flavor_name":"m1.medium","flavor_id":"2","vcpus":2,"memory_mb":4096,"root_gb":40,"ephemeral_gb":0,"disk_gb":40,"state":"active","image_ref":"a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d","availability_zone":"nova","host":"compute-17","launched_at":"2026-10-01T08:00:00Z"},"source":{"exchange":"nova","routing_key":"notifications.info","publisher_id":"nova-compute:compute-17","mapper":"nova@1.0.0"}}`

// BenchmarkReaderNova reads a canonical nova event as the outbox's append
// reads it: parsed (no keys), and from the keys its writer hands over.
func BenchmarkReaderNova(b *testing.B) {
	var t testing.T
	e := ledger.Keyed{Bytes: []byte(novaEvent), Keys: keysOf(&t, novaEvent)}
	for _, c := range []struct {
		name string
		e    ledger.Keyed
	}{{"keys=none", ledger.Keyed{Bytes: e.Bytes}}, {"keys=carried", e}} {
		b.Run(c.name, func(b *testing.B) {
			var r ledger.Reader
			b.ReportAllocs()
			for b.Loop() {
				r.ReadKeyed(c.e)
			}
		})
	}
}

func BenchmarkReaderReadKeyed(b *testing.B) {
	var t testing.T
	var r ledger.Reader
	e := ledger.Keyed{Bytes: []byte(readCases[0].ev), Keys: keysOf(&t, readCases[0].ev)}
	b.ReportAllocs()
	for b.Loop() {
		r.ReadKeyed(e)
	}
}
