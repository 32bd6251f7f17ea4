package broker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// A broker stop and start under a running consumer. It stops the whole
// (shared) broker, so it is kept short and always starts the broker again.
// It may run at any point of any run: it holds the broker lock exclusively
// from its start until the broker is back, and every test that uses the
// broker (testkit.NewVhost) holds the lock shared while it runs, in this
// package, in the others and in other runs on the machine; so no test is on
// the broker while it is down, and none starts before it is back.
func TestBrokerStopStart(t *testing.T) {
	if testing.Short() {
		t.Skip("stops the shared broker")
	}
	testkit.RequireBroker(t)
	unlock := testkit.LockBrokerExclusive(t)
	v := newVhost(t)
	v.DeclareExchanges(t, false, "nova") // as oslo declares it: gone after a restart
	ob := openOutbox(t, t.TempDir(), 1000)
	c := newConsumer(t, newTestProcessor(t), ob, testOptions(v, &testkit.SyncBuffer{}, "nova"))
	r := startConsumer(t, c)
	testkit.WaitFor(t, 15*time.Second, "ready", func() bool { return r.Ready() == nil })
	for i := 0; i < 5; i++ {
		v.Publish(t, "nova", "notifications.info", note(t, fmt.Sprintf("before-%d", i), "compute.instance.exists"))
	}
	testkit.WaitFor(t, 15*time.Second, "consumed before the stop", func() bool { return testutil.ToFloat64(c.m.acked) == 5 })

	started := false
	restart := func() {
		if !started {
			started = true
			defer unlock()
			// Retried (testkit.Rabbitmqctl) and bounded: a start that fails
			// is tried again, and nothing waits for ever on a broker that
			// does not come back.
			testkit.Rabbitmqctl(t, "start_app")
			testkit.Rabbitmqctl(t, "await_startup", "--timeout", "60")
		}
	}
	defer restart()
	testkit.Rabbitmqctl(t, "stop_app")
	testkit.WaitFor(t, 15*time.Second, "not ready while the broker is down", func() bool { return r.Ready() != nil })
	restart()
	// The durable queue is back, oslo's exchange is not until the service
	// publishes again: no exchange, no readiness.
	testkit.WaitFor(t, 60*time.Second, "broker back, exchange missing", func() bool { return errors.Is(r.Ready(), ErrNoExchanges) })
	v.DeclareExchanges(t, false, "nova")
	testkit.WaitFor(t, 30*time.Second, "consuming again", func() bool { return r.Ready() == nil })
	for i := 0; i < 5; i++ {
		v.Publish(t, "nova", "notifications.info", note(t, fmt.Sprintf("after-%d", i), "compute.instance.exists"))
	}
	testkit.WaitFor(t, 15*time.Second, "consumed after the start", func() bool { return testutil.ToFloat64(c.m.acked) == 10 })
	ids := outboxIDs(t, ob)
	for i := 0; i < 5; i++ {
		if ids[fmt.Sprintf("before-%d", i)] != 1 || ids[fmt.Sprintf("after-%d", i)] != 1 {
			t.Fatalf("outbox %v", ids)
		}
	}
	if testutil.ToFloat64(c.m.reconnects) < 1 {
		t.Error("no reconnect counted")
	}
}
