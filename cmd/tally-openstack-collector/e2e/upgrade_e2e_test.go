package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// TestUpgradeDeliversFirstFormatOutbox: the built collector started on an
// outbox the first releases wrote (one key per event, outbox/testdata/format-v1)
// migrates it at start, logs so, and delivers exactly the events it held
// undelivered to the Reporting API; the store's two dead letters are kept.
func TestUpgradeDeliversFirstFormatOutbox(t *testing.T) {
	store := testkit.CopyDir(t, "../../../outbox/testdata/format-v1")
	c, _, a := novaCollector(t, "TALLY_OSC_BUFFER_PATH="+store)
	c.start(t)
	c.waitReady(t)
	waitAccepted(t, a, 9, 2*time.Minute)

	events, _ := a.events(t)
	var got []string
	for _, e := range events {
		got = append(got, e.EventID)
	}
	var want []string
	for i := 6; i <= 14; i++ { // events 1..5 had been delivered by the release that wrote the store
		want = append(want, fmt.Sprintf("golden-%03d", i))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	if st := a.stats(t); st.Duplicates != 0 || st.Rejected != 0 {
		t.Fatalf("API stats %+v", st)
	}
	testkit.WaitFor(t, time.Minute, "the outbox drained", func() bool {
		return sum(c.metrics(t), "tally_collector_outbox_depth") == 0
	})
	if n := sum(c.metrics(t), "tally_collector_deadletters"); n != 2 {
		t.Fatalf("%v dead letters, want the store's 2", n)
	}
	if out := c.p.out.String(); !strings.Contains(out, "outbox: store migrated") {
		t.Fatalf("no migration logged:\n%s", tail(out, 4000))
	}
	if code, d := c.p.stop(t, 40*time.Second); code != 0 {
		t.Fatalf("stop: exit %d after %s", code, d)
	}
}
