package broker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// A consumer that never took a delivery has no backlog.
func TestBackloggedFalseBeforeAnyDelivery(t *testing.T) {
	c := newConsumer(t, newTestProcessor(t), openOutbox(t, t.TempDir(), 10), testOptions(vhostByName("unused"), &testkit.SyncBuffer{}, "nova"))
	if c.Backlogged() {
		t.Fatal("backlogged before running")
	}
}

// Draining a pre-filled queue keeps the prefetch window full, so the
// consumer reports a backlog while it drains; once the queue is empty and
// backlogWindow has passed it no longer does.
func TestBackloggedWhileDraining(t *testing.T) {
	t.Parallel() // its own virtual host
	v, _ := classicQueueVhost(t)
	const n = 2000
	fill(t, v, note(t, "backlog-1", "compute.instance.exists"), n)

	opts := testOptions(v, &testkit.SyncBuffer{}, "nova") // Prefetch 20
	c := newConsumer(t, newTestProcessor(t), openOutbox(t, t.TempDir(), 1<<20), opts)
	if c.Backlogged() {
		t.Fatal("backlogged before running")
	}
	startConsumer(t, c)
	seen := 0
	deadline := time.Now().Add(time.Minute)
	for testutil.ToFloat64(c.m.acked) < n {
		if time.Now().After(deadline) {
			t.Fatalf("drain timed out: %v of %d acknowledged", testutil.ToFloat64(c.m.acked), n)
		}
		if c.Backlogged() {
			seen++
		}
		time.Sleep(time.Millisecond)
	}
	if seen == 0 {
		t.Fatal("never backlogged while draining a pre-filled queue")
	}
	// Every delivery was taken before it was acknowledged: from here on
	// nothing fills the window.
	time.Sleep(backlogWindow + 100*time.Millisecond)
	if c.Backlogged() {
		t.Fatal("still backlogged after the queue was drained")
	}
	if ready, _ := v.QueueState(t, defaultQueue); ready != 0 {
		t.Fatalf("%d messages left in the queue", ready)
	}
}
