package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// BenchmarkConsume measures the whole bus path per notification: delivery,
// the real pipeline, a synced outbox commit per batch, the multiple ack.
// Publisher and consumer overlap; the time runs from the first publish to the
// last acknowledgement.
func BenchmarkConsume(b *testing.B) {
	benchVhost.Do(func() {
		benchVhost.v = newVhost(b, "nova")
	})
	v := benchVhost.v
	if v == nil {
		b.Fatal("the first run of the benchmark could not make its virtual host")
	}
	ob := openOutbox(b, b.TempDir(), 1<<40)
	opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
	opts.Prefetch = 200
	c := newConsumer(b, newTestProcessor(b), ob, opts)
	r := startConsumer(b, c)
	testkit.WaitFor(b, 30*time.Second, "ready", func() bool { return r.Ready() == nil })
	body := readTestdata(b, "wire/v2_nova_001.body")
	ch := v.Channel(b)
	before := testutil.ToFloat64(c.m.acked)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := ch.PublishWithContext(context.Background(), "nova", "notifications.info", false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	testkit.WaitFor(b, 10*time.Minute, fmt.Sprintf("%d acknowledged", b.N), func() bool {
		return testutil.ToFloat64(c.m.acked)-before >= float64(b.N)
	})
	b.StopTimer()
}

// benchVhost is shared by the runs of BenchmarkConsume (one per b.N).
var benchVhost struct {
	sync.Once
	v *vhost
}

func BenchmarkDumpLine(b *testing.B) {
	body := readTestdata(b, "wire/v2_nova_001.body")
	var line []byte
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		line = DumpLine(line[:0], "nova", "notifications.info", body)
	}
}
