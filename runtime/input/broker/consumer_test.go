package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// The main path: real oslo notifications and raw captures in, one event per
// mapped notification in the outbox, everything acknowledged; the rules on
// bindings, a late exchange, sizes, non-JSON, versioned and unclaimed types
// and mapper failures along the way.
func TestConsumeCommitThenAck(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova", "neutron", "openstack")
	ob := openOutbox(t, t.TempDir(), 1000)
	logs := &testkit.SyncBuffer{}
	opts := testOptions(v, logs, "nova", "neutron", "openstack", "glance")
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	c := newConsumer(t, newTestProcessor(t), ob, opts)
	if c.Ready() == nil {
		t.Fatal("ready before running")
	}
	r := startConsumer(t, c)
	testkit.WaitFor(t, 10*time.Second, "ready", func() bool { return r.Ready() == nil })
	if got := testutil.ToFloat64(c.m.missingExchanges); got != 1 {
		t.Errorf("missing exchanges gauge %v, want 1 (glance)", got)
	}
	if !strings.Contains(logs.String(), "glance") {
		t.Error("the missing exchange is not logged")
	}

	// Bindings: <topic>.<priority> for every present exchange, one each, never #.
	var want []string
	for _, e := range []string{"nova", "neutron", "openstack"} {
		for _, p := range priorities {
			want = append(want, e+" notifications."+p)
		}
	}
	got := v.Bindings(t, defaultQueue)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("bindings\n got %v\nwant %v", got, want)
	}

	// Published by the real oslo.messaging Notifier.
	wantIDs := map[string]bool{}
	for _, id := range v.osloNotify(t, "nova", 3, "compute.instance.create.end__ceilometer__1.json") {
		wantIDs[id] = true
	}
	// Raw captures: messagingv2, the bare messaging-v1 body, non-ASCII.
	for _, f := range []string{"v2_nova_001.body", "v1_nova_001.body", "v2_unicode_001.body"} {
		b := readTestdata(t, "wire/"+f)
		v.Publish(t, "nova", "notifications.info", b)
		wantIDs[messageID(t, b)] = true
	}
	cinder := readTestdata(t, "wire/v2_cinder_001.body")
	v.Publish(t, "openstack", "notifications.info", cinder)
	wantIDs[messageID(t, cinder)] = true

	// Acknowledged without an event: versioned, unclaimed. Kept as dead
	// letters: a compressed body without its header, an oversize one (cut),
	// garbage, and a failing mapper's notification.
	oversize := append([]byte(`{"oslo.version": "2.0", "oslo.message": "`), bytes.Repeat([]byte("x"), 1<<20+10)...)
	oversize = append(oversize, `"}`...)
	versioned := envelope(t, readTestdata(t, "notifications/instance.create.end__watcher__1.json"))
	v.Publish(t, "nova", "notifications.info",
		readTestdata(t, "wire/v2_gzip_002.body"), oversize, []byte{0x85, 0xa1, 0x01},
		versioned, note(t, "unclaimed-1", "identity.project.created"), note(t, "fail-1", "test.fail"))
	v.Publish(t, "neutron", "notifications.error", []byte("not json at all"))
	// A key outside the notification topics reaches nothing of ours.
	v.Publish(t, "nova", "conductor", note(t, "rpc-1", "compute.instance.rpc"))

	total := len(wantIDs) + 7
	testkit.WaitFor(t, 15*time.Second, "all acknowledged", func() bool {
		return testutil.ToFloat64(c.m.acked) == float64(total)
	})

	// glance appears with its first notification (oslo declares the exchange
	// as it publishes): that first one reaches no queue of ours; once the
	// probe has bound the exchange, the next one is collected.
	lost := v.osloNotify(t, "glance", 1, "image.upload__ceilometer__1.json")
	testkit.WaitFor(t, 10*time.Second, "glance bound", func() bool { return testutil.ToFloat64(c.m.missingExchanges) == 0 })
	for _, p := range priorities {
		id := "glance-" + p
		v.Publish(t, "glance", "notifications."+p, note(t, id, "image.upload"))
		wantIDs[id] = true
		total++
	}
	testkit.WaitFor(t, 10*time.Second, "glance notifications acknowledged", func() bool {
		return testutil.ToFloat64(c.m.acked) == float64(total)
	})

	ids := outboxIDs(t, ob)
	for id := range wantIDs {
		if ids[id] != 1 {
			t.Errorf("event %s in the outbox %d times, want 1", id, ids[id])
		}
	}
	if len(ids) != len(wantIDs) {
		t.Errorf("outbox holds %d ids, want %d: %v", len(ids), len(wantIDs), ids)
	}
	if ids[lost[0]] != 0 {
		t.Error("a notification published before its exchange was bound was collected")
	}
	if n := ob.DeadLetterCount(); n != 5 {
		t.Fatalf("dead letters %d, want 5", n)
	}
	dl, err := ob.ListDeadLetters(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, d := range dl {
		reasons[d.Reason]++
		switch d.Reason {
		case "trap":
			if d.Module != "failmap@1.0.0" || d.EventType != "test.fail" || d.Exchange != "nova" || !bytes.Contains(d.Body, []byte("fail-1")) {
				t.Errorf("dead letter %+v", d.DeadLetter)
			}
		case pipeline.ReasonBodyTooLarge:
			if len(d.Body) != pipeline.DefaultMaxBodyBytes || d.Truncated != len(oversize) {
				t.Errorf("oversize dead letter: %d bytes kept, truncated %d, want %d and %d", len(d.Body), d.Truncated, pipeline.DefaultMaxBodyBytes, len(oversize))
			}
		}
	}
	if reasons["trap"] != 1 || reasons[pipeline.ReasonNotJSON] != 3 || reasons[pipeline.ReasonBodyTooLarge] != 1 {
		t.Errorf("dead letter reasons %v", reasons)
	}
	if got := testutil.ToFloat64(c.m.consumed); got != float64(total) {
		t.Errorf("consumed %v, want %v", got, total)
	}
	if got := testutil.ToFloat64(c.m.nacked); got != 0 {
		t.Errorf("nacked %v", got)
	}
	for _, name := range []string{"tally_collector_consumed_total", "tally_collector_acked_total", "tally_collector_nacked_total",
		"tally_collector_reconnects_total", "tally_collector_missing_exchanges"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 1 {
			t.Errorf("metric %s: %d %v", name, n, err)
		}
	}
	// The log names sizes, never contents.
	if strings.Contains(logs.String(), "not json at all") || strings.Contains(logs.String(), "xxxxxxxx") {
		t.Error("a body reached the log")
	}
	r.stop()
	if n, ok := v.QueueState(t, defaultQueue); !ok || n != 0 {
		t.Errorf("queue after stop: %d messages (exists %v)", n, ok)
	}
}

// When none of the listed exchanges exists the session fails and the
// collector reconnects until one appears.
func TestNoExchangePresent(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t)
	logs := &testkit.SyncBuffer{}
	c := newConsumer(t, newTestProcessor(t), openOutbox(t, t.TempDir(), 100), testOptions(v, logs, "nova", "glance"))
	r := startConsumer(t, c)
	testkit.WaitFor(t, 10*time.Second, "two reconnects", func() bool { return testutil.ToFloat64(c.m.reconnects) >= 2 })
	if err := r.Ready(); !errors.Is(err, ErrNoExchanges) || !errors.Is(err, ErrNotConsuming) {
		t.Fatalf("ready: %v", err)
	}
	v.DeclareExchanges(t, false, "glance")
	testkit.WaitFor(t, 10*time.Second, "ready once glance exists", func() bool { return r.Ready() == nil })
	if got := testutil.ToFloat64(c.m.missingExchanges); got != 1 {
		t.Errorf("missing gauge %v, want 1 (nova)", got)
	}
}

// REQUIRE_EXCHANGES: one missing exchange stops consumption (nothing is
// bound, nothing consumed) until every listed one exists.
func TestRequireExchanges(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova")
	ob := openOutbox(t, t.TempDir(), 100)
	logs := &testkit.SyncBuffer{}
	opts := testOptions(v, logs, "nova", "neutron")
	opts.RequireExchanges = true
	c := newConsumer(t, newTestProcessor(t), ob, opts)
	r := startConsumer(t, c)
	testkit.WaitFor(t, 10*time.Second, "exchanges-missing state", func() bool { return errors.Is(r.Ready(), ErrExchangesMissing) })
	if !strings.Contains(r.Ready().Error(), "neutron") {
		t.Errorf("ready does not name the missing exchange: %v", r.Ready())
	}
	// Nothing is bound: a notification on nova reaches no queue of ours.
	v.Publish(t, "nova", "notifications.info", note(t, "early-1", "compute.instance.exists"))
	if n, _ := v.QueueState(t, defaultQueue); n != 0 {
		t.Fatalf("bound while an exchange is missing (%d queued)", n)
	}
	if got := testutil.ToFloat64(c.m.consumed); got != 0 {
		t.Fatalf("consumed %v while an exchange is missing", got)
	}
	v.DeclareExchanges(t, false, "neutron")
	testkit.WaitFor(t, 10*time.Second, "ready", func() bool { return r.Ready() == nil })
	v.Publish(t, "neutron", "notifications.info", note(t, "late-1", "compute.instance.exists"))
	v.Publish(t, "nova", "notifications.sample", note(t, "late-2", "compute.instance.exists"))
	testkit.WaitFor(t, 10*time.Second, "consumed", func() bool {
		ids := outboxIDs(t, ob)
		return ids["late-1"] == 1 && ids["late-2"] == 1
	})
}

// The default asks for a quorum queue; on a broker older than 4.0 the session
// ends before anything is declared and says which setting to use.
func TestQuorumRefusedOnOldBroker(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova")
	c0 := v.Conn(t)
	if major, ok := majorVersion(fmt.Sprint(c0.Properties["version"])); !ok || major >= 4 {
		testkit.Missing(t, "the broker on %s is RabbitMQ %v, which supports quorum queues with x-delivery-limit -1: "+
			"this test needs one older than 4.0 there (Debian 12's rabbitmq-server, 3.10)", brokerAddr, c0.Properties["version"])
	}
	logs := &testkit.SyncBuffer{}
	opts := testOptions(v, logs, "nova")
	opts.QueueType = "" // the default
	c := newConsumer(t, newTestProcessor(t), openOutbox(t, t.TempDir(), 100), opts)
	r := startConsumer(t, c)
	testkit.WaitFor(t, 10*time.Second, "refusal", func() bool { return errors.Is(r.Ready(), ErrQuorumUnsupported) })
	if !strings.Contains(r.Ready().Error(), "QUEUE_TYPE=classic") || !strings.Contains(logs.String(), "QUEUE_TYPE=classic") {
		t.Errorf("the operator is not told the setting: %v", r.Ready())
	}
	if _, exists := v.QueueState(t, defaultQueue); exists {
		t.Fatal("a queue was declared on a broker that cannot hold it safely")
	}
}

// A queue that exists with the other type: reported, nothing deleted, retried.
func TestQueueTypeMismatch(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova")
	ch := v.Channel(t)
	if _, err := ch.QueueDeclare(defaultQueue, true, false, false, false, map[string]any{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	v.Publish(t, "", defaultQueue, note(t, "backlog-1", "compute.instance.exists"))
	logs := &testkit.SyncBuffer{}
	c := newConsumer(t, newTestProcessor(t), openOutbox(t, t.TempDir(), 100), testOptions(v, logs, "nova"))
	r := startConsumer(t, c)
	testkit.WaitFor(t, 10*time.Second, "mismatch retried", func() bool {
		return errors.Is(r.Ready(), ErrQueueTypeMismatch) && testutil.ToFloat64(c.m.reconnects) >= 2
	})
	if !strings.Contains(logs.String(), "nothing was deleted") {
		t.Error("mismatch not reported in the log")
	}
	r.stop()
	// Still there, still quorum (a quorum declare is accepted), backlog kept.
	if n, ok := v.QueueState(t, defaultQueue); !ok || n != 1 {
		t.Fatalf("queue or its backlog changed: exists %v, %d messages", ok, n)
	}
	ch2 := v.Channel(t)
	if _, err := ch2.QueueDeclare(defaultQueue, true, false, false, false, map[string]any{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("queue type changed: %v", err)
	}
}

// A binding the broker refuses (a topic permission) is reported; the others
// stay and carry their notifications.
func TestRefusedBinding(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova")
	testkit.Rabbitmqctl(t, "set_topic_permissions", "-p", v.Name, "guest", "nova", ".*",
		`^notifications\.(audit|debug|info|warn|critical|sample)$`)
	ob := openOutbox(t, t.TempDir(), 100)
	logs := &testkit.SyncBuffer{}
	c := newConsumer(t, newTestProcessor(t), ob, testOptions(v, logs, "nova"))
	r := startConsumer(t, c)
	testkit.WaitFor(t, 10*time.Second, "ready", func() bool { return r.Ready() == nil })
	if testutil.ToFloat64(c.m.refusedBindings) != 1 || !strings.Contains(logs.String(), "notifications.error") {
		t.Error("refused binding not reported")
	}
	// The other six bindings stay and carry their notifications.
	v.Publish(t, "nova", "notifications.error", note(t, "err-1", "compute.instance.exists"))
	for _, p := range priorities {
		if p != "error" {
			v.Publish(t, "nova", "notifications."+p, note(t, "ok-"+p, "compute.instance.exists"))
		}
	}
	testkit.WaitFor(t, 10*time.Second, "six consumed", func() bool { return testutil.ToFloat64(c.m.acked) == 6 })
	ids := outboxIDs(t, ob)
	if len(ids) != 6 || ids["err-1"] != 0 {
		t.Fatalf("outbox %v", ids)
	}
}

func TestOptionsValidation(t *testing.T) {
	_, err := New(newTestProcessor(t), nil, Options{})
	if !errors.Is(err, ErrOptions) {
		t.Fatalf("nil outbox: %v", err)
	}
	ob := openOutbox(t, t.TempDir(), 10)
	_, err = New(newTestProcessor(t), ob, Options{
		TransportURL: "amqp://u:hunter2@h:notaport/", Topics: []string{"notifications", "#"}, QueueType: "stream", Prefetch: -1,
	})
	if !errors.Is(err, ErrOptions) {
		t.Fatalf("want ErrOptions, got %v", err)
	}
	for _, want := range []string{"no exchanges", `topic "#"`, "queue type", "prefetch", "port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q not reported in %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("password in the error: %v", err)
	}
}
