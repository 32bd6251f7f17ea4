package e2e

// The evidence commands against the real daemon and API: the ledger
// balances, and reconcile finds a silent loss at the API. (ledger --merge
// over stopped replicas' outboxes, and reconcile against an API without the
// count route, need no daemon: internal/cli/ledgercmd_test.go, beside the command.)

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
)

// ledgerReport runs `ledger --json` against the running daemon.
func (c *collector) ledgerReport(t *testing.T) ledger.Report {
	t.Helper()
	var rep ledger.Report
	if err := json.Unmarshal([]byte(c.cli(t, "ledger", "--json")), &rep); err != nil {
		t.Fatalf("ledger --json: %v", err)
	}
	return rep
}

// checkLedger waits until every hour of the daemon's ledger balances and no
// event is left in its outbox, and returns the totals and the text output.
func (c *collector) checkLedger(t *testing.T) (ledger.Counts, string) {
	t.Helper()
	tot := c.checkLedgerBalanced(t)
	return tot, c.cli(t, "ledger")
}

// checkLedgerBalanced is checkLedger without the text output, whose
// rendering grows with the rows (the hostile-publisher suite's thousand
// event types and projects).
func (c *collector) checkLedgerBalanced(t *testing.T) ledger.Counts {
	t.Helper()
	var rep ledger.Report
	testkit.WaitFor(t, 60*time.Second, "every hour of the ledger balanced, nothing left in the outbox", func() bool {
		rep = c.ledgerReport(t)
		return len(rep.Problems) == 0
	})
	var tot ledger.Counts
	for _, r := range rep.Intake {
		if !r.Balanced {
			t.Fatalf("ledger row %+v does not balance", r)
		}
		tot.Add(&r.Counts)
	}
	if tot.Consumed != tot.Settled() || tot.Events != tot.Accounted() {
		t.Fatalf("ledger totals do not balance: %+v", tot)
	}
	return tot
}

// checkLedgerTotals is checkLedger for a test that published n
// notifications, each mapped to one event, all delivered: every hour
// balances, and at least n were consumed, committed and delivered (a
// redelivery after a stop or a kill is consumed and delivered again, and
// counted so).
func checkLedgerTotals(t *testing.T, c *collector, n int64) {
	t.Helper()
	tot, _ := c.checkLedger(t)
	if tot.Consumed < n || tot.Committed < n || tot.Events < n || tot.Delivered < n {
		t.Fatalf("ledger totals %+v, want at least %d consumed, committed, events and delivered", tot, n)
	}
}

// checkReplicaLedgers is checkLedger for replicas sharing one queue, with n
// notifications published, each mapped to one event, none consumed twice:
// every replica's ledger balances, and `ledger --merge` over their control
// addresses adds up to the replicas' own totals and to n consumed,
// committed, events and delivered.
func checkReplicaLedgers(t *testing.T, reps []*collector, n int64) {
	t.Helper()
	var own ledger.Counts
	args := []string{"ledger", "--json", "--merge"}
	for _, c := range reps {
		tot, _ := c.checkLedger(t)
		own.Add(&tot)
		args = append(args, "http://"+c.httpAddr)
	}
	var merged ledger.Report
	if err := json.Unmarshal([]byte(reps[0].cli(t, args...)), &merged); err != nil {
		t.Fatalf("ledger --merge: %v", err)
	}
	var mt ledger.Counts
	for _, r := range merged.Intake {
		if !r.Balanced {
			t.Fatalf("merged ledger row %+v does not balance", r)
		}
		mt.Add(&r.Counts)
	}
	if mt.Consumed != own.Consumed || mt.Committed != own.Committed || mt.Events != own.Events || mt.Delivered != own.Delivered {
		t.Fatalf("ledger --merge of the %d replicas %+v, their own ledgers add up to %+v", len(reps), mt, own)
	}
	if mt.Consumed != n || mt.Committed != n || mt.Events != n || mt.Delivered != n {
		t.Fatalf("the replicas' merged ledger %+v, want %d consumed, committed, events and delivered", mt, n)
	}
}

// reconcile runs `reconcile` over [from, to) and returns its output and exit
// code.
func (c *collector) reconcile(t *testing.T, from, to time.Time) (string, int) {
	t.Helper()
	cmd := exec.Command(c.bin, "reconcile", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339))
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("reconcile: %v", err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// The reference API answers one event as accepted without storing it:
// nothing in the collector notices (the 200 is all it sees), the ledger
// balances, and reconcile names the hour the API lost it in.
func TestEndToEndReconcileFindsSilentLoss(t *testing.T) {
	e := setupE2E(t)
	e.api.do(t, "POST", "/admin/drop", map[string]any{"count": 1}, nil)
	const n = 300
	publishRaw(t, e.v, e.corpus, e.prefix, 0, n)
	e.waitDelivered(t, n, 2*time.Minute)
	tot, table := e.c.checkLedger(t)
	if tot.Consumed != n || tot.Committed != n || tot.Events != n || tot.Delivered != n {
		t.Fatalf("ledger totals %+v, want %d consumed, committed, events and delivered", tot, n)
	}
	t.Logf("ledger:\n%s", table)
	// The same ledger through --merge over the replica's control address.
	var merged ledger.Report
	if err := json.Unmarshal([]byte(e.c.cli(t, "ledger", "--json", "--merge", "http://"+e.c.httpAddr)), &merged); err != nil {
		t.Fatal(err)
	}
	var mt ledger.Counts
	for _, r := range merged.Intake {
		mt.Add(&r.Counts)
	}
	if mt.Consumed != tot.Consumed || mt.Delivered != tot.Delivered || len(merged.Stored) == 0 {
		t.Fatalf("ledger --merge http://%s: %+v, want %+v", e.c.httpAddr, mt, tot)
	}
	out, code := e.c.reconcile(t, publishEpoch, publishEpoch.Add(time.Hour))
	t.Logf("reconcile (exit %d):\n%s", code, out)
	hour := publishEpoch.Format("2006-01-02T15Z")
	if code != 1 || !strings.Contains(out, "1 differing hours: "+hour) || !strings.Contains(out, "-1\n") {
		t.Fatalf("reconcile did not name the hour %s of the lost event (exit %d):\n%s", hour, code, out)
	}
}
