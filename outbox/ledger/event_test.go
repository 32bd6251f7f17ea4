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
