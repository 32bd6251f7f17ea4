package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// A second collector started on the BUFFER_PATH of a running one exits at
// once, non-zero, saying that the directory is in use; the first goes on.
func TestEndToEndSecondCollectorOnTheSameOutbox(t *testing.T) {
	b, v, a := stack(t, "nova", "neutron", "openstack", "glance")
	first := newCollector(t, b, v, a.url(), a.token)
	first.start(t)
	first.waitReady(t)

	second := &collector{bin: b.collector, httpAddr: testkit.FreeAddr(t)}
	for _, kv := range first.env {
		if !strings.HasPrefix(kv, "TALLY_OSC_HTTP_ADDR=") {
			second.env = append(second.env, kv)
		}
	}
	second.env = append(second.env, "TALLY_OSC_HTTP_ADDR="+second.httpAddr)
	second.start(t)
	select {
	case <-second.p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the second collector is still running on the same outbox")
	}
	var ee *exec.ExitError
	if !errors.As(second.p.err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("second collector exit: %v", second.p.err)
	}
	var dir string
	for _, kv := range first.env {
		if p, ok := strings.CutPrefix(kv, "TALLY_OSC_BUFFER_PATH="); ok {
			dir = p
		}
	}
	out := second.p.out.String()
	if !strings.Contains(out, "another collector already uses this BUFFER_PATH") || !strings.Contains(out, filepath.Clean(dir)) {
		t.Fatalf("second collector's message does not say why:\n%s", tail(out, 3000))
	}
	if code, _, err := first.get("/readyz"); err != nil || code != 200 || !first.p.running() {
		t.Fatalf("first collector after the second was refused: %d %v running %v", code, err, first.p.running())
	}
	if code, _ := first.p.stop(t, 40*time.Second); code != 0 {
		t.Fatalf("first collector exit %d", code)
	}
}

// At DEADLETTER_MAX_EVENTS the collector acknowledges nothing it cannot
// store: consumption pauses with the failing notifications back on the
// queue, /readyz fails and the metrics say why; `deadletter purge` makes
// room and consumption resumes.
func TestEndToEndDeadLetterBoundPauses(t *testing.T) {
	dir := t.TempDir()
	dropIn(t, dir, "flaky_v1", "flaky") // traps on every call
	c, v, _ := novaCollector(t, "TALLY_OSC_MAPPERS_DIR="+dir,
		"TALLY_OSC_DEADLETTER_MAX_EVENTS=3")
	c.start(t)
	c.waitReady(t)
	conn := v.Conn(t)
	publishTypes(t, conn, "flaky.usage", "dl", 0, 3, 0)
	testkit.WaitFor(t, 60*time.Second, "three dead letters", func() bool {
		return sum(c.metrics(t), "tally_collector_deadletters") == 3
	})
	publishTypes(t, conn, "flaky.usage", "dl", 3, 6, 0)
	testkit.WaitFor(t, 60*time.Second, "the dead-letter area full and readiness failing", func() bool {
		code, _, err := c.get("/readyz")
		return err == nil && code == 503 && sum(c.metrics(t), "tally_collector_deadletter_full") == 1
	})
	m := c.metrics(t)
	if m["tally_collector_deadletters"] != 3 || sum(m, "tally_collector_deadletter_refused_total") < 1 {
		t.Fatalf("dead letters %v, refused %v", m["tally_collector_deadletters"], sum(m, "tally_collector_deadletter_refused_total"))
	}
	// Nothing was acknowledged that was not stored: the three wait on the broker.
	testkit.WaitFor(t, 30*time.Second, "the refused notifications back on the queue", func() bool {
		ready, unacked := queueDepth(t, v, "tally-notifications")
		return ready+unacked == 3
	})
	// Room for the three: the batch that comes back is stored whole or not at all.
	out := c.cli(t, "deadletter", "purge", "--from", "1", "--to", "3")
	if !strings.Contains(out, `"purged": 3`) {
		t.Fatalf("purge: %s", out)
	}
	testkit.WaitFor(t, 90*time.Second, "the waiting notifications dead-lettered after the purge", func() bool {
		ready, unacked := queueDepth(t, v, "tally-notifications")
		return ready+unacked == 0 && sum(c.metrics(t), "tally_collector_deadletters") == 3
	})
	if got := sum(c.metrics(t), "tally_collector_deadletter_full"); got != 0 {
		// The area is at its bound again but nothing was refused since.
		t.Fatalf("deadletter_full %v after the purge", got)
	}
	c.waitReady(t)
	if code, _, err := c.get("/readyz"); err != nil || code != 200 {
		t.Fatalf("readyz after the purge: %d %v", code, err)
	}
	// The ledger counts each of the six once, when it was dead-lettered: a
	// batch refused at the bound was not written, so it was not consumed
	// either until it came back.
	if tot, _ := c.checkLedger(t); tot.Consumed != 6 || tot.DeadTotal() != 6 {
		t.Fatalf("ledger totals %+v, want 6 consumed and 6 dead-lettered", tot)
	}
	// A purge that selects nothing explicitly is a usage error.
	cmd := c.cliCmd("deadletter", "purge")
	if out, err := cmd.CombinedOutput(); err == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Fatalf("purge without criteria: %v\n%s", err, out)
	}
}
