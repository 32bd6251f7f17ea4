package mappers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// corpusEvents maps every fixture input of every built-in mapper through its
// compiled module, twice: with the source of a broker delivery, and with an
// exchange that needs escaping and the event ids derived from the body (as
// plog and the channel map), so that every way the host writes a member the
// ledger reads is among them. It returns the events with the keys the host
// wrote them with, and checks that each event has keys that read as the
// ledger's Reader reads the event's bytes.
func corpusEvents(t *testing.T) []ledger.Keyed {
	t.Helper()
	mods := loadBuiltin(t)
	ctx := context.Background()
	var keyed, parsed ledger.Reader
	var out []ledger.Keyed
	for _, s := range services {
		cases, err := fixture.Cases(filepath.Join(s, "testdata"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			in, err := os.ReadFile(c.In)
			if err != nil {
				t.Fatal(err)
			}
			var idx jsonindex.Index
			if err := idx.Parse(in); err != nil {
				idx.SetRaw(in)
			}
			for _, src := range []runtime.Source{
				testSource,
				{Exchange: "ex\"change\\é\u2028", RoutingKey: "notifications.info", DeriveID: in},
			} {
				res, err := mods[s].Map(ctx, &idx, src)
				if err != nil {
					continue // a dead letter: no events
				}
				if len(res.Keys) != len(res.Events) {
					t.Fatalf("%s/%s: %d events, %d keys", s, c.Name, len(res.Events), len(res.Keys))
				}
				for i, ev := range res.Events {
					e := ledger.Keyed{Bytes: ev, Keys: res.Keys[i]}
					if e.Keys == (ledger.Keys{}) {
						t.Fatalf("%s/%s: event %d has no keys", s, c.Name, i)
					}
					got, want := keyed.ReadKeyed(e), parsed.Read(ev)
					if got != want {
						t.Fatalf("%s/%s: event %d: the keys the host wrote read %+v, the event reads %+v\n%s",
							s, c.Name, i, got, want, ev)
					}
					if got.Source == "" || got.Type == "" || got.Stored.Project == "" || got.Stored.ResourceType == "" || got.Stored.Hour == ledger.NoHour {
						t.Fatalf("%s/%s: event %d: a key is empty: %+v", s, c.Name, i, got)
					}
					out = append(out, e)
				}
			}
		}
	}
	return out
}

// TestBuiltinLedgerKeys: for every event the built-in modules write from
// the fixture corpus, the ledger keys the host hands over with it read as
// the ledger's Reader reads the event itself.
func TestBuiltinLedgerKeys(t *testing.T) {
	if n := len(corpusEvents(t)); n < 200 {
		t.Fatalf("only %d events from the fixture corpus", n)
	}
}

// TestBuiltinLedgerRowsWithAndWithoutKeys commits the events of the fixture
// corpus to two outboxes, with their keys and without (the outbox then
// parses each event), and compares the ledgers: the same rows while the
// events are pending, and once they are delivered.
func TestBuiltinLedgerRowsWithAndWithoutKeys(t *testing.T) {
	events := corpusEvents(t)
	bare := make([][]byte, len(events))
	for i, e := range events {
		bare[i] = e.Bytes
	}
	ctx := context.Background()
	open := func() *outbox.Outbox {
		ob, err := outbox.Open(outbox.Options{Dir: t.TempDir(), Logger: zerolog.Nop(), MinFreeBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ob.Close() })
		return ob
	}
	// The delivery counts an event whose timestamp is out of range, and a
	// stored key past the bound, under the hour it runs in: the two runs
	// compare only when no hour began in between, so a run across an hour
	// is made again.
	for attempt := 0; attempt < 2; attempt++ {
		start := ledger.HourOf(time.Now())
		withKeys, without := open(), open()
		taken := time.Date(2026, 1, 5, 10, 17, 0, 0, time.UTC)
		const batch = 37 // batches that do not line up with the fixtures
		for i := 0; i < len(events); i += batch {
			j := min(i+batch, len(events))
			tally := &ledger.Delta{}
			tally.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "t"}).Consumed = int64(j - i)
			if err := withKeys.AppendKeyed(ctx, events[i:j], taken, tally); err != nil {
				t.Fatal(err)
			}
			if err := without.AppendCounted(ctx, bare[i:j], taken, tally); err != nil {
				t.Fatal(err)
			}
		}
		compare := func(when string) {
			t.Helper()
			a, err := withKeys.Ledger(ctx, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := without.Ledger(ctx, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Intake) == 0 || len(a.Stored) == 0 && when == "delivered" {
				t.Fatalf("%s: no rows: %+v", when, a)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s: the ledger with keys differs from the ledger without:\n%s\n%s", when, dump(a), dump(b))
			}
		}
		compare("pending")
		testkit.DeliverAll(t, withKeys, 100, -1)
		testkit.DeliverAll(t, without, 100, -1)
		if ledger.HourOf(time.Now()) != start {
			continue
		}
		compare("delivered")
		return
	}
	t.Fatal("two runs began in one hour and ended in the next")
}

// dump lists the rows of d, one a line.
func dump(d *ledger.Delta) string {
	s := ""
	for k, c := range d.Intake {
		s += fmt.Sprintf("intake %+v: %+v\n", k, *c)
	}
	for k, c := range d.Stored {
		s += fmt.Sprintf("stored %+v: %+v\n", k, *c)
	}
	return s
}
