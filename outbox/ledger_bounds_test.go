package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// typed returns an event of event type typ, with its own id, a timestamp
// ts and project project.
func typed(i int, typ, project string, ts time.Time) []byte {
	return fmt.Appendf(nil, `{"event_id":"ev-%08d","timestamp":%q,"event_type":%q,"resource_type":"instance","project_id":%q,"source":{"exchange":"nova"}}`,
		i, ts.UTC().Format(time.RFC3339Nano), typ, project)
}

// drain delivers every event of o, n at a time, the API having answered
// no duplicates.
func drain(t *testing.T, o *outbox.Outbox, n int) {
	t.Helper()
	testkit.DeliverAll(t, o, n, 0)
	if d := o.Depth(); d != 0 {
		t.Fatalf("depth %d after every event was delivered", d)
	}
}

// checkBalanced fails unless every intake row of rep balances and no row
// names a string longer than ledger.MaxNameBytes.
func checkBalanced(t *testing.T, when string, rep *ledger.Report) {
	t.Helper()
	for _, p := range rep.Problems {
		if strings.Contains(p.Detail, "does not balance") {
			t.Fatalf("%s: %.300s", when, p.Detail)
		}
	}
	for _, row := range rep.Intake {
		if !row.Balanced {
			t.Fatalf("%s: row %.200s/%.200s does not balance: %+v", when, row.Source, row.Type, row.Counts)
		}
		if len(row.Source) > ledger.MaxNameBytes || len(row.Type) > ledger.MaxNameBytes {
			t.Fatalf("%s: a row keeps a name of %d bytes", when, max(len(row.Source), len(row.Type)))
		}
	}
	for _, row := range rep.Stored {
		if len(row.Project) > ledger.MaxNameBytes || len(row.ResourceType) > ledger.MaxNameBytes {
			t.Fatalf("%s: a stored row keeps a name of %d bytes", when, max(len(row.Project), len(row.ResourceType)))
		}
	}
}

// Forty notifications, each with a distinct event type of 1 MiB of '<'
// (six bytes each once escaped as JSON), commit in one batch: their rows
// are keyed by the types folded to at most MaxNameBytes, so the commit's
// ledger delta stays small and the commit is not refused; the rows balance
// once the events are delivered, also across a reopen.
func TestLedgerFoldsLongEventTypes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir)
	taken := time.Now()
	ts := taken.UTC().Add(-time.Minute)
	var events [][]byte
	tally := &ledger.Delta{}
	for i := range 40 {
		typ := fmt.Sprintf("%02d", i) + strings.Repeat("<", 1<<20)
		events = append(events, typed(i, typ, "p", ts))
		tally.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: typ}).Commit()
	}
	if err := o.AppendCounted(ctx, events, taken, tally); err != nil {
		t.Fatalf("the commit was refused: %v", err)
	}
	rep := readLedger(t, o)
	if c := totals(rep); c.Consumed != 40 || c.Events != 40 || c.Pending != 40 {
		t.Fatalf("before the delivery: %+v", c)
	}
	if len(rep.Intake) != 40 {
		t.Fatalf("%d intake rows, want one per type (40)", len(rep.Intake))
	}
	drain(t, o, 7)
	checkBalanced(t, "delivered", readLedger(t, o))
	o = reopen(t, o, dir)
	rep = readLedger(t, o)
	checkBalanced(t, "reopened", rep)
	if c := totals(rep); c.Consumed != 40 || c.Delivered != 40 || len(rep.Intake) != 40 {
		t.Fatalf("reopened: %d rows, %+v", len(rep.Intake), c)
	}
}

// More distinct event types in an hour than ledger.MaxRowsPerHour: the
// first keep their rows, the rest are counted in the hour's (other) row,
// which the metric counts. Events delivered after a reopen follow the
// decisions made when they were committed, so every row, (other) included,
// balances, and the totals are every notification and event.
func TestLedgerCapsDistinctKeysPerHour(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const n = ledger.MaxRowsPerHour + 300
	o := open(t, dir)
	taken := time.Now()
	ts := taken.UTC().Add(-time.Minute)
	for b := 0; b < n; b += 100 {
		var events [][]byte
		tally := &ledger.Delta{}
		for i := b; i < min(b+100, n); i++ {
			typ := fmt.Sprintf("type.%04d.%s", i, strings.Repeat("x", 200)) // folded too
			events = append(events, typed(i, typ, fmt.Sprintf("project-%04d", i), ts))
			tally.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: typ}).Commit()
		}
		if err := o.AppendCounted(ctx, events, taken, tally); err != nil {
			t.Fatal(err)
		}
	}
	// Half delivered before the reopen, half after.
	first, last, _, err := o.Peek(ctx, n/2)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Delivered(ctx, first, last, 0); err != nil {
		t.Fatal(err)
	}
	o.Close()
	reg := prometheus.NewRegistry()
	o = open(t, dir, func(op *outbox.Options) { op.Registerer = reg })
	defer o.Close()
	rep := readLedger(t, o)
	checkBalanced(t, "half delivered", rep)
	if c := totals(rep); c.Pending != int64(n-n/2) {
		t.Fatalf("pending %d, want %d", c.Pending, n-n/2)
	}
	drain(t, o, 64)
	rep = readLedger(t, o)
	checkBalanced(t, "delivered", rep)
	c := totals(rep)
	if c.Consumed != n || c.Committed != n || c.Events != n || c.Delivered != n {
		t.Fatalf("totals %+v, want %d of each", c, n)
	}
	if len(rep.Intake) != ledger.MaxRowsPerHour+1 {
		t.Fatalf("%d intake rows in the hour, want %d and (other)", len(rep.Intake), ledger.MaxRowsPerHour)
	}
	var other *ledger.IntakeRow
	for i := range rep.Intake {
		if rep.Intake[i].Type == ledger.Other {
			other = &rep.Intake[i]
		}
	}
	if other == nil || other.Consumed != n-ledger.MaxRowsPerHour || other.Delivered != n-ledger.MaxRowsPerHour {
		t.Fatalf("the (other) row: %+v", other)
	}
	// Stored rows: one per project up to the bound, the rest in (other).
	var stored, storedOther int64
	for _, s := range rep.Stored {
		stored += s.Delivered
		if s.Project == ledger.Other {
			storedOther += s.Delivered
		}
	}
	if stored != n || len(rep.Stored) > ledger.MaxRowsPerHour+2 || storedOther != n-ledger.MaxRowsPerHour {
		t.Fatalf("%d stored rows, %d delivered, %d of them in (other)", len(rep.Stored), stored, storedOther)
	}
	// The events delivered after the reopen were folded by this outbox.
	if got := testutil.ToFloat64(outbox.FoldedCounter(o, "intake")); got == 0 {
		t.Fatal("no folded intake row counted")
	}
}

// A timestamp the stored rows cannot place (year 1, before 2000, unreadable,
// or more than a day after the delivery) is counted under the hour of the
// delivery in the (other) / (timestamp out of range) row, not in the first
// hour of 1970; an old one from 2000 on keeps its hour.
func TestLedgerStoredHourOutOfRange(t *testing.T) {
	ctx := context.Background()
	o := open(t, t.TempDir())
	defer o.Close()
	now := time.Now()
	good := now.UTC().Add(-2 * time.Hour)
	events := [][]byte{
		typed(1, "compute.instance.exists", "p", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)),
		typed(2, "compute.instance.exists", "p", time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC)),
		[]byte(`{"event_id":"ev-3","timestamp":"yesterday","event_type":"compute.instance.exists","resource_type":"instance","project_id":"p","source":{"exchange":"nova"}}`),
		typed(4, "compute.instance.exists", "p", good),
		typed(5, "compute.instance.exists", "p", time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)), // older than the retention: kept
		typed(6, "compute.instance.exists", "p", now.Add(72*time.Hour)),
	}
	if err := o.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	drain(t, o, 10)
	rep := readLedger(t, o)
	got := map[ledger.StoredKey]int64{}
	for _, s := range rep.Stored {
		got[ledger.StoredKey{Hour: s.Hour.Unix(), Project: s.Project, ResourceType: s.ResourceType}] += s.Delivered
	}
	want := map[ledger.StoredKey]int64{
		{Hour: ledger.HourOf(good), Project: "p", ResourceType: "instance"}:                                        1,
		{Hour: ledger.HourOf(time.Date(2001, 2, 3, 4, 0, 0, 0, time.UTC)), Project: "p", ResourceType: "instance"}: 1,
		{Hour: ledger.HourOf(now), Project: ledger.Other, ResourceType: ledger.OutOfRange}:                         4,
	}
	if len(got) != len(want) {
		t.Fatalf("stored rows %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("stored rows %v, want %v", got, want)
		}
	}
	if n := testutil.ToFloat64(outbox.FoldedCounter(o, "stored")); n != 4 {
		t.Fatalf("%v stored rows counted as folded, want 4", n)
	}
}
