package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// oslo's multi-host form: the first host refuses, the second is used.
func TestFailoverToSecondHost(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova")
	logs := &testkit.SyncBuffer{}
	opts := testOptions(v, logs, "nova")
	opts.TransportURL = "rabbit://guest:guest@127.0.0.1:1,guest:guest@" + brokerAddr + "/" + v.Name
	c := newConsumer(t, newTestProcessor(t), openOutbox(t, t.TempDir(), 10), opts)
	r := startConsumer(t, c)
	testkit.WaitFor(t, 15*time.Second, "ready through the second host", func() bool { return r.Ready() == nil })
	if !strings.Contains(logs.String(), "127.0.0.1:1") || !strings.Contains(logs.String(), "guest:[redacted]@") {
		t.Errorf("failover not logged with a redacted url: %s", logs.String())
	}
}
