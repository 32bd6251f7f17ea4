package ledger_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

var hour = time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)

func sample() *ledger.Delta {
	d := &ledger.Delta{}
	k := ledger.Key{Hour: hour.Unix(), Source: "nova", Type: "compute.instance.exists"}
	r := d.Row(k)
	r.Commit()
	r.Commit()
	r.Skip("unclaimed")
	r.DeadLetter("trap")
	r.Events, r.Delivered, r.Pending = 2, 1, 1
	n := d.Row(ledger.Key{Hour: hour.Add(time.Hour).Unix(), Source: "neutron", Type: "port.create.end"})
	n.Consumed, n.Committed, n.Events = 3, 2, 2 // one notification not settled
	n.Delivered = 2
	s := d.StoredRow(ledger.StoredKey{Hour: hour.Unix(), Project: "p1", ResourceType: "instance"})
	s.Delivered, s.Copies = 3, 1
	return d
}

// A row balances when every notification consumed is settled once and every
// event is delivered, refused or pending; the report names each hour that
// does not, and each hour with events pending.
func TestReportProblems(t *testing.T) {
	rep, err := ledger.NewReport(sample(), time.Time{}, time.Time{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Intake) != 2 || !rep.Intake[0].Balanced || rep.Intake[1].Balanced {
		t.Fatalf("rows %+v", rep.Intake)
	}
	if len(rep.Problems) != 2 || !strings.Contains(rep.Problems[0].Detail, "1 events still in the outbox") ||
		!strings.Contains(rep.Problems[1].Detail, "does not balance: consumed 3, settled 2") || !strings.Contains(rep.Problems[1].Detail, "neutron/port.create.end") {
		t.Fatalf("problems %+v", rep.Problems)
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "1 (unclaimed 1)") || !strings.Contains(b.String(), "NO") {
		t.Fatalf("text:\n%s", b.String())
	}
	if _, err := ledger.NewReport(sample(), time.Time{}, time.Time{}, "project"); err == nil {
		t.Fatal("an unknown grouping was accepted")
	}
	byHour, err := ledger.NewReport(sample(), time.Time{}, time.Time{}, ledger.ByHour)
	if err != nil || len(byHour.Intake) != 2 || byHour.Intake[0].Consumed != 4 {
		t.Fatalf("by hour: %v %+v", err, byHour.Intake)
	}
}

// A delta survives its stored form, adds up, and a report turns back into
// the delta it was made of (how replicas are merged).
func TestEncodeMerge(t *testing.T) {
	b, err := sample().Encode()
	if err != nil {
		t.Fatal(err)
	}
	var d ledger.Delta
	if err := d.Decode(b); err != nil {
		t.Fatal(err)
	}
	d.Add(sample())
	rep, err := ledger.NewReport(&d, time.Time{}, time.Time{}, "")
	if err != nil {
		t.Fatal(err)
	}
	back := rep.Delta()
	c := back.Intake[ledger.Key{Hour: hour.Unix(), Source: "nova", Type: "compute.instance.exists"}]
	if c == nil || c.Consumed != 8 || c.Skipped["unclaimed"] != 2 || c.DeadLettered["trap"] != 2 {
		t.Fatalf("merged row %+v", c)
	}
	if s := back.Stored[ledger.StoredKey{Hour: hour.Unix(), Project: "p1", ResourceType: "instance"}]; s == nil || s.Expected() != 4 {
		t.Fatalf("merged stored row %+v", s)
	}
	if err := d.Decode([]byte("{")); err == nil {
		t.Fatal("a malformed value was decoded")
	}
}

// Reconcile names every hour whose expected count differs from the API's,
// a row the API lacks and a row only the API has included.
func TestReconcile(t *testing.T) {
	d := sample()
	k := ledger.StoredKey{Hour: hour.Unix(), Project: "p1", ResourceType: "instance"}
	if r := ledger.Reconcile(d, map[ledger.StoredKey]int64{k: 2}, hour, hour.Add(time.Hour)); len(r.DifferingHours) != 0 {
		t.Fatalf("equal counts differ: %+v", r)
	}
	other := ledger.StoredKey{Hour: hour.Add(2 * time.Hour).Unix(), Project: "p2", ResourceType: "volume"}
	r := ledger.Reconcile(d, map[ledger.StoredKey]int64{k: 1, other: 5}, hour, hour.Add(3*time.Hour))
	if len(r.DifferingHours) != 2 || !r.DifferingHours[0].Equal(hour) || len(r.Differences) != 2 || r.Differences[0].API != 1 {
		t.Fatalf("differences %+v", r)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "2 differing hours: 2026-01-05T10Z 2026-01-05T12Z") {
		t.Fatalf("text:\n%s", b.String())
	}
}

// Redirect moves one dead-lettered count of a row to skipped, leaving
// consumed as it was, and answers false where no such count exists.
func TestRedirect(t *testing.T) {
	d := &ledger.Delta{}
	k := ledger.Key{Hour: 3600, Source: "nova", Type: "t"}
	d.Row(k).DeadLetter("not_json")
	d.Row(k).Commit()
	c := d.Clone()
	if !c.Redirect("nova", "t", "not_json", "dropped") {
		t.Fatal("no count found")
	}
	if c.Redirect("nova", "t", "not_json", "dropped") || c.Redirect("glance", "t", "not_json", "dropped") {
		t.Fatal("redirected a count that is not there")
	}
	r := c.Intake[k]
	if r.Consumed != 2 || r.DeadTotal() != 0 || r.Skipped["dropped"] != 1 || r.Committed != 1 || r.Consumed != r.Settled() {
		t.Fatalf("after redirect: %+v", r)
	}
	if d.Intake[k].DeadLettered["not_json"] != 1 {
		t.Fatalf("the clone shares its rows with the original: %+v", d.Intake[k])
	}
}
