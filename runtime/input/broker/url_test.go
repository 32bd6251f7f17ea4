package broker

import (
	"strings"
	"testing"
	"time"
)

func TestBackoffCappedWithJitter(t *testing.T) {
	b := backoff{min: time.Second, max: 60 * time.Second}
	var got []time.Duration
	for i := 0; i < 8; i++ {
		got = append(got, b.next())
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("probe schedule %v", got)
		}
	}
	j := backoff{min: time.Second, max: 4 * time.Second, jitter: true}
	for i := 0; i < 50; i++ {
		d := j.next()
		if d < time.Second/2 || d > 4*time.Second {
			t.Fatalf("jittered delay %v out of range", d)
		}
	}
}

// oslo's multi-host form: the first host refuses, the second is used.
func TestFailoverToSecondHost(t *testing.T) {
	v := newVhost(t)
	v.declareExchanges(t, false, "nova")
	logs := &syncBuf{}
	opts := testOptions(v, logs, "nova")
	opts.TransportURL = "rabbit://guest:guest@127.0.0.1:1,guest:guest@" + brokerAddr + "/" + v.name
	c, err := New(newTestProcessor(t), openOutbox(t, t.TempDir(), 10), opts)
	if err != nil {
		t.Fatal(err)
	}
	r := startConsumer(t, c)
	waitFor(t, 15*time.Second, "ready through the second host", func() bool { return r.Ready() == nil })
	if !strings.Contains(logs.String(), "127.0.0.1:1") || !strings.Contains(logs.String(), "guest:[redacted]@") {
		t.Errorf("failover not logged with a redacted url: %s", logs.String())
	}
}
