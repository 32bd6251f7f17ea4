package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// dropIn copies a test module of the catalogue into the drop-in directory the
// way an operator (or a ConfigMap update) should: written aside, then renamed.
func dropIn(t *testing.T, dir, module, as string) {
	t.Helper()
	b := testkit.BuiltModule(t, "runtime/catalog/testdata/"+module+".wasm")
	tmp := filepath.Join(dir, "."+as+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, as+".wasm")); err != nil {
		t.Fatal(err)
	}
}

// cli runs a control command of the binary against the running daemon.
func (c *collector) cli(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func publishTypes(t *testing.T, conn *amqp.Connection, eventType, prefix string, from, to int, pace time.Duration) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Error(err)
		return
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Error(err)
		return
	}
	for i := from; i < to; i++ {
		body := fmt.Sprintf(`{"message_id":"%s-%d","event_type":"%s","timestamp":"2024-05-01 12:00:00","publisher_id":"test.host","payload":{}}`, prefix, i, eventType)
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "nova", "notifications.info", true, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: []byte(body)})
		if err != nil {
			t.Error(err)
			return
		}
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Errorf("publish %d not confirmed: %v", i, err)
			return
		}
		time.Sleep(pace)
	}
}

// TestEndToEndHotReloadMigrationAndReplay drives the catalogue of a running
// daemon from the outside while the broker streams notifications: a new
// version dropped in shadows the active one, is promoted with the command, and
// the Reporting API ends with exactly the published set (nothing lost, nothing
// mapped twice). Then a module that traps dead-letters notifications, a fixed
// version is dropped in and promoted, and `deadletter replay` delivers them.
func TestEndToEndHotReloadMigrationAndReplay(t *testing.T) {
	dir := t.TempDir()
	dropIn(t, dir, "echo_v1", "echo")
	dropIn(t, dir, "flaky_v1", "flaky")
	c, v, a := novaCollector(t, "TALLY_OSC_MAPPERS_DIR="+dir)
	c.start(t)
	c.waitReady(t)
	if out := c.cli(t, "mappers"); !strings.Contains(out, "echo@1.0.0") || !strings.Contains(out, "nova@") {
		t.Fatalf("mappers view lacks echo@1.0.0 or the built-in nova:\n%s", out)
	}

	conn := v.Conn(t)
	const n = 1500
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		publishTypes(t, conn, "test.usage", "reload", 0, n, 2*time.Millisecond)
	}()

	// Mid-stream: a new version arrives and shadows the active one.
	time.Sleep(500 * time.Millisecond)
	dropIn(t, dir, "echo_v2", "echo-2")
	testkit.WaitFor(t, 60*time.Second, "echo@2.0.0 in shadow", func() bool {
		return strings.Contains(c.cli(t, "mappers"), "2.0.0")
	})
	time.Sleep(300 * time.Millisecond)
	out := c.cli(t, "mappers", "promote", "echo")
	if !strings.Contains(out, `"promoted"`) || strings.Contains(out, `"differences": 0`) {
		t.Fatalf("promote did not report a promotion after differences in shadow:\n%s", out)
	}
	wg.Wait()
	// The test modules write one event per notification, its id the
	// message's: a notification mapped twice would show as a duplicate.
	testkit.WaitFor(t, 90*time.Second, "every streamed notification at the API", func() bool {
		return a.stats(t).Accepted >= n
	})
	time.Sleep(time.Second) // anything extra would arrive now
	if st := a.stats(t); st.Accepted != n || st.Rejected != 0 || st.Duplicates != 0 {
		t.Fatalf("API accepted %d events (%d rejected, %d duplicates); want exactly %d, none twice", st.Accepted, st.Rejected, st.Duplicates, n)
	}

	// Dead letters: the active flaky module traps on every call.
	publishTypes(t, conn, "flaky.usage", "dead", 0, 5, 0)
	var list string
	testkit.WaitFor(t, 60*time.Second, "five dead letters", func() bool {
		list = c.cli(t, "deadletter", "list")
		return strings.Count(list, "flaky.usage") == 5
	})
	if !strings.Contains(list, "trap") || !strings.Contains(list, "flaky@1.0.0") {
		t.Fatalf("dead letters lack the reason or the module:\n%s", list)
	}
	dropIn(t, dir, "flaky_v2", "flaky-2")
	testkit.WaitFor(t, 60*time.Second, "flaky@1.0.1 in shadow", func() bool {
		return strings.Contains(c.cli(t, "mappers"), "1.0.1")
	})
	c.cli(t, "mappers", "promote", "flaky")
	t.Logf("replay: %s", strings.TrimSpace(c.cli(t, "deadletter", "replay")))
	testkit.WaitFor(t, 60*time.Second, "replayed events at the API", func() bool {
		return a.stats(t).Accepted == n+5
	})
	if left := c.cli(t, "deadletter", "list"); strings.Contains(left, "flaky.usage") {
		t.Fatalf("dead letters left after a successful replay:\n%s", left)
	}
	// The ledger: the stream committed, the five dead-lettered, then
	// replayed into events; every event accepted, none pending.
	tot, table := c.checkLedger(t)
	if tot.Consumed != n+5 || tot.Committed != n || tot.DeadTotal() != 5 || tot.Replayed != 5 || tot.Delivered != n+5 {
		t.Fatalf("ledger totals %+v, want %d consumed, %d committed, 5 dead-lettered and replayed, %d delivered:\n%s",
			tot, n+5, n, n+5, table)
	}
}

// TestEndToEndMigrationSurvivesAKill: a collector killed with SIGKILL during
// a shadow migration comes back with the same version in service and the
// candidate still in shadow; the candidate is not promoted by the restart.
// The decisions are kept in the outbox, which outlives the process.
func TestEndToEndMigrationSurvivesAKill(t *testing.T) {
	dir := t.TempDir()
	dropIn(t, dir, "echo_v1", "echo")
	c, _, _ := novaCollector(t, "TALLY_OSC_MAPPERS_DIR="+dir)
	c.start(t)
	c.waitReady(t)
	dropIn(t, dir, "echo_v2", "echo-2")
	testkit.WaitFor(t, 60*time.Second, "echo@2.0.0 in shadow", func() bool {
		return strings.Contains(c.cli(t, "mappers"), "echo@2.0.0")
	})
	c.p.kill9(t)

	c.start(t)
	c.waitReady(t)
	out := c.cli(t, "mappers")
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "echo@") && strings.HasPrefix(strings.TrimSpace(l), "test.") {
			row = l
		}
	}
	f := strings.Fields(row)
	if len(f) < 5 || f[1] != "echo@1.0.0" || f[3] != "migrating" || f[4] != "echo@2.0.0" {
		t.Fatalf("after the kill, want echo@1.0.0 active and echo@2.0.0 in shadow:\n%s", out)
	}
}
