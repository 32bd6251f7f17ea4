package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// TestEndToEndPlog sends notifications through the plog-compatible listeners of
// the running daemon (an unboxed UDP datagram and a TCP line), each listener's
// chain naming the built-in nova module, and checks they reach the Reporting
// API through the same outbox and sender as the AMQP input.
func TestEndToEndPlog(t *testing.T) {
	udpAddr, tcpAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := filepath.Join(t.TempDir(), "collector.yaml")
	yaml := fmt.Sprintf("plog:\n  listeners:\n    - address: udp://%s\n      mappers: [nova]\n    - address: tcp://%s\n      mappers: [nova]\n", udpAddr, tcpAddr)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _, a := novaCollector(t,
		"TALLY_OSC_PLOG_LISTENERS=udp://"+udpAddr+",tcp://"+tcpAddr)
	c.runs++
	c.p = startProc(t, "collector", c.bin, []string{"--config", cfg}, c.env)
	c.waitReady(t)

	note := func(id string) string {
		return `{"message_id":"` + id + `","event_type":"compute.instance.exists","timestamp":"2024-05-01 12:00:00.5",` +
			`"publisher_id":"compute.host1","payload":{"instance_id":"i-` + id + `","tenant_id":"p1","vcpus":2,"memory_mb":2048}}`
	}
	uc, tc := dial(t, "udp", udpAddr), dial(t, "tcp", tcpAddr)
	if _, err := tc.Write([]byte(note("plog-tcp-1") + "\n")); err != nil {
		t.Fatal(err)
	}
	// UDP is fire and forget: resend until it arrives (the id dedupes).
	testkit.WaitFor(t, 60*time.Second, "both plog events at the Reporting API", func() bool {
		_, _ = uc.Write([]byte(note("plog-udp-1")))
		return a.stats(t).Accepted >= 2
	})
	events, _ := a.events(t)
	var got []string
	for _, ev := range events {
		got = append(got, ev.EventID+" "+ev.Source.Exchange+" "+ev.Source.Mapper[:len("nova@")])
	}
	sort.Strings(got)
	want := []string{"plog-tcp-1 plog nova@", "plog-udp-1 plog nova@"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events at the API: %q, want %q", got, want)
	}
	// The ledger counts the plog messages under the plog source, the UDP
	// datagrams sent again as copies: the API is expected to hold two.
	tot, table := c.checkLedger(t)
	if tot.Consumed < 2 || tot.Committed != tot.Consumed || !strings.Contains(table, "plog ") {
		t.Fatalf("ledger:\n%s", table)
	}
	hour := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	if out, code := c.reconcile(t, hour, hour.Add(time.Hour)); code != 0 || !strings.Contains(out, "2 events expected, 2 stored") {
		t.Fatalf("reconcile: exit %d\n%s", code, out)
	}
}
