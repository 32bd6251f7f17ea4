package broker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"

	"github.com/tally-billing/tally-openstack-collector/outbox"
)

// recordingTap records what the consumer shows it, and checks at each call
// that the events are already in the outbox.
type recordingTap struct {
	t      testing.TB
	box    *outbox.Outbox
	active atomic.Bool
	asked  atomic.Int64
	mu     sync.Mutex
	items  []Committed
}

func (r *recordingTap) Active() bool { r.asked.Add(1); return r.active.Load() }

func (r *recordingTap) Committed(items []Committed) {
	ids := outboxIDs(r.t, r.box)
	for _, it := range items {
		for _, ev := range it.Events {
			if ids[eventID(r.t, ev)] == 0 {
				r.t.Errorf("%s shown to the tap before it was committed", eventID(r.t, ev))
			}
		}
	}
	r.mu.Lock()
	r.items = append(r.items, items...)
	r.mu.Unlock()
}

// While the tap is idle the consumer keeps nothing for it; once it listens,
// every settled delivery is shown, after its commit, with its body, event
// type and events (none for a skipped one).
func TestTapSeesWhatIsCommitted(t *testing.T) {
	t.Parallel() // its own virtual host
	v, _ := classicQueueVhost(t)
	box := openOutbox(t, t.TempDir(), 1<<20)
	tap := &recordingTap{t: t, box: box}
	opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
	opts.Tap = tap
	c := newConsumer(t, newTestProcessor(t), box, opts)
	startConsumer(t, c)
	testkit.WaitFor(t, 20*time.Second, "consuming", func() bool { return c.Ready() == nil })

	for i := range 10 {
		v.Publish(t, "", defaultQueue, note(t, fmt.Sprintf("idle-%d", i), "compute.instance.exists"))
	}
	testkit.WaitFor(t, 20*time.Second, "acknowledged", func() bool { return testutil.ToFloat64(c.m.acked) == 10 })
	if tap.asked.Load() == 0 {
		t.Fatal("the tap was never asked")
	}
	tap.mu.Lock()
	if len(tap.items) != 0 {
		t.Fatalf("idle tap shown %d items", len(tap.items))
	}
	tap.mu.Unlock()

	tap.active.Store(true)
	for i := range 10 {
		v.Publish(t, "", defaultQueue, note(t, fmt.Sprintf("tap-%d", i), "compute.instance.exists"))
	}
	v.Publish(t, "", defaultQueue, note(t, "tap-skip", "nobody.claims.this"))
	testkit.WaitFor(t, 20*time.Second, "acknowledged", func() bool { return testutil.ToFloat64(c.m.acked) == 21 })
	testkit.WaitFor(t, 5*time.Second, "shown", func() bool { tap.mu.Lock(); defer tap.mu.Unlock(); return len(tap.items) == 11 })
	tap.mu.Lock()
	defer tap.mu.Unlock()
	for i, it := range tap.items[:10] {
		if it.EventType != "compute.instance.exists" || len(it.Events) != 1 || messageID(t, it.Body) != fmt.Sprintf("tap-%d", i) ||
			it.RoutingKey != defaultQueue {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	if last := tap.items[10]; last.EventType != "nobody.claims.this" || len(last.Events) != 0 {
		t.Fatalf("skipped item %+v", last)
	}
}
