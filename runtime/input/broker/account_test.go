package broker

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The account of docs/broker.md, with exactly its permission patterns and
// topic permissions: enough for the consumer and the dump, and not enough to
// bind anything but the notification keys.
func TestNarrowAccount(t *testing.T) {
	t.Parallel() // its own virtual host
	v, narrowUser := narrowVhost(t)
	v.DeclareExchanges(t, false, "nova", "openstack")
	narrowURL := "amqp://" + narrowUser + ":" + narrowPassword + "@" + brokerAddr + "/" + url.PathEscape(v.Name)

	ob := openOutbox(t, t.TempDir(), 100)
	logs := &testkit.SyncBuffer{}
	opts := testOptions(v, logs, "nova", "openstack")
	opts.TransportURL = narrowURL
	c := newConsumer(t, newTestProcessor(t), ob, opts)
	r := startConsumer(t, c)
	testkit.WaitFor(t, 15*time.Second, "ready with the narrow account", func() bool { return r.Ready() == nil })
	if got := testutil.ToFloat64(c.m.refusedBindings); got != 0 {
		t.Fatalf("%v bindings refused: %s", got, logs.String())
	}
	v.Publish(t, "openstack", "notifications.warn", note(t, "narrow-1", "volume.attach.end"))
	testkit.WaitFor(t, 15*time.Second, "consumed", func() bool { return outboxIDs(t, ob)["narrow-1"] == 1 })

	// The topic permission keeps the account to the notification keys.
	conn := testkit.Dial(t, narrowURL)
	for _, key := range []string{"#", "conductor", "notifications.*"} {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		err = ch.QueueBind(defaultQueue, key, "nova", false, nil)
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
			t.Errorf("binding %q: %v, want ACCESS_REFUSED", key, err)
		}
	}

	// The dump runs with the same account.
	dumpLogs := &testkit.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Dump(ctx, Options{TransportURL: narrowURL, Exchanges: []string{"nova", "openstack"}, Logger: zerolog.New(dumpLogs)}, &bytes.Buffer{})
	}()
	testkit.WaitFor(t, 15*time.Second, "dump bound with the narrow account", func() bool {
		select {
		case err := <-done:
			t.Fatalf("dump: %v", err)
		default:
		}
		return strings.Contains(dumpLogs.String(), "dump bound")
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String()+dumpLogs.String(), narrowPassword) {
		t.Error("the password reached a log")
	}
}
