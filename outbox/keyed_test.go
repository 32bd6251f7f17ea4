package outbox_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// keyed is ev with the Keys of where its members' values are: each value is
// found after `"<member>":"` (the exchange after `"exchange":"`).
func keyed(t *testing.T, ev string) ledger.Keyed {
	t.Helper()
	at := func(member string) ledger.Span {
		i := strings.Index(ev, `"`+member+`":"`)
		if i < 0 {
			t.Fatalf("no %s in %s", member, ev)
		}
		s := i + len(member) + 4
		return ledger.Span{Start: uint32(s), End: uint32(s + strings.IndexByte(ev[s:], '"'))}
	}
	return ledger.Keyed{Bytes: []byte(ev), Keys: ledger.Keys{Exchange: at("exchange"), Type: at("event_type"),
		Project: at("project_id"), ResourceType: at("resource_type"), Timestamp: at("timestamp"), ID: at("event_id")}}
}

// An event handed over with its keys is counted from them, without being
// parsed: bytes no JSON reader accepts are counted under the exchange and
// event type their keys locate, where a parse would find none.
func TestAppendKeyedCountsFromTheKeys(t *testing.T) {
	o := open(t, t.TempDir())
	defer o.Close()
	ctx := context.Background()
	taken := time.Date(2026, 1, 5, 10, 17, 0, 0, time.UTC)
	ev := keyed(t, `not JSON "exchange":"nova" "event_type":"compute.instance.exists" "project_id":"p1" "resource_type":"instance" "timestamp":"2026-01-05T10:00:00Z" "event_id":"e1"`)
	if err := o.AppendKeyed(ctx, []ledger.Keyed{ev}, taken, nil); err != nil {
		t.Fatal(err)
	}
	d, err := o.Ledger(ctx, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	k := ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "compute.instance.exists"}
	if c := d.Intake[k]; c == nil || c.Events != 1 {
		t.Fatalf("the event is not counted under its keys %+v: %+v", k, d.Intake)
	}
}

// The same events appended with their keys and without give the same rows,
// pending and delivered (the fixture corpus through the real modules:
// mappers.TestBuiltinLedgerRowsWithAndWithoutKeys).
func TestAppendKeyedSameRowsAsUnkeyed(t *testing.T) {
	ctx := context.Background()
	taken := time.Now()
	evs := canonical(0, 40, taken)
	withKeys, without := open(t, t.TempDir()), open(t, t.TempDir())
	defer withKeys.Close()
	defer without.Close()
	var ks []ledger.Keyed
	for _, ev := range evs {
		ks = append(ks, keyed(t, string(ev)))
	}
	if err := withKeys.AppendKeyed(ctx, ks, taken, tally(taken, 40, 0)); err != nil {
		t.Fatal(err)
	}
	if err := without.AppendCounted(ctx, evs, taken, tally(taken, 40, 0)); err != nil {
		t.Fatal(err)
	}
	same := func(when string) {
		t.Helper()
		a, b := testkit.WholeLedger(t, withKeys), testkit.WholeLedger(t, without)
		if len(a.Intake) == 0 || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: with keys %+v, without %+v", when, readLedger(t, withKeys), readLedger(t, without))
		}
	}
	same("pending")
	testkit.DeliverAll(t, withKeys, 100, -1)
	testkit.DeliverAll(t, without, 100, -1)
	same("delivered")
}
