package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

func undeliverable(n, size int) []outbox.DeadLetter {
	out := letters(n, size)
	for i := range out {
		out[i].Reason, out[i].Undeliverable = "not_json", true
		out[i].Exchange, out[i].RoutingKey = "nova", "notifications.info"
	}
	return out
}

// Bodies no replay can deliver have a budget of their own: they never
// refuse a batch (the input never pauses for them), they are kept while the
// budget lasts and dropped past it, counted and logged with exchange,
// routing key and size; letters a replay could deliver keep the area's
// bound and its pause, undeliverable ones held not counting against it.
// The budget survives a restart, and removing letters gives it back.
func TestUndeliverableLettersHaveTheirOwnBudget(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	opts := func(op *outbox.Options) {
		op.MaxDeadLetters = 3
		op.MaxUndeliverable = 5
		op.MaxUndeliverableBytes = 1 << 20
		op.Registerer = reg
		op.Logger = zerolog.New(&logs)
	}
	o := open(t, dir, opts)
	// Far past both bounds, in one batch and then one by one: never refused.
	if err := o.AppendDeadLetters(ctx, undeliverable(8, 10)); err != nil {
		t.Fatalf("undeliverable letters past their budget refused the batch: %v", err)
	}
	for range 4 {
		if err := o.AppendDeadLetters(ctx, undeliverable(1, 10)); err != nil {
			t.Fatalf("undeliverable letter: %v", err)
		}
	}
	if o.DeadLetterCount() != 5 || o.DeadLettersFull() != nil {
		t.Fatalf("held %d (want the budget, 5), full %v", o.DeadLetterCount(), o.DeadLettersFull())
	}
	if got := testkit.Metric(t, reg, "tally_collector_deadletter_undeliverable_dropped_total"); got != 7 {
		t.Errorf("dropped_total = %v, want 7", got)
	}
	if got := testkit.Metric(t, reg, "tally_collector_deadletter_undeliverable"); got != 5 {
		t.Errorf("undeliverable gauge = %v, want 5", got)
	}
	if got := testkit.Metric(t, reg, "tally_collector_deadletter_full"); got != 0 {
		t.Errorf("deadletter_full = %v with only undeliverable letters", got)
	}
	for _, want := range []string{`"exchange":"nova"`, `"routing_key":"notifications.info"`, `"size":`, "dropped"} {
		if !bytes.Contains(logs.Bytes(), []byte(want)) {
			t.Errorf("the drop is not logged with %s:\n%s", want, logs.String())
		}
	}
	// Letters a replay could deliver: their bound (3) is theirs alone, and
	// past it the batch is refused whole, undeliverable letters included.
	if err := o.AppendDeadLetters(ctx, letters(3, 10)); err != nil {
		t.Fatalf("replayable letters under their bound: %v", err)
	}
	mixed := append(letters(1, 10), undeliverable(1, 10)...)
	if err := o.AppendDeadLetters(ctx, mixed); !errors.Is(err, outbox.ErrFull) || !errors.Is(err, outbox.ErrDeadLettersFull) {
		t.Fatalf("a replayable letter past the bound: %v", err)
	}
	if o.DeadLetterCount() != 8 {
		t.Fatalf("held %d after a refused batch, want 8", o.DeadLetterCount())
	}
	// Still no pause for undeliverable letters alone while the area is full.
	if err := o.AppendDeadLetters(ctx, undeliverable(1, 10)); err != nil {
		t.Fatalf("undeliverable letter at the replayable bound: %v", err)
	}
	list, err := o.ListDeadLetters(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var first uint64
	for _, l := range list {
		if l.Undeliverable {
			first = l.Seq
			break
		}
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}

	// After a restart the budget is where it was: one more is dropped.
	reg = prometheus.NewRegistry()
	o = open(t, dir, opts)
	defer o.Close()
	if err := o.AppendDeadLetters(ctx, undeliverable(1, 10)); err != nil {
		t.Fatal(err)
	}
	if o.DeadLetterCount() != 8 || testkit.Metric(t, reg, "tally_collector_deadletter_undeliverable_dropped_total") != 1 {
		t.Fatalf("after a restart: held %d, dropped %v", o.DeadLetterCount(),
			testkit.Metric(t, reg, "tally_collector_deadletter_undeliverable_dropped_total"))
	}
	// A purge gives the budget back.
	if n, err := o.DeleteDeadLetters(ctx, first); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if err := o.AppendDeadLetters(ctx, undeliverable(1, 10)); err != nil {
		t.Fatal(err)
	}
	if o.DeadLetterCount() != 8 || testkit.Metric(t, reg, "tally_collector_deadletter_undeliverable") != 5 {
		t.Fatalf("after a purge: held %d, undeliverable %v", o.DeadLetterCount(), testkit.Metric(t, reg, "tally_collector_deadletter_undeliverable"))
	}
}

// The byte budget holds as the count budget does.
func TestUndeliverableByteBudget(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	o := open(t, t.TempDir(), func(op *outbox.Options) {
		op.MaxUndeliverableBytes = 10 << 10
		op.Registerer = reg
	})
	defer o.Close()
	for range 20 {
		if err := o.AppendDeadLetters(ctx, undeliverable(1, 1<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if o.DeadLetterBytes() > 10<<10 || o.DeadLetterCount() == 0 {
		t.Fatalf("held %d letters of %d bytes, budget 10 KiB", o.DeadLetterCount(), o.DeadLetterBytes())
	}
	if got := testkit.Metric(t, reg, "tally_collector_deadletter_undeliverable_dropped_total"); got != float64(20-o.DeadLetterCount()) {
		t.Errorf("dropped_total = %v, want %d", got, 20-o.DeadLetterCount())
	}
}

// An undeliverable body dropped past its budget is still accounted for in
// the ledger, in the same write: as skipped (undeliverable_dropped), not as
// a dead letter held. A batch whose every letter is dropped still writes
// its counts.
func TestUndeliverableDroppedIsSkippedInTheLedger(t *testing.T) {
	ctx := context.Background()
	o := open(t, t.TempDir(), func(op *outbox.Options) {
		op.MaxUndeliverable = 2
		op.MaxUndeliverableBytes = 1 << 20
	})
	defer o.Close()
	taken := time.Now()
	counted := func(n int) *ledger.Delta {
		d := &ledger.Delta{}
		r := d.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: ""})
		for range n {
			r.DeadLetter("not_json")
		}
		return d
	}
	// Three in one batch: two kept, one dropped. Then a batch of two, both
	// dropped.
	if err := o.AppendDeadLettersCounted(ctx, undeliverable(3, 10), counted(3)); err != nil {
		t.Fatal(err)
	}
	if err := o.AppendDeadLettersCounted(ctx, undeliverable(2, 10), counted(2)); err != nil {
		t.Fatal(err)
	}
	if o.DeadLetterCount() != 2 {
		t.Fatalf("held %d letters, want 2", o.DeadLetterCount())
	}
	c := totals(readLedger(t, o))
	if c.Consumed != 5 || c.DeadLettered["not_json"] != 2 || c.Skipped[outbox.SkipUndeliverableDropped] != 3 {
		t.Fatalf("ledger: consumed %d, dead-lettered %v, skipped %v; want 5, not_json 2, %s 3",
			c.Consumed, c.DeadLettered, c.Skipped, outbox.SkipUndeliverableDropped)
	}
	if !c.Balanced() {
		t.Fatalf("ledger does not balance: %+v", c)
	}
}
