package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
)

// The tests run against the real RabbitMQ on 127.0.0.1:5672 (guest/guest),
// each in a virtual host of its own (internal/testkit), so that it can
// declare and miss exchanges freely and share the broker with others.

const brokerAddr = testkit.BrokerAddr

// vhost is a test's virtual host, with what this package asks of it beyond
// testkit's.
type vhost struct{ *testkit.Vhost }

// newVhost hands the test a virtual host of its own, guest allowed
// everything in it, with the topic exchanges named declared as oslo declares
// them (not durable).
func newVhost(t testing.TB, exchanges ...string) *vhost {
	t.Helper()
	v := &vhost{testkit.NewVhost(t)}
	if len(exchanges) > 0 {
		v.DeclareExchanges(t, false, exchanges...)
	}
	return v
}

func vhostByName(name string) *vhost { return &vhost{testkit.VhostByName(name)} }

// The narrow account of docs/broker.md: its patterns are exactly the ones
// the document gives (for the exchanges nova and openstack).
const (
	narrowConfigure  = `^(tally-notifications|tally-collector-control(\..+)?|amq\.gen-.*)$`
	narrowWrite      = `^(tally-notifications|tally-collector-control(\..+)?|amq\.gen-.*)$`
	narrowRead       = `^(tally-notifications|tally-collector-control(\..+)?|amq\.gen-.*|nova|openstack)$`
	narrowTopicWrite = `^$`
	narrowTopicRead  = `^notifications\.(audit|debug|info|warn|error|critical|sample)$`
	narrowPassword   = "n4rrow-pw"
)

// narrowVhost hands out a virtual host with the narrow account set up on it
// (and only on it), and the account's name; the account is deleted when the
// test ends.
func narrowVhost(t testing.TB) (v *vhost, user string) {
	t.Helper()
	v = newVhost(t)
	user = v.Name + "-narrow"
	u, vh := testkit.ErlBin(user), testkit.ErlBin(v.Name)
	expr := `ok = rabbit_auth_backend_internal:add_user(` + u + `, ` + testkit.ErlBin(narrowPassword) + `, <<"tally-tests">>), ` +
		`ok = rabbit_auth_backend_internal:set_permissions(` + u + `, ` + vh + `, ` +
		testkit.ErlBin(narrowConfigure) + `, ` + testkit.ErlBin(narrowWrite) + `, ` + testkit.ErlBin(narrowRead) + `, <<"tally-tests">>), ` +
		`lists:foreach(fun(X) -> ok = rabbit_auth_backend_internal:set_topic_permissions(` + u + `, ` + vh +
		`, X, ` + testkit.ErlBin(narrowTopicWrite) + `, ` + testkit.ErlBin(narrowTopicRead) + `, <<"tally-tests">>) end, [<<"nova">>, <<"openstack">>]), ok.`
	if out := testkit.Rabbitmqctl(t, "eval", expr); strings.TrimSpace(out) != "ok" {
		t.Fatalf("making the narrow account: %s", out)
	}
	t.Cleanup(func() { _, _ = exec.Command("rabbitmqctl", "delete_user", user).CombinedOutput() })
	return v, user
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(testkit.Main(m))
}

// queuedIDs reads the message_ids of every message ready in the queue
// without removing any: they are fetched unacknowledged and go back to the
// queue when the channel closes.
func (v *vhost) queuedIDs(t testing.TB, queue string) map[string]bool {
	t.Helper()
	ch := v.Channel(t)
	ids := map[string]bool{}
	for {
		m, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		ids[messageID(t, m.Body)] = true
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// osloNotify publishes notification files of testdata/notifications with the
// real oslo.messaging Notifier (examples/publisher/oslo_notify.py) and
// returns the message_ids used.
func (v *vhost) osloNotify(t testing.TB, exchange string, count int, files ...string) []string {
	t.Helper()
	args := []string{"--url", v.OsloURL(), "--exchange", exchange, "--publisher-id", "test.host1", "--count", fmt.Sprint(count)}
	for _, f := range files {
		args = append(args, filepath.Join("testdata", "notifications", f))
	}
	ids := testkit.OsloNotify(t, args...)
	if len(ids) != count*len(files) {
		t.Fatalf("published %d, want %d", len(ids), count*len(files))
	}
	return ids
}

// testOptions are fast schedules for tests: classic queue (the broker here is
// 3.10), short backoffs.
func testOptions(v *vhost, logs *testkit.SyncBuffer, exchanges ...string) Options {
	return Options{
		TransportURL: v.URL(),
		Exchanges:    exchanges,
		QueueType:    QueueClassic,
		Prefetch:     20,
		ReconnectMin: 100 * time.Millisecond,
		ReconnectMax: 400 * time.Millisecond,
		ProbeMin:     200 * time.Millisecond,
		ProbeMax:     400 * time.Millisecond,
		PauseMin:     200 * time.Millisecond,
		PauseMax:     400 * time.Millisecond,
		RefusedRetry: time.Second,
		Logger:       zerolog.New(logs).Level(zerolog.DebugLevel),
	}
}

// newConsumer is New's consumer; an error fails the test.
func newConsumer(t testing.TB, proc input.Processor, ob input.Outbox, opts Options) *Consumer {
	t.Helper()
	c, err := New(proc, ob, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type runningConsumer struct {
	*Consumer
	stop func() // cancels Run and waits for it; later stops return at once
}

func startConsumer(t testing.TB, c *Consumer) *runningConsumer {
	t.Helper()
	return &runningConsumer{Consumer: c, stop: testkit.Background(t, 15*time.Second, c.Run)}
}

func openOutbox(t testing.TB, dir string, maxEvents int64) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.Open(outbox.Options{Dir: dir, MaxEvents: maxEvents, MinFreeBytes: -1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	return ob
}

// outboxIDs counts the event_ids in the outbox.
func outboxIDs(t testing.TB, ob *outbox.Outbox) map[string]int {
	t.Helper()
	_, _, events, err := ob.Peek(context.Background(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for _, e := range events {
		var ev struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(e, &ev); err != nil {
			t.Fatalf("event %s: %v", e, err)
		}
		ids[ev.EventID]++
	}
	return ids
}

// messageID reads the oslo message_id of a body (envelope or bare).
func messageID(t testing.TB, body []byte) string {
	t.Helper()
	var outer map[string]any
	if err := json.Unmarshal(body, &outer); err != nil {
		t.Fatal(err)
	}
	if s, ok := outer["oslo.message"].(string); ok {
		outer = nil
		if err := json.Unmarshal([]byte(s), &outer); err != nil {
			t.Fatal(err)
		}
	}
	id, _ := outer["message_id"].(string)
	if id == "" {
		t.Fatal("body has no message_id")
	}
	return id
}

// note builds an oslo envelope for a notification of the given type.
func note(t testing.TB, id, eventType string) []byte {
	t.Helper()
	inner, _ := json.Marshal(map[string]any{
		"message_id": id, "publisher_id": "test.host1", "event_type": eventType, "priority": "INFO",
		"payload": map[string]any{"n": 1}, "timestamp": "2026-12-02 10:46:03.371529",
	})
	return envelope(t, inner)
}

// publishNotes publishes n notifications (compute.instance.exists) straight
// to the collector's queue, their message_ids prefix-000 and up, and returns
// the ids in order.
func publishNotes(t testing.TB, v *vhost, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	bodies := make([][]byte, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
		bodies[i] = note(t, ids[i], "compute.instance.exists")
	}
	v.Publish(t, "", defaultQueue, bodies...)
	return ids
}

func openChildOutbox(dir string) (*outbox.Outbox, error) {
	return openChildOutboxWithReserve(dir, -1)
}

// openChildOutboxWithReserve opens an outbox that keeps reserve bytes free: a
// reserve larger than the disk makes every insert refused (ErrRefused), as a
// full disk does.
func openChildOutboxWithReserve(dir string, reserve int64) (*outbox.Outbox, error) {
	return outbox.Open(outbox.Options{Dir: dir, MaxEvents: 1000, MinFreeBytes: reserve, Logger: zerolog.Nop()})
}

func eventID(t testing.TB, ev []byte) string {
	t.Helper()
	var e struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(ev, &e); err != nil {
		t.Fatalf("event %s: %v", ev, err)
	}
	return e.EventID
}

// classicQueueVhost is a fresh virtual host with the nova exchange and the
// collector's queue declared classic (as the consumer declares it with
// QueueClassic), and a channel on it for publishing.
func classicQueueVhost(t testing.TB) (*vhost, *amqp.Channel) {
	t.Helper()
	v := newVhost(t, "nova")
	ch := v.Channel(t)
	if _, err := ch.QueueDeclare(defaultQueue, true, false, false, false, queueArgs(QueueClassic)); err != nil {
		t.Fatal(err)
	}
	return v, ch
}
