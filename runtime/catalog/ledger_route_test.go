package catalog_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// GET /ledger answers LedgerPageHours hours with rows at a time and names
// the first hour of the next page; the client follows the pages and reads
// every row of the window asked, the events still in the outbox included.
func TestLedgerRoutePages(t *testing.T) {
	ctx := context.Background()
	ob := openOutbox(t)
	const hours = 2*catalog.LedgerPageHours + 5
	start := time.Now().UTC().Truncate(time.Hour).Add(-hours * time.Hour)
	for i := range hours {
		taken := start.Add(time.Duration(i) * time.Hour)
		d := &ledger.Delta{}
		d.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "compute.instance.exists"}).Skip("unclaimed")
		if err := ob.AppendCounted(ctx, nil, taken, d); err != nil {
			t.Fatal(err)
		}
	}
	// One event committed, still in the outbox, in the last hour.
	last := start.Add((hours - 1) * time.Hour)
	ev := []byte(`{"event_id":"e1","timestamp":"` + last.Format(time.RFC3339) + `","event_type":"compute.instance.exists","resource_type":"instance","project_id":"p","source":{"exchange":"nova"}}`)
	d := &ledger.Delta{}
	d.Row(ledger.Key{Hour: ledger.HourOf(last), Source: "nova", Type: "compute.instance.exists"}).Commit()
	if err := ob.AppendCounted(ctx, [][]byte{ev}, last, d); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(catalog.NewHandler(nil, catalog.HandlerOptions{Outbox: ob}))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/ledger")
	if err != nil {
		t.Fatal(err)
	}
	var page ledger.Report
	err = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if err != nil || len(page.Intake) != catalog.LedgerPageHours || !page.Next.Equal(start.Add(catalog.LedgerPageHours*time.Hour)) {
		t.Fatalf("first page: %v, %d rows, next %s", err, len(page.Intake), page.Next)
	}

	cl := &catalog.Client{BaseURL: srv.URL}
	for _, w := range []struct {
		from, to time.Time
		rows     int
	}{
		{time.Time{}, time.Time{}, hours},
		{start.Add(3 * time.Hour), time.Time{}, hours - 3},
		{start.Add(3*time.Hour + 20*time.Minute), start.Add(40 * time.Hour), 37},
	} {
		rep, err := cl.Ledger(ctx, w.from, w.to)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Intake) != w.rows || !rep.From.Equal(w.from) || !rep.To.Equal(w.to) {
			t.Fatalf("[%s, %s): %d rows, want %d; report [%s, %s)", w.from, w.to, len(rep.Intake), w.rows, rep.From, rep.To)
		}
		for i, row := range rep.Intake {
			if i > 0 && !row.Hour.After(rep.Intake[i-1].Hour) {
				t.Fatalf("rows out of order or twice: %s after %s", row.Hour, rep.Intake[i-1].Hour)
			}
		}
		if w.to.IsZero() {
			end := rep.Intake[len(rep.Intake)-1]
			if end.Consumed != 2 || end.Events != 1 || end.Pending != 1 || len(rep.Problems) != 1 {
				t.Fatalf("the last hour: %+v; problems %+v", end, rep.Problems)
			}
		}
	}
}
