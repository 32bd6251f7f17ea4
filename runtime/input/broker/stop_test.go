package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// stopMargin is what a stop may take beyond its bound on a busy machine:
// the scheduling of the goroutines, not a wait of the stop. A stop that
// hangs in an unanswered close never returns at all.
const stopMargin = 15 * time.Second

// TestControlStopBoundedUnderMemoryAlarm: a broker under a memory alarm
// blocks the control link's connection once it publishes a decision, and
// never answers its connection.close. Run still returns within CloseTimeout
// of its context ending (the socket is closed), and the decision the broker
// did not confirm is kept for the next run.
func TestControlStopBoundedUnderMemoryAlarm(t *testing.T) {
	node := testkit.RabbitMQNode(t)
	ob := openOutbox(t, t.TempDir(), 100)
	const closeTimeout = 2 * time.Second
	r := newLink(t, nil, "collector-0", func(o *ControlOptions) {
		o.TransportURL = node.URL()
		o.Store = ob
		// The session waits for the confirm until the stop: the stop meets
		// it on the blocked connection.
		o.ConfirmTimeout = time.Hour
		o.CloseTimeout = closeTimeout
	})
	r.start(t)
	r.waitUp(t)

	node.MemoryAlarm(t)
	d := decision(1, "collector-0")
	pctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.Publish(pctx, d); !errors.Is(err, ErrNotShared) {
		t.Fatalf("publish under the memory alarm: %v, want ErrNotShared", err)
	}
	testkit.WaitUntil(t, time.Minute, "the control link's connection blocked", func() (bool, string) {
		st := node.ConnectionState(t, "tally-openstack-collector control")
		return st == "blocked", "state " + st
	})

	r.cancel()
	r.cancel = nil // the cleanup must not wait for a link that hangs
	start := time.Now()
	select {
	case <-r.done:
		t.Logf("Run returned %s after its context ended (CloseTimeout %s)", time.Since(start).Round(time.Millisecond), closeTimeout)
	case <-time.After(closeTimeout + stopMargin):
		t.Fatalf("Run did not return within %s of its context ending under a memory alarm:\n%s", closeTimeout+stopMargin, r.logs)
	}
	if again := newLink(t, nil, "collector-0", func(o *ControlOptions) { o.Store = ob }); again.Unsent() != 1 {
		t.Errorf("the unconfirmed decision was not kept: %d unsent, want 1", again.Unsent())
	}
}

// TestConsumerStopBoundedWhenTheBrokerHangs: a broker that stops answering
// (its processes stopped, its connections open, no heartbeat missed yet)
// never answers the basic.cancel of the stop nor the close. Run still
// returns within StopBudget + CloseTimeout of its context ending: the
// session's guard closes the socket.
func TestConsumerStopBoundedWhenTheBrokerHangs(t *testing.T) {
	node := testkit.RabbitMQNode(t)
	v := &vhost{node.Vhost()}
	v.DeclareExchanges(t, false, "nova")
	opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
	opts.StopBudget, opts.CloseTimeout = time.Second, time.Second
	// A missed heartbeat would end the connection too, after three
	// intervals: far beyond the bound under test.
	opts.Heartbeat = 10 * time.Minute
	c := newConsumer(t, newTestProcessor(t), openOutbox(t, t.TempDir(), 100), opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testkit.WaitFor(t, 30*time.Second, "consuming", func() bool { return c.Ready() == nil })

	node.Freeze(t)
	cancel()
	bound := opts.StopBudget + opts.CloseTimeout
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		t.Logf("Run returned %s after its context ended (StopBudget + CloseTimeout %s)", time.Since(start).Round(time.Millisecond), bound)
	case <-time.After(bound + stopMargin):
		node.Thaw(t)
		<-done
		t.Fatalf("Run did not return within %s of its context ending with the broker hung", bound+stopMargin)
	}
}
