package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// versionNumbers splits a broker version ("4.0.5") into its major and
// minor numbers.
func versionNumbers(t *testing.T, v string) (int, int) {
	t.Helper()
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		t.Fatalf("broker version %q", v)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("broker version %q", v)
	}
	return major, minor
}

// settleKind is how a test returns a message to its queue.
type settleKind int

const (
	nackRequeue   settleKind = iota // basic.nack requeue=true: what the collector sends
	rejectRequeue                   // basic.reject requeue=true
)

func (k settleKind) String() string {
	if k == nackRequeue {
		return "basic.nack requeue=true"
	}
	return "basic.reject requeue=true"
}

// returnUntilGone takes the one message of queue with basic.get and returns
// it with settle, up to max deliveries, and answers how many deliveries it
// had, the x-delivery-count of each, and whether the broker dead-lettered it
// (to dlq) for its delivery limit. Each step waits for a condition (the
// message back in the queue, or in dlq), never for a time.
func returnUntilGone(t *testing.T, ch *amqp.Channel, queue, dlq string, settle settleKind, max int) (int, []int64, bool) {
	t.Helper()
	var counts []int64
	for got := 0; got < max; {
		var d amqp.Delivery
		dead := false
		testkit.WaitUntil(t, 30*time.Second, fmt.Sprintf("delivery %d of %s, or the message dead-lettered", got+1, queue), func() (bool, string) {
			var ok bool
			var err error
			if d, ok, err = ch.Get(queue, false); err != nil {
				t.Fatalf("get %s: %v", queue, err)
			} else if ok {
				return true, ""
			}
			dl, ok, err := ch.Get(dlq, true)
			if err != nil {
				t.Fatalf("get %s: %v", dlq, err)
			}
			if ok {
				dead = true
				deaths, _ := dl.Headers["x-death"].([]any)
				t.Logf("%s: dead-lettered after %d deliveries (x-death %v)", queue, got, deaths)
				return true, ""
			}
			return false, fmt.Sprintf("%d deliveries so far", got)
		})
		if dead {
			return got, counts, true
		}
		got++
		c, _ := d.Headers["x-delivery-count"].(int64)
		counts = append(counts, c)
		var err error
		if settle == nackRequeue {
			err = d.Nack(false, true)
		} else {
			err = d.Reject(true)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return max, counts, false
}

// TestClusterNackRequeueAndTheDeliveryLimit holds, on the RabbitMQ 4
// cluster the tests own, what docs/broker.md says of the collector's
// basic.nack with requeue (sent while the outbox refuses inserts and at each
// pause at the buffer bound) and the quorum queue's delivery limit. A plain
// client declares quorum queues without x-delivery-limit (RabbitMQ 4's
// default limit of 20 applies) and with a dead-letter queue, so that a
// message dropped for its limit is found rather than waited for; it returns
// one message again and again with basic.nack requeue=true, another with
// basic.reject requeue=true.
//
// Up to RabbitMQ 4.2, every return counts: x-delivery-count grows by one
// with each nack, and the message is dead-lettered after its 21st
// delivery. From 4.3 (rabbitmq-server#15387) a nack no longer counts and a
// reject does. Only 4.0.x (Debian 13's 4.0.5) can be run here; the test
// states which broker it ran against and expects what that version does.
func TestClusterNackRequeueAndTheDeliveryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test on the RabbitMQ 4 cluster")
	}
	v := newClusterVhost(t)
	conn := v.dial(t)
	version := brokerVersion(t, v.nodeURL(1))
	major, minor := versionNumbers(t, version)
	t.Logf("broker: RabbitMQ %s", version)
	if major != 4 {
		t.Fatalf("RabbitMQ %s: the cluster of the tests is RabbitMQ 4", version)
	}
	nackCounts := minor < 3
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	const dlq = "nack-test-dead"
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []settleKind{nackRequeue, rejectRequeue} {
		q := fmt.Sprintf("nack-test-%d", k)
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{
			"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq,
		}); err != nil {
			t.Fatalf("declare %s: %v", q, err)
		}
		if err := ch.Publish("", q, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(q)}); err != nil {
			t.Fatal(err)
		}
		counts := k == rejectRequeue || nackCounts
		max := 30 // past the default limit of 20, whether it applies or not
		got, seen, dead := returnUntilGone(t, ch, q, dlq, k, max)
		t.Logf("RabbitMQ %s, %s: %d deliveries, x-delivery-count %v, dead-lettered %v", version, k, got, seen, dead)
		if counts {
			if !dead || got != 21 {
				t.Errorf("%s on RabbitMQ %s: %d deliveries, dead-lettered %v; want dead-lettered after 21", k, version, got, dead)
			}
			for i, c := range seen {
				if c != int64(i) {
					t.Errorf("%s: delivery %d has x-delivery-count %d, want %d", k, i+1, c, i)
					break
				}
			}
		} else {
			if dead || got != max {
				t.Errorf("%s on RabbitMQ %s: %d deliveries, dead-lettered %v; want every one of %d, none counted", k, version, got, dead, max)
			}
			for i, c := range seen {
				if c != 0 {
					t.Errorf("%s: delivery %d has x-delivery-count %d, want 0", k, i+1, c)
					break
				}
			}
		}
	}
}
