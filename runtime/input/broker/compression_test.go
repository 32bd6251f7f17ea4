package broker

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// osloNotifyCompressed publishes with the real oslo.messaging Notifier whose
// rabbit driver has kombu_compression set, as an operator's services do.
func (v *vhost) osloNotifyCompressed(t testing.TB, exchange, compression string, count int, file string) []string {
	t.Helper()
	return testkit.OsloNotify(t, "--url", v.OsloURL(), "--exchange", exchange, "--compression", compression,
		"--count", fmt.Sprint(count), filepath.Join("testdata", "notifications", file))
}

// Notifications published with kombu_compression (every codec Debian's kombu
// offers without extra modules) reach the outbox once each; a body whose
// compression header lies, and a compression bomb, are kept as dead letters
// (still compressed, with their codec) instead of being acknowledged into
// nothing.
func TestCompressedNotificationsAreCollected(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t, "nova")
	ob := openOutbox(t, t.TempDir(), 100000)
	c := newConsumer(t, newTestProcessor(t), ob, testOptions(v, &testkit.SyncBuffer{}, "nova"))
	r := startConsumer(t, c)
	testkit.WaitFor(t, 15*time.Second, "ready", func() bool { return r.Ready() == nil })

	want := map[string]bool{}
	for _, codec := range []string{"gzip", "bzip2", "lzma"} {
		for _, id := range v.osloNotifyCompressed(t, "nova", codec, 20, "compute.instance.create.end__ceilometer__1.json") {
			want[id] = true
		}
	}
	if len(want) != 60 {
		t.Fatalf("published %d distinct ids, want 60", len(want))
	}

	// A lying header and a bomb, published by hand with kombu's header.
	var bomb bytes.Buffer
	{
		cmd := exec.Command("/usr/bin/python3", "-c",
			`import sys, zlib; sys.stdout.buffer.write(zlib.compress(b"{" + b" " * (32 << 20) + b"}", 9))`)
		cmd.Stdout = &bomb
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
	}
	ch := v.Channel(t)
	for _, b := range [][]byte{[]byte("plainly not compressed"), bomb.Bytes()} {
		if err := ch.PublishWithContext(context.Background(), "nova", "notifications.info", false, false, amqp.Publishing{
			ContentType: "application/json", Headers: amqp.Table{"compression": pipeline.CodecGzip}, Body: b,
		}); err != nil {
			t.Fatal(err)
		}
	}

	testkit.WaitFor(t, 30*time.Second, "all acknowledged", func() bool {
		return testutil.ToFloat64(c.m.acked) == float64(len(want)+2)
	})
	ids := outboxIDs(t, ob)
	for id := range want {
		if ids[id] != 1 {
			t.Errorf("event %s in the outbox %d times, want 1", id, ids[id])
		}
	}
	dl, err := ob.ListDeadLetters(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]bool{}
	for _, d := range dl {
		reasons[d.Reason] = true
		if d.Compression != pipeline.CodecGzip || d.Exchange != "nova" || len(d.Body) == 0 {
			t.Errorf("dead letter %+v", d.DeadLetter)
		}
	}
	if len(dl) != 2 || !reasons[pipeline.ReasonBadCompression] || !reasons[pipeline.ReasonDecompressedTooLarge] {
		t.Errorf("dead letters: %d, reasons %v", len(dl), reasons)
	}
}
