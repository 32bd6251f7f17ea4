package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// gatedWriter blocks every write until it is opened: a terminal nobody reads.
type gatedWriter struct {
	open chan struct{}
	testkit.SyncBuffer
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	<-g.open
	return g.SyncBuffer.Write(p)
}

// channelDaemon runs a channel server on sock over a pipeline without
// modules (every message is skipped, unclaimed) and an outbox of its own,
// until the test ends.
func channelDaemon(t *testing.T, sock string, hub channel.HubOptions) *channel.Server {
	t.Helper()
	box := openOutbox(t, t.TempDir())
	p, err := pipeline.New(pipeline.Options{Router: pipeline.Chain{}, Logger: zerolog.Nop(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := channel.New(channel.Options{Socket: sock, SocketMode: 0o600, Processor: p, Outbox: box,
		Registerer: prometheus.NewRegistry(), Logger: zerolog.Nop(), Hub: hub})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; box.Close() })
	return srv
}

// publish, started before the daemon, says on stderr that it waits for it
// (with why the last attempt failed), then finishes once the daemon answers.
func TestPublishSaysItWaitsForTheDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "channel.sock")
	var stdout, stderr testkit.SyncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Run([]string{"publish", "--channel", sock, "--type", "STRING", "usage"}, nil,
			strings.NewReader("one message\n"), &stdout, &stderr, Stamp{})
	}()
	want := "publish: waiting for the daemon at " + sock + " ("
	testkit.WaitUntil(t, 30*time.Second, "the waiting line", func() (bool, string) {
		return strings.Contains(stderr.String(), want), stderr.String()
	})
	if !strings.Contains(stderr.String(), "no such file or directory") {
		t.Fatalf("stderr %q does not say why", stderr.String())
	}
	channelDaemon(t, sock, channel.HubOptions{})
	select {
	case c := <-code:
		// No module claims the tag: the daemon answers skipped, which
		// publish reports and exits 1 for.
		if c != 1 || !strings.Contains(stderr.String(), "publish: stdin:1: skipped unclaimed") ||
			!strings.Contains(stderr.String(), "publish: 1 messages, 0 committed") {
			t.Fatalf("exit %d, stderr %q", c, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("publish did not return; stderr %q", stderr.String())
	}
	if n := strings.Count(stderr.String(), "waiting for the daemon"); n != 1 {
		t.Fatalf("the waiting line %d times", n)
	}
}

// tap, when it does not keep up (its output blocked), says on stderr how
// many events it missed, and goes on.
func TestTapSaysWhatItMissed(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "channel.sock")
	srv := channelDaemon(t, sock, channel.HubOptions{SubscriberQueueBytes: 16 << 10})
	stdout := &gatedWriter{open: make(chan struct{})}
	var stderr testkit.SyncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Run([]string{"tap", "--channel", sock, `^license\.`}, nil, nil, stdout, &stderr, Stamp{})
	}()
	testkit.WaitFor(t, 30*time.Second, "the tap's subscription", srv.Tap().Active)
	ev := []byte(fmt.Sprintf(`{"event_type":"license.checkout","pad":%q}`, strings.Repeat("x", 1000)))
	rec := func() channel.Record {
		return channel.Record{Origin: channel.OriginChannel, Exchange: "channel", RoutingKey: "license.checkout",
			EventType: "license.checkout", Events: [][]byte{ev},
			UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Perm: 0o444}
	}
	// 4 MiB of events against an output that takes nothing: more than the
	// client's delivery queue (1 MiB) and the daemon's queue for it (16 KiB)
	// hold, so some are missed.
	for range 80 {
		batch := make([]channel.Record, 50)
		for i := range batch {
			batch[i] = rec()
		}
		srv.Tap().Offer(batch)
	}
	close(stdout.open)
	testkit.WaitUntil(t, 30*time.Second, "the missed line", func() (bool, string) {
		if strings.Contains(stderr.String(), "events missed: the tap did not keep up") {
			return true, ""
		}
		srv.Tap().Offer([]channel.Record{rec()}) // the next delivery carries the count
		return false, stderr.String()
	})
	if !strings.HasPrefix(stderr.String(), "tap: ") {
		t.Fatalf("stderr %q", stderr.String())
	}
	// The tap goes on: events offered now still reach its output.
	before := strings.Count(stdout.String(), "\n")
	testkit.WaitFor(t, 30*time.Second, "more events on the output", func() bool {
		srv.Tap().Offer([]channel.Record{rec()})
		return strings.Count(stdout.String(), "\n") > before
	})
	// tap runs until interrupted, as at a terminal.
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("tap did not stop on SIGINT")
	}
}

// failingWriter refuses every write, as a full disk or a closed file would.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// tap whose output cannot be written ends, exit 1, naming the error: it does
// not go on taking events it cannot show.
func TestTapEndsWhenItsOutputFails(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "channel.sock")
	srv := channelDaemon(t, sock, channel.HubOptions{})
	var stderr testkit.SyncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Run([]string{"tap", "--channel", sock, `^license\.`}, nil, nil, failingWriter{}, &stderr, Stamp{})
	}()
	testkit.WaitFor(t, 30*time.Second, "the tap's subscription", srv.Tap().Active)
	srv.Tap().Offer([]channel.Record{{Origin: channel.OriginChannel, Exchange: "channel", RoutingKey: "license.checkout",
		EventType: "license.checkout", Events: [][]byte{[]byte(`{"event_type":"license.checkout"}`)},
		UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Perm: 0o444}})
	select {
	case c := <-code:
		if c != 1 || !strings.Contains(stderr.String(), "tap: write: no space left on device") {
			t.Fatalf("exit %d, stderr %q", c, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("tap did not end; stderr %q", stderr.String())
	}
}
