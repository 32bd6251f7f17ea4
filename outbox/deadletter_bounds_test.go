package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
)

func letters(n, size int) []outbox.DeadLetter {
	out := make([]outbox.DeadLetter, n)
	for i := range out {
		out[i] = outbox.DeadLetter{Body: []byte(fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("p", size))), Reason: "trap"}
	}
	return out
}

// The dead-letter area is bounded in letters and in bytes. At a bound nothing
// is written, the error wraps ErrFull (the consumer pauses as at the event
// bound) and ErrDeadLettersFull, the state shows in DeadLettersFull (for
// readiness) and the metrics, and an event the sender sets aside stays where
// it is. Removing letters makes room again.
func TestDeadLetterBounds(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	o := open(t, t.TempDir(), func(op *outbox.Options) {
		op.MaxDeadLetters = 3
		op.MaxDeadLetterBytes = 1 << 20
		op.Registerer = reg
	})
	defer o.Close()
	if err := o.AppendDeadLetters(ctx, letters(3, 10)); err != nil {
		t.Fatal(err)
	}
	if err := o.DeadLettersFull(); err != nil {
		t.Fatalf("full before any refusal: %v", err)
	}
	err := o.AppendDeadLetters(ctx, letters(1, 10))
	if !errors.Is(err, outbox.ErrFull) || !errors.Is(err, outbox.ErrDeadLettersFull) {
		t.Fatalf("past the bound: %v", err)
	}
	if o.DeadLetterCount() != 3 || !errors.Is(o.DeadLettersFull(), outbox.ErrDeadLettersFull) {
		t.Fatalf("count %d, full %v", o.DeadLetterCount(), o.DeadLettersFull())
	}
	if testkit.Metric(t, reg, "tally_collector_deadletter_full") != 1 || testkit.Metric(t, reg, "tally_collector_deadletter_refused_total") != 1 {
		t.Fatal("the bound does not show in the metrics")
	}
	// The sender cannot set an event aside either: it stays at the head.
	if err := o.Append(ctx, events(0, 2, 50)); err != nil {
		t.Fatal(err)
	}
	if err := o.SetAside(ctx, 1, outbox.ReasonRefusedByAPI, "HTTP 400"); !errors.Is(err, outbox.ErrDeadLettersFull) {
		t.Fatalf("set aside at the bound: %v", err)
	}
	if f, _, evs, _ := o.Peek(ctx, 10); f != 1 || len(evs) != 2 {
		t.Fatalf("the event left the head: first %d, %d events", f, len(evs))
	}
	// Room again after a removal.
	if n, err := o.DeleteDeadLetters(ctx, 1); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if o.DeadLettersFull() != nil || testkit.Metric(t, reg, "tally_collector_deadletter_full") != 0 {
		t.Fatal("still full after a removal")
	}
	if err := o.SetAside(ctx, 1, outbox.ReasonRefusedByAPI, "HTTP 400"); err != nil {
		t.Fatal(err)
	}

	// The byte bound.
	ob := open(t, t.TempDir(), func(op *outbox.Options) { op.MaxDeadLetterBytes = 10 << 10 })
	defer ob.Close()
	if err := ob.AppendDeadLetters(ctx, letters(1, 20<<10)); err != nil {
		t.Fatalf("an empty area takes one batch whatever its size: %v", err)
	}
	if err := ob.AppendDeadLetters(ctx, letters(1, 10)); !errors.Is(err, outbox.ErrDeadLettersFull) {
		t.Fatalf("past the byte bound: %v", err)
	}
	if b := ob.DeadLetterBytes(); b < 20<<10 || b > 30<<10 { // the body is stored in base64
		t.Fatalf("bytes held %d", b)
	}
}

// Bytes held and the age of the oldest letter are kept across restarts and
// follow removals.
func TestDeadLetterBytesAndOldestAge(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir)
	ls := letters(3, 100)
	now := time.Now().UTC()
	ls[0].At, ls[1].At, ls[2].At = now.Add(-3*time.Hour), now.Add(-2*time.Hour), now.Add(-time.Hour)
	if err := o.AppendDeadLetters(ctx, ls); err != nil {
		t.Fatal(err)
	}
	bytes := o.DeadLetterBytes()
	if age := o.OldestDeadLetterAge(); age < 3*time.Hour || age > 3*time.Hour+time.Minute {
		t.Fatalf("oldest age %s", age)
	}
	o = reopen(t, o, dir)
	if o.DeadLetterBytes() != bytes {
		t.Fatalf("bytes %d after reopen, %d before", o.DeadLetterBytes(), bytes)
	}
	if _, err := o.DeleteDeadLetters(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if age := o.OldestDeadLetterAge(); age < 2*time.Hour || age > 2*time.Hour+time.Minute {
		t.Fatalf("oldest age %s after removing the oldest", age)
	}
	if b := o.DeadLetterBytes(); b >= bytes || b < bytes*2/3-10 {
		t.Fatalf("bytes %d after removing one of three (%d)", b, bytes)
	}
	if _, err := o.DeleteDeadLetters(ctx, 2, 3); err != nil {
		t.Fatal(err)
	}
	if o.OldestDeadLetterAge() != 0 || o.DeadLetterBytes() != 0 {
		t.Fatalf("empty area: age %s bytes %d", o.OldestDeadLetterAge(), o.DeadLetterBytes())
	}
}

// A dead letter's body is stored with its credentials already replaced: the
// Keystone token of an oslo envelope never reaches a file of the outbox.
func TestDeadLetterCredentialsRedactedOnDisk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := open(t, dir)
	const token = "gAAAAABkeystone-token-that-must-not-reach-the-disk"
	const password = "hunter2-database-password"
	inner := fmt.Sprintf(`{"event_type":"compute.instance.create.end","_context_auth_token":%q,"payload":{"connection_info":{"auth_password":%q},"host":"c1"}}`, token, password)
	body := fmt.Sprintf(`{"oslo.version":"2.0","oslo.message":%q}`, inner)
	if err := o.AppendDeadLetters(ctx, []outbox.DeadLetter{{Body: []byte(body), Reason: "trap"}}); err != nil {
		t.Fatal(err)
	}
	d, err := o.GetDeadLetter(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(d.Body, []byte(token)) || bytes.Contains(d.Body, []byte(password)) || !bytes.Contains(d.Body, []byte(`c1`)) {
		t.Fatalf("stored body %s", d.Body)
	}
	o.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{token, password} {
			if bytes.Contains(b, []byte(secret)) {
				t.Fatalf("%s holds a credential of the dead letter", filepath.Base(f))
			}
		}
	}
}

// Dead letters that together pass Badger's largest transaction (15% of a
// memory table, about 1.2 MiB with the defaults) are written in several:
// four letters of 600 KiB, two of them undeliverable, are all kept, with
// their bodies and their budget's counts. Before, the one transaction was
// refused ("Txn is too big to fit into one request"), so a batch holding
// them was requeued again and again and consumption stopped.
func TestAppendDeadLettersLargerThanATransaction(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	o := open(t, t.TempDir(), func(op *outbox.Options) { op.Registerer = reg })
	defer o.Close()
	big := letters(4, 600<<10)
	big[1].Undeliverable, big[3].Undeliverable = true, true
	if err := o.AppendDeadLetters(ctx, big); err != nil {
		t.Fatalf("four letters of 600 KiB: %v", err)
	}
	if n := o.DeadLetterCount(); n != 4 {
		t.Fatalf("%d dead letters held, want 4", n)
	}
	got, err := o.ListDeadLetters(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("listed %d letters, want 4", len(got))
	}
	for i, l := range got {
		if !bytes.Equal(l.Body, big[i].Body) || l.Undeliverable != big[i].Undeliverable {
			t.Errorf("letter %d: body of %d bytes, undeliverable %v; want %d bytes, %v", i, len(l.Body), l.Undeliverable, len(big[i].Body), big[i].Undeliverable)
		}
	}
	if g := testkit.Metric(t, reg, "tally_collector_deadletter_undeliverable"); g != 2 {
		t.Errorf("deadletter_undeliverable = %v, want 2", g)
	}
	if o.Healthy() != nil {
		t.Errorf("outbox unhealthy after the append: %v", o.Healthy())
	}
}
