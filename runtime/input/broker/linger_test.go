package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The commit linger groups deliveries that trickle in into fewer commits,
// and never holds a delivery much beyond its bound: a trickle of 40
// notifications, 5 ms apart, is committed in a few commits with a 100 ms
// linger and in many without one; every one is acknowledged.
func TestCommitLingerGroupsATrickle(t *testing.T) {
	t.Parallel() // its own virtual host
	commits := map[string]int{}
	for _, tc := range []struct {
		name   string
		linger time.Duration
	}{{"none", -1}, {"100ms", 100 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			v, ch := classicQueueVhost(t)
			rec := &recordingOutbox{Outbox: openOutbox(t, t.TempDir(), 1<<20), committed: map[string]bool{}}
			opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
			opts.CommitLinger = tc.linger
			c := newConsumer(t, newTestProcessor(t), rec, opts)
			startConsumer(t, c)
			testkit.WaitFor(t, 20*time.Second, "consuming", func() bool { return c.Ready() == nil })
			const n = 40
			for i := range n {
				err := ch.Publish("", defaultQueue, false, false, amqp.Publishing{
					ContentType: "application/json", DeliveryMode: amqp.Persistent,
					Body: note(t, fmt.Sprintf("trickle-%02d", i), "compute.instance.exists"),
				})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			testkit.WaitFor(t, 20*time.Second, "all acknowledged", func() bool { return testutil.ToFloat64(c.m.acked) == n })
			rec.mu.Lock()
			commits[tc.name] = rec.commits
			rec.mu.Unlock()
			t.Logf("%d commits for %d deliveries", commits[tc.name], n)
		})
	}
	if t.Failed() {
		return
	}
	// 200 ms of trickle fit in one 4 × 100 ms bound: one or two commits,
	// a few more on a loaded machine; without the linger the idle committer
	// takes them nearly one by one.
	if commits["100ms"] > 8 || commits["100ms"]*2 > commits["none"] {
		t.Fatalf("commits with a 100 ms linger %d, without %d: the linger does not group", commits["100ms"], commits["none"])
	}
}

// A lone delivery is committed once the linger has passed, not held until
// more arrive.
func TestCommitLingerLoneDelivery(t *testing.T) {
	t.Parallel() // its own virtual host
	v, _ := classicQueueVhost(t)
	box := openOutbox(t, t.TempDir(), 1<<20)
	opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
	opts.CommitLinger = 300 * time.Millisecond
	c := newConsumer(t, newTestProcessor(t), box, opts)
	startConsumer(t, c)
	testkit.WaitFor(t, 20*time.Second, "consuming", func() bool { return c.Ready() == nil })
	v.Publish(t, "", defaultQueue, note(t, "lone-1", "compute.instance.exists"))
	start := time.Now()
	testkit.WaitFor(t, 20*time.Second, "acknowledged", func() bool { return testutil.ToFloat64(c.m.acked) == 1 })
	// Held at least the linger (the delivery arrived alone, within it), and
	// released by the timer, not by another delivery.
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("acknowledged after %v, before the 300 ms linger ran out", took)
	}
	if box.Depth() != 1 {
		t.Fatalf("depth %d", box.Depth())
	}
}

// A graceful stop does not wait for a linger armed before it: the delivery
// lingering is committed and acknowledged at once, long before the linger
// or the stop budget would have run out.
func TestStopCommitsALingeringDelivery(t *testing.T) {
	t.Parallel() // its own virtual host
	v, _ := classicQueueVhost(t)
	box := openOutbox(t, t.TempDir(), 1<<20)
	opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
	opts.CommitLinger = 20 * time.Second
	opts.StopBudget = 10 * time.Second
	c := newConsumer(t, newTestProcessor(t), box, opts)
	r := startConsumer(t, c)
	testkit.WaitFor(t, 20*time.Second, "consuming", func() bool { return c.Ready() == nil })
	v.Publish(t, "", defaultQueue, note(t, "lingering-1", "compute.instance.exists"))
	testkit.WaitFor(t, 20*time.Second, "taken", func() bool { return testutil.ToFloat64(c.m.consumed) == 1 })
	start := time.Now()
	r.stop()
	if acked := testutil.ToFloat64(c.m.acked); acked != 1 {
		t.Fatalf("%v acknowledged at the stop, want 1", acked)
	}
	if box.Depth() != 1 {
		t.Fatalf("depth %d", box.Depth())
	}
	if took := time.Since(start); took >= opts.StopBudget {
		t.Fatalf("the stop took %v: it waited for the linger", took)
	}
}
