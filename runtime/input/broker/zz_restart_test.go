package broker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A broker stop and start under a running consumer. It stops the whole
// (shared) broker, so it is kept short, runs last in the package (files run
// in name order and no test here is parallel), and always starts the broker
// again.
func TestBrokerStopStart(t *testing.T) {
	if testing.Short() {
		t.Skip("stops the shared broker")
	}
	v := newVhost(t)
	v.declareExchanges(t, false, "nova") // as oslo declares it: gone after a restart
	ob := openOutbox(t, t.TempDir(), 1000)
	c, err := New(newTestProcessor(t), ob, testOptions(v, &syncBuf{}, "nova"))
	if err != nil {
		t.Fatal(err)
	}
	r := startConsumer(t, c)
	waitFor(t, 15*time.Second, "ready", func() bool { return r.Ready() == nil })
	for i := 0; i < 5; i++ {
		v.publish(t, "nova", "notifications.info", note(t, fmt.Sprintf("before-%d", i), "compute.instance.exists"))
	}
	waitFor(t, 15*time.Second, "consumed before the stop", func() bool { return testutil.ToFloat64(c.m.acked) == 5 })

	// Other packages' tests run in parallel on the same broker and a restart
	// deletes their non-durable exchanges: hold the broker lock exclusively
	// (their tests hold it shared) until the broker is back.
	unlock := lockBrokerExclusive(t)
	started := false
	restart := func() {
		if !started {
			started = true
			_ = exec.Command("rabbitmqctl", "start_app").Run()
			_ = exec.Command("rabbitmqctl", "await_startup").Run()
			unlock()
		}
	}
	defer restart()
	rabbitmqctl(t, "stop_app")
	waitFor(t, 15*time.Second, "not ready while the broker is down", func() bool { return r.Ready() != nil })
	restart()
	// The durable queue is back, oslo's exchange is not until the service
	// publishes again: no exchange, no readiness.
	waitFor(t, 60*time.Second, "broker back, exchange missing", func() bool { return errors.Is(r.Ready(), ErrNoExchanges) })
	v.declareExchanges(t, false, "nova")
	waitFor(t, 30*time.Second, "consuming again", func() bool { return r.Ready() == nil })
	for i := 0; i < 5; i++ {
		v.publish(t, "nova", "notifications.info", note(t, fmt.Sprintf("after-%d", i), "compute.instance.exists"))
	}
	waitFor(t, 15*time.Second, "consumed after the start", func() bool { return testutil.ToFloat64(c.m.acked) == 10 })
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

// lockBrokerExclusive takes the lock file the tests that need a stable broker
// hold shared (cmd/tally-openstack-collector's end-to-end tests), and returns
// its release.
func lockBrokerExclusive(t testing.TB) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "tally-osc-broker.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("broker lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("broker lock: %v", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
		})
	}
}
