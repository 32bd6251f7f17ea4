package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// firstSeen wraps the real pipeline and records, per message_id, whether
// the consumer handed the message over as a first delivery.
type firstSeen struct {
	input.Processor
	mu    sync.Mutex
	first map[string]bool
}

func (f *firstSeen) Process(ctx context.Context, msg pipeline.Message) pipeline.Result {
	var m struct {
		MessageID string `json:"message_id"`
	}
	_ = json.Unmarshal(msg.Body, &m)
	f.mu.Lock()
	f.first[m.MessageID] = msg.FirstDelivery
	f.mu.Unlock()
	return f.Processor.Process(ctx, msg)
}

func (f *firstSeen) seen(id string) (first, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first, ok = f.first[id]
	return first, ok
}

// A delivery the broker marks as delivered before (the redelivered flag) is
// handed to the pipeline as no first delivery, so that a built-in module
// maps it guarded; a fresh one as a first delivery. Both are committed as
// usual. (The local broker is RabbitMQ 3: a classic queue; the quorum
// queue's x-delivery-count is TestDeliveryCountHeader's.)
func TestRedeliveredIsNoFirstDelivery(t *testing.T) {
	t.Parallel() // its own virtual host
	for _, qt := range []string{QueueClassic} {
		t.Run(qt, func(t *testing.T) {
			v := newVhost(t, "nova")
			ob := openOutbox(t, t.TempDir(), 1000)
			opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
			opts.QueueType = qt
			rec := &firstSeen{Processor: newTestProcessor(t), first: map[string]bool{}}
			// A first run declares and binds the queue.
			c := newConsumer(t, rec, ob, opts)
			r := startConsumer(t, c)
			testkit.WaitFor(t, 20*time.Second, "ready", func() bool { return r.Ready() == nil })
			r.stop()

			body := func(id string) []byte {
				return []byte(fmt.Sprintf(`{"message_id":%q,"event_type":"test.a","publisher_id":"p","timestamp":"2026-01-01 00:00:00.000000","payload":{}}`, id))
			}
			// The broker delivers "again" once to a consumer that gives it back.
			v.Publish(t, "nova", "notifications.info", body("again"))
			ch := v.Channel(t)
			var d amqp.Delivery
			testkit.WaitFor(t, 10*time.Second, "the first delivery", func() bool {
				var ok bool
				var err error
				d, ok, err = ch.Get(defaultQueue, false)
				if err != nil {
					t.Fatal(err)
				}
				return ok
			})
			if d.Redelivered || deliveryCount(d.Headers) != 0 || !firstDelivery(d) {
				t.Fatalf("the first delivery is marked: redelivered %v, headers %v", d.Redelivered, d.Headers)
			}
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			v.Publish(t, "nova", "notifications.info", body("fresh"))

			c, err := New(rec, ob, opts)
			if err != nil {
				t.Fatal(err)
			}
			startConsumer(t, c)
			testkit.WaitFor(t, 20*time.Second, "both committed", func() bool { return ob.Depth() == 2 })
			if first, ok := rec.seen("again"); !ok || first {
				t.Errorf("the redelivered message: seen %v, first delivery %v; want seen, not first", ok, first)
			}
			if first, ok := rec.seen("fresh"); !ok || !first {
				t.Errorf("the fresh message: seen %v, first delivery %v; want seen, first", ok, first)
			}
		})
	}
}

// x-delivery-count as a quorum queue sends it, in any integer type, and
// anything else on the safe side.
func TestDeliveryCountHeader(t *testing.T) {
	for _, c := range []struct {
		h    amqp.Table
		want int64
	}{
		{nil, 0},
		{amqp.Table{"x-delivery-count": int64(0)}, 0},
		{amqp.Table{"x-delivery-count": int64(2)}, 2},
		{amqp.Table{"x-delivery-count": int32(1)}, 1},
		{amqp.Table{"x-delivery-count": int16(3)}, 3},
		{amqp.Table{"x-delivery-count": uint8(1)}, 1},
		{amqp.Table{"x-delivery-count": "1"}, 1},
	} {
		if got := deliveryCount(c.h); got != c.want {
			t.Errorf("deliveryCount(%v) = %d, want %d", c.h, got, c.want)
		}
		if got := firstDelivery(amqp.Delivery{Headers: c.h}); got != (c.want == 0) {
			t.Errorf("firstDelivery(%v) = %v", c.h, got)
		}
	}
	if firstDelivery(amqp.Delivery{Redelivered: true}) {
		t.Error("a delivery flagged redelivered is a first delivery")
	}
}
