package ledger_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// A name longer than MaxNameBytes, not valid UTF-8, holding a control
// character or spelling one of the ledger's own row names is folded to a
// printable prefix and a hash: short, stable, distinct for distinct inputs.
// Other names are kept as they are.
func TestNameFolds(t *testing.T) {
	long := strings.Repeat("<", 1<<20)
	for _, s := range []string{"compute.instance.exists", "", strings.Repeat("a", ledger.MaxNameBytes), "ünïcode"} {
		if got := ledger.Name(s); got != s {
			t.Fatalf("Name(%q) = %q, want it kept", s, got)
		}
	}
	seen := map[string]string{}
	for _, s := range []string{long, long + "x", strings.Repeat("a", ledger.MaxNameBytes+1), "bad\xffutf8", "tab\there", "nul\x00", ledger.Other, ledger.OutOfRange, ledger.TooMany} {
		got := ledger.Name(s)
		if got == s || len(got) > ledger.MaxNameBytes || !utf8.ValidString(got) || ledger.Name(got) != got {
			t.Fatalf("Name(%.40q) = %q: not folded, too long, invalid or not stable", s, got)
		}
		if prev, ok := seen[got]; ok {
			t.Fatalf("%.40q and %.40q fold to the same %q", prev, s, got)
		}
		seen[got] = s
	}
	if got := ledger.Name(long); !strings.HasPrefix(got, long[:96]+"~") {
		t.Fatalf("Name(long) = %q: not its prefix", got)
	}
	// A row keyed by the long name encodes to a bounded value.
	d := &ledger.Delta{}
	d.Row(ledger.Key{Hour: hour.Unix(), Source: long, Type: long}).Commit()
	b, err := d.Encode()
	if err != nil || len(b) > 512 {
		t.Fatalf("encoded row: %d bytes, %v", len(b), err)
	}
	var back ledger.Delta
	if err := back.Decode(b); err != nil || back.Intake[ledger.Key{Hour: hour.Unix(), Source: ledger.Name(long), Type: ledger.Name(long)}] == nil {
		t.Fatalf("decoded %v: %+v", err, back.Intake)
	}
	// An input names the row by the string it read: Redirect finds it.
	d.Row(ledger.Key{Hour: hour.Unix(), Source: long, Type: long}).DeadLetter("undeliverable")
	if !d.Redirect(long, long, "undeliverable", "dropped") {
		t.Fatal("Redirect did not find the row of a long name")
	}
}

// A Cap admits MaxRowsPerHour keys per hour; a key past them is counted in
// the hour's (other) row with every later count of it, including those that
// admit nothing (delivered), and after a Learn from the rows written;
// every row, (other) included, balances.
func TestCapFoldsPastTheBound(t *testing.T) {
	c := ledger.NewCap(3)
	h := hour.Unix()
	key := func(i int) ledger.Key { return ledger.Key{Hour: h, Source: "nova", Type: string(rune('a' + i))} }
	written := &ledger.Delta{}
	for i := range 5 {
		d := &ledger.Delta{}
		r := d.Row(key(i))
		r.Commit()
		r.Events++
		out, f := c.Apply(d, true, h)
		if want := i >= 3; (f.Intake == 1) != want {
			t.Fatalf("key %d: folded %d", i, f.Intake)
		}
		written.Add(out)
	}
	// A key seen first by a count that admits nothing goes to (other) too.
	if got := c.Intake(ledger.Key{Hour: h + 3600, Source: "nova", Type: "z"}); !got.IsOther() {
		t.Fatalf("an unknown key maps to %+v", got)
	}
	learnt := ledger.NewCap(3)
	learnt.Learn(written, h)
	for _, cp := range []*ledger.Cap{c, learnt} {
		for i := range 5 {
			d := &ledger.Delta{}
			d.Row(key(i)).Delivered++
			out, _ := cp.Apply(d, false, h)
			written.Add(out)
		}
		// A new key in a full hour is folded even when it may admit.
		d := &ledger.Delta{}
		d.Row(key(9)).Commit()
		out, f := cp.Apply(d, true, h)
		if f.Intake != 1 {
			t.Fatalf("a new key in a full hour was admitted")
		}
		written.Add(out)
	}
	rep, err := ledger.NewReport(written, hour, hour.Add(time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Intake) != 4 {
		t.Fatalf("%d rows, want 3 and (other)", len(rep.Intake))
	}
	for _, row := range rep.Intake {
		if row.Consumed != row.Settled() || row.Events != row.Delivered/2 {
			t.Fatalf("row %+v", row)
		}
	}
	if other := rep.Intake[0]; other.Type != ledger.Other || other.Consumed != 4 || other.Events != 2 {
		t.Fatalf("(other) row %+v", other)
	}
	enc, _ := json.Marshal(rep)
	if !strings.Contains(string(enc), `"event_type":"(other)"`) {
		t.Fatalf("report %s", enc)
	}
}

// Reconcile counts the API's keys the ledger folded into an hour's (other)
// row in that row, and names the API's keys as the ledger does.
func TestReconcileFoldedRows(t *testing.T) {
	h := hour.Unix()
	long := strings.Repeat("p", 300)
	d := &ledger.Delta{}
	d.StoredRow(ledger.StoredKey{Hour: h, Project: "a", ResourceType: "instance"}).Delivered = 2
	d.StoredRow(ledger.StoredKey{Hour: h, Project: long, ResourceType: "instance"}).Delivered = 1
	d.StoredRow(ledger.StoredKey{Hour: h, Project: ledger.Other, ResourceType: ledger.Other}).Delivered = 3
	api := map[ledger.StoredKey]int64{
		{Hour: h, Project: "a", ResourceType: "instance"}:  2,
		{Hour: h, Project: long, ResourceType: "instance"}: 1,
		{Hour: h, Project: "b", ResourceType: "instance"}:  1,
		{Hour: h, Project: "c", ResourceType: "volume"}:    2,
	}
	if r := ledger.Reconcile(d, api, hour, hour.Add(time.Hour)); len(r.Differences) != 0 || r.Expected != 6 || r.API != 6 {
		t.Fatalf("%+v", r)
	}
	api[ledger.StoredKey{Hour: h, Project: "d", ResourceType: "volume"}] = 1
	if r := ledger.Reconcile(d, api, hour, hour.Add(time.Hour)); len(r.Differences) != 1 || r.Differences[0].Project != ledger.Other {
		t.Fatalf("%+v", r)
	}
}

// The worst row for its size (names of MaxNameBytes that each escape to
// twice their length, every count at its largest, every reason) encodes
// within MaxRowBytes, intake and stored.
func TestRowEncodingBound(t *testing.T) {
	name := strings.Repeat(`"`, ledger.MaxNameBytes)
	if ledger.Name(name) != name {
		t.Fatal("the test's name is folded")
	}
	const big = 1<<63 - 1
	reasons := map[string]int64{}
	for _, r := range []string{"unclaimed", "event_too_large", "body_too_large", "not_json", "no_event_type", "versioned", "bad_compression", "decompressed_too_large", "decoder_limit"} {
		reasons[r] = big
	}
	d := &ledger.Delta{}
	*d.Row(ledger.Key{Hour: -big + 1, Source: name, Type: name}) = ledger.Counts{Consumed: big, Committed: big, Skipped: reasons, DeadLettered: reasons,
		Events: big, Delivered: big, Duplicates: big, Refused: big, Damaged: big, Replayed: big}
	b, err := d.Encode()
	t.Logf("the worst intake row takes %d bytes", len(b))
	if err != nil || len(b) > ledger.MaxRowBytes {
		t.Fatalf("an intake row takes %d bytes (%v), bound %d", len(b), err, ledger.MaxRowBytes)
	}
	d = &ledger.Delta{}
	*d.StoredRow(ledger.StoredKey{Hour: -big + 1, Project: name, ResourceType: name}) = ledger.StoredCounts{Delivered: big, Copies: big}
	if b, err = d.Encode(); err != nil || len(b) > ledger.MaxRowBytes {
		t.Fatalf("a stored row takes %d bytes (%v), bound %d", len(b), err, ledger.MaxRowBytes)
	}
}

// Forget drops the keys of the hours no count was written to since its
// cutoff, whatever hour they name, and keeps the others.
func TestCapForgets(t *testing.T) {
	c := ledger.NewCap(0)
	h := hour.Unix()
	k := func(i int) ledger.Key { return ledger.Key{Hour: h - int64(i)*3600, Source: "nova", Type: "t"} }
	for i := range 3 { // hour h-i written at h+i
		d := &ledger.Delta{}
		d.Row(k(i)).Commit()
		c.Apply(d, true, h+int64(i)*3600)
	}
	c.Forget(h + 3600)
	for i, want := range []bool{false, true, true} {
		if got := c.Intake(k(i)) == k(i); got != want {
			t.Fatalf("hour %d: kept %v, want %v", i, got, want)
		}
	}
}
