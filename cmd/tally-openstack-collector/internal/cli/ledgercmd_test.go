package cli

// The evidence commands without a daemon: ledger --merge adds up stopped
// replicas' outboxes, and reconcile says when the API cannot compare.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// An API without the count route: reconcile says it cannot compare and
// exits 2; ledger --merge adds up the outboxes of stopped replicas.
func TestReconcileWithoutCountRouteAndLedgerMerge(t *testing.T) {
	ctx := context.Background()
	taken := time.Now()
	var dirs []string
	for i := range 2 {
		dir := filepath.Join(t.TempDir(), "outbox")
		ob := openOutbox(t, dir)
		d := &ledger.Delta{}
		r := d.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "compute.instance.exists"})
		r.Consumed, r.Skipped = int64(i+1), map[string]int64{"unclaimed": int64(i + 1)}
		if err := ob.AppendCounted(ctx, nil, taken, d); err != nil {
			t.Fatal(err)
		}
		if err := ob.Close(); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	var stdout, stderr bytes.Buffer
	code := Run(append([]string{"ledger", "--json", "--merge"}, dirs...), nil, nil, &stdout, &stderr, Stamp{})
	var rep ledger.Report
	if code != 0 || json.Unmarshal(stdout.Bytes(), &rep) != nil || len(rep.Intake) != 1 || rep.Intake[0].Consumed != 3 || rep.Intake[0].Skipped["unclaimed"] != 3 {
		t.Fatalf("ledger --merge: exit %d, %s %s", code, stdout.String(), stderr.String())
	}

	// A Reporting API that answers 404 to everything but the events.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }))
	defer srv.Close()
	stdout.Reset()
	stderr.Reset()
	env := []string{"TALLY_OSC_REPORTING_URL=" + srv.URL, "TALLY_OSC_REPORTING_TOKEN=t", "TALLY_OSC_REPORTING_INSECURE=true"}
	code = Run(append([]string{"reconcile", "--from", "2h", "--to", "0s", "--merge"}, dirs...), env, nil, &stdout, &stderr, Stamp{})
	if code != 2 || !strings.Contains(stderr.String(), "cannot compare") || !strings.Contains(stderr.String(), "404") {
		t.Fatalf("reconcile against an API without the count route: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
}

// ledger --merge over a replica's address follows the route's pages: a
// ledger of more hours than one page is read whole, added to a stopped
// replica's outbox.
func TestLedgerMergeFollowsPages(t *testing.T) {
	ctx := context.Background()
	const hours = catalog.LedgerPageHours*2 + 3
	start := time.Now().UTC().Truncate(time.Hour).Add(-hours * time.Hour)
	var obs []*outbox.Outbox
	var dirs []string
	for i := range 2 {
		dir := filepath.Join(t.TempDir(), "outbox")
		ob := openOutbox(t, dir)
		for h := range hours {
			taken := start.Add(time.Duration(h) * time.Hour)
			d := &ledger.Delta{}
			d.Row(ledger.Key{Hour: ledger.HourOf(taken), Source: "nova", Type: "compute.instance.exists"}).Skip("unclaimed")
			if err := ob.AppendCounted(ctx, nil, taken, d); err != nil {
				t.Fatal(err)
			}
		}
		obs, dirs = append(obs, ob), append(dirs, dir)
		if i == 1 {
			if err := ob.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer obs[0].Close()
	srv := httptest.NewServer(catalog.NewHandler(nil, catalog.HandlerOptions{Outbox: obs[0]}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	code := Run([]string{"ledger", "--json", "--merge", srv.URL, dirs[1]}, nil, nil, &stdout, &stderr, Stamp{})
	var rep ledger.Report
	if code != 0 || json.Unmarshal(stdout.Bytes(), &rep) != nil || len(rep.Intake) != hours {
		t.Fatalf("ledger --merge: exit %d, %d rows, want %d; %s", code, len(rep.Intake), hours, stderr.String())
	}
	for _, row := range rep.Intake {
		if row.Consumed != 2 || !row.Balanced {
			t.Fatalf("row %+v: want 2 consumed, one per replica", row)
		}
	}
}
