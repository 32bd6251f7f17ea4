package testkit

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rmq4RunningNodes asks node for the cluster's running nodes.
func rmq4RunningNodes(t *testing.T, node int) []string {
	t.Helper()
	out := RabbitMQ4Ctl(t, node, "cluster_status", "--formatter", "json")
	var status struct {
		RunningNodes []string `json:"running_nodes"`
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil {
		t.Fatalf("cluster_status --formatter json: %v\n%s", err, out)
	}
	slices.Sort(status.RunningNodes)
	return status.RunningNodes
}

func rmq4Dial(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel on %s: %v", url, err)
	}
	return ch
}

// rmq4QuorumQueue declares queue on the node at url as a quorum queue with
// RabbitMQ 4's unlimited delivery limit, as the collector declares its own,
// deleted when the test ends; it answers the channel it declared it on.
func rmq4QuorumQueue(t *testing.T, url, queue string) *amqp.Channel {
	t.Helper()
	ch := rmq4Dial(t, url)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{
		"x-queue-type":     "quorum",
		"x-delivery-limit": int64(-1),
	}); err != nil {
		t.Fatalf("declare quorum queue %s with x-delivery-limit -1: %v", queue, err)
	}
	t.Cleanup(func() {
		if _, err := rmq4Dial(t, url).QueueDelete(queue, false, false, false); err != nil {
			t.Errorf("deleting %s: %v", queue, err)
		}
	})
	return ch
}

// rmq4RoundTrip publishes body on node pub (a URL) to queue and reads it back
// through node sub.
func rmq4RoundTrip(t *testing.T, pub, sub, queue, body string) {
	t.Helper()
	pch := rmq4Dial(t, pub)
	if err := pch.Confirm(false); err != nil {
		t.Fatalf("confirm mode: %v", err)
	}
	confirm, err := pch.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		ContentType:  "text/plain",
		Body:         []byte(body),
	})
	if err != nil {
		t.Fatalf("publish on %s: %v", pub, err)
	}
	if !confirm.Wait() {
		t.Fatalf("publish on %s: nacked", pub)
	}

	sch := rmq4Dial(t, sub)
	deliveries, err := sch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume on %s: %v", sub, err)
	}
	select {
	case d, ok := <-deliveries:
		if !ok {
			t.Fatalf("consumer on %s closed", sub)
		}
		if string(d.Body) != body {
			t.Fatalf("got %q, want %q", d.Body, body)
		}
		if err := d.Ack(false); err != nil {
			t.Fatalf("ack: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no delivery on %s within 30s", sub)
	}
	if err := sch.Close(); err != nil {
		t.Fatalf("closing the consumer's channel: %v", err)
	}
}

func TestRabbitMQ4Cluster(t *testing.T) {
	urls := RabbitMQ4Cluster(t)
	if len(urls) != 3 {
		t.Fatalf("got %d URLs, want 3: %v", len(urls), urls)
	}
	all := []string{"rabbit1@localhost", "rabbit2@localhost", "rabbit3@localhost"}
	if got := rmq4RunningNodes(t, 1); !slices.Equal(got, all) {
		t.Fatalf("running nodes %v, want %v", got, all)
	}
	if again := RabbitMQ4Cluster(t); !slices.Equal(again, urls) {
		t.Fatalf("second call returned %v, want %v", again, urls)
	}

	queue := fmt.Sprintf("tally-testkit-%d-%d", os.Getpid(), time.Now().UnixNano())
	rmq4QuorumQueue(t, urls[0], queue)

	rmq4RoundTrip(t, urls[1], urls[1], queue, "through node 2")

	// Node 3 crashes: the others see it go, the queue keeps its quorum, and
	// the node comes back into the cluster.
	StopRabbitMQ4Node(t, 3)
	if got, want := rmq4RunningNodes(t, 1), all[:2]; !slices.Equal(got, want) {
		t.Fatalf("after stopping node 3: running nodes %v, want %v", got, want)
	}
	rmq4RoundTrip(t, urls[0], urls[1], queue, "while node 3 is down")
	StartRabbitMQ4Node(t, 3)
	if got := rmq4RunningNodes(t, 1); !slices.Equal(got, all) {
		t.Fatalf("after starting node 3: running nodes %v, want %v", got, all)
	}
	rmq4RoundTrip(t, urls[2], urls[0], queue, "node 3 is back")
}

// The cluster leaves consumer_timeout at its default; a test sets a short one
// on its own queue with a consumer-timeout policy, and it takes effect within
// about a second of expiring (the script makes channels tick every second).
func TestRabbitMQ4ConsumerTimeoutPolicy(t *testing.T) {
	urls := RabbitMQ4Cluster(t)
	queue := fmt.Sprintf("tally-testkit-ct-%d-%d", os.Getpid(), time.Now().UnixNano())
	RabbitMQ4Ctl(t, 1, "set_policy", queue, "^"+queue+"$", `{"consumer-timeout":1000}`, "--apply-to", "quorum_queues")
	t.Cleanup(func() { RabbitMQ4Ctl(t, 1, "clear_policy", queue) })

	ch := rmq4QuorumQueue(t, urls[0], queue)
	if err := ch.Publish("", queue, false, false, amqp.Publishing{Body: []byte("never acked")}); err != nil {
		t.Fatalf("publish: %v", err)
	}

	cch := rmq4Dial(t, urls[1])
	closed := cch.NotifyClose(make(chan *amqp.Error, 1))
	deliveries, err := cch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	select {
	case <-deliveries:
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery within 30s")
	}
	start := time.Now()
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.PreconditionFailed {
			t.Fatalf("channel closed with %v, want PRECONDITION_FAILED (consumer timeout)", e)
		}
		t.Logf("consumer timed out after %v: %s", time.Since(start).Round(time.Millisecond), e.Reason)
	case <-time.After(30 * time.Second):
		t.Fatal("the consumer-timeout policy did not close the channel within 30s")
	}
}
