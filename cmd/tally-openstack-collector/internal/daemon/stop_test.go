package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/broker"
)

// stopMargin is what a stop may take beyond STOP_TIMEOUT on a busy machine
// (goroutines scheduled late, the outbox's close), not a wait of the stop: a
// stop that hangs in an unanswered close never returns at all.
const stopMargin = 15 * time.Second

// keepUnsent leaves a mapper decision in the outbox at dir as the control
// link of replica keeps one the broker has not confirmed: published while
// the link was down.
func keepUnsent(t *testing.T, dir, replica string) {
	t.Helper()
	ob, err := outbox.Open(outbox.Options{Dir: dir, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	l, reg := unsentLink(t, ob, replica)
	d := broker.Decision{Action: "promote", Module: "nova", Candidate: "nova@9.9.9",
		SHA256: strings.Repeat("ab", 32), By: replica, At: time.Now().UTC().Truncate(time.Second)}
	if err := l.Publish(context.Background(), d); !errors.Is(err, broker.ErrNotShared) {
		t.Fatalf("publish with the link down: %v, want ErrNotShared", err)
	}
	if n := testkit.Metric(t, reg, "tally_collector_control_unsent_decisions"); n != 1 {
		t.Fatalf("%v decisions kept, want 1", n)
	}
}

// unsentLink is a control link of replica over ob that is never run (its
// broker is out of reach): it loads what ob keeps unsent, and its metrics
// (the number of decisions unsent) are in the registry returned with it.
func unsentLink(t *testing.T, ob *outbox.Outbox, replica string) (*broker.Control, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	l, err := broker.NewControl(broker.ControlOptions{
		Registerer:   reg,
		TransportURL: "amqp://guest:guest@127.0.0.1:1/", Replica: replica, QueueType: broker.QueueClassic,
		Apply:  func(context.Context, broker.Decision) error { return nil },
		Store:  ob,
		Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, reg
}

// TestRunStopBoundedUnderMemoryAlarm: under a broker memory alarm, with a
// mapper decision the broker has not confirmed, the control link's
// connection is blocked once it publishes the decision, and the broker
// never answers its close. SIGTERM still stops the daemon within
// STOP_TIMEOUT (and a margin): every delivery is committed, acknowledged
// and flushed, and the decision is kept in the outbox for the next start.
func TestRunStopBoundedUnderMemoryAlarm(t *testing.T) {
	node := testkit.RabbitMQNode(t)
	v := node.Vhost()
	v.DeclareExchanges(t, false, "nova")
	api, srv := referenceAPI(t)

	const replica, notifications = "stop-test", 3
	cfg := daemonSettings(t, v, srv.URL, "TALLY_OSC_STOP_TIMEOUT=12s", "TALLY_OSC_FLUSH_TIMEOUT=4s",
		"TALLY_OSC_REPLICA_NAME="+replica)
	keepUnsent(t, cfg.BufferPath, replica)

	// Notifications waiting in the collector's queue before the alarm: the
	// queue declared and bound as the daemon does (classic, durable).
	c := v.Conn(t)
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(cfg.Queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(cfg.Queue, "notifications.info", "nova", false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range notifications {
		if err := ch.PublishWithContext(context.Background(), "nova", "notifications.info", false, false,
			amqp.Publishing{ContentType: "application/json", Body: novaNotification(t, i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the notifications in the queue", func() bool {
		ready, _ := v.QueueState(t, cfg.Queue)
		return ready == notifications
	})
	_ = c.Close()

	node.MemoryAlarm(t)
	d := runInProcess(t, cfg)
	d.waitReady(t)
	testkit.WaitUntil(t, time.Minute, "the events at the Reporting API", func() (bool, string) {
		st, err := api.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.Accepted == notifications, fmt.Sprintf("%+v", st)
	})
	testkit.WaitUntil(t, time.Minute, "the control link's connection blocked", func() (bool, string) {
		st := node.ConnectionState(t, "tally-openstack-collector control")
		return st == "blocked", "state " + st
	})

	d.signals <- syscall.SIGTERM
	start := time.Now()
	if err := d.returned(t, cfg.StopTimeout+stopMargin); err != nil {
		t.Fatalf("Run after a signal: %v\n%s", err, d.log)
	}
	t.Logf("stopped %s after the signal, STOP_TIMEOUT %s", time.Since(start).Round(time.Millisecond), cfg.StopTimeout)
	checkCleanStop(t, d, v)
	if st, err := api.Stats(); err != nil || st.Accepted != notifications {
		t.Errorf("Reporting API after the stop: %+v %v, want %d accepted", st, err, notifications)
	}
	ob, err := outbox.Open(outbox.Options{Dir: cfg.BufferPath, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if _, reg := unsentLink(t, ob, replica); testkit.Metric(t, reg, "tally_collector_control_unsent_decisions") != 1 {
		t.Errorf("%v unconfirmed decisions kept after the stop, want 1", testkit.Metric(t, reg, "tally_collector_control_unsent_decisions"))
	}
}

// TestStopBoundsFitTheInputsBudget: the consumer's graceful stop and two
// close bounds (its own close, and a basic.cancel left unanswered) fill the
// inputs' budget, STOP_TIMEOUT - FLUSH_TIMEOUT, and no more; the close
// bound is a quarter of it, at most broker.DefaultCloseTimeout.
func TestStopBoundsFitTheInputsBudget(t *testing.T) {
	for _, tc := range []struct {
		stop, flush, drain, closeTimeout time.Duration
	}{
		{30 * time.Second, 10 * time.Second, 10 * time.Second, 5 * time.Second}, // the defaults
		{12 * time.Second, 4 * time.Second, 4 * time.Second, 2 * time.Second},
		{5 * time.Minute, 10 * time.Second, 280 * time.Second, broker.DefaultCloseTimeout},
		{2 * time.Second, time.Second, 500 * time.Millisecond, 250 * time.Millisecond},
	} {
		cfg := &settings.Config{StopTimeout: tc.stop, FlushTimeout: tc.flush}
		drain, closeTimeout := stopBounds(cfg)
		if drain != tc.drain || closeTimeout != tc.closeTimeout {
			t.Errorf("STOP_TIMEOUT %s, FLUSH_TIMEOUT %s: drain %s, close bound %s; want %s, %s",
				tc.stop, tc.flush, drain, closeTimeout, tc.drain, tc.closeTimeout)
		}
		if drain+2*closeTimeout != tc.stop-tc.flush {
			t.Errorf("STOP_TIMEOUT %s, FLUSH_TIMEOUT %s: %s + 2 × %s is not the inputs' budget", tc.stop, tc.flush, drain, closeTimeout)
		}
	}
}
