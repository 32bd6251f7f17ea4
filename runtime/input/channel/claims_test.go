package channel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

// A message larger than the whole queue bound answers ENOBUFS, as the seed
// answers any message that would take the queue past its bound, and
// ErrTooLarge, not ErrNoBufs: waiting never makes room for it, so
// PublishWait returns it at once instead of waiting for ever.
func TestMessageLargerThanTheQueueAnswersENOBUFS(t *testing.T) {
	h := newHarness(t, Options{}) // never started: the bound is the client's
	c := h.client(client.Options{QueueLimitBytes: 8 << 10})
	big := client.Message{Tag: "usage", Type: client.String, Data: make([]byte, 9<<10)}
	_, err := c.Publish(big)
	if !errors.Is(err, syscall.ENOBUFS) || !errors.Is(err, client.ErrTooLarge) || errors.Is(err, client.ErrNoBufs) {
		t.Fatalf("err %v: want ENOBUFS and ErrTooLarge, not ErrNoBufs", err)
	}
	if _, err := c.PublishWait(context.Background(), big); !errors.Is(err, syscall.ENOBUFS) {
		t.Fatalf("PublishWait: %v", err)
	}
	if st := c.Stats(); st.NoBufs != 2 || st.QueuedMessages != 0 || st.QueuedBytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// serverOn builds (without running) a server on sock over h's pipeline and
// outbox.
func serverOn(h *harness, sock string) (*Server, error) {
	return New(Options{Socket: sock, SocketMode: 0o600, Processor: h.proc, Outbox: h.box,
		Registerer: prometheus.NewRegistry(), Logger: zerolog.Nop()})
}

// A second daemon refuses a socket another daemon serves, and the first one
// goes on serving; a socket file nobody answers on (a daemon that died) is
// taken over.
func TestSocketServedByAnotherDaemonIsRefused(t *testing.T) {
	h := startHarness(t, Options{})
	c := h.client(client.Options{})
	publishFlush(t, c, "before")
	if srv, err := serverOn(h, h.sock); !errors.Is(err, ErrSocketInUse) {
		if srv != nil {
			srv.Close(context.Background())
		}
		t.Fatalf("second daemon on a served socket: %v, want ErrSocketInUse", err)
	}
	publishFlush(t, c, "after")
	if n := len(h.events()); n != 2 {
		t.Fatalf("%d events, want 2", n)
	}

	// A stale socket file: bound, then closed without being removed.
	stale := filepath.Join(h.dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	srv, err := serverOn(h, stale)
	if err != nil {
		t.Fatalf("a stale socket file: %v", err)
	}
	srv.Close(context.Background())
}

// At most 256 connections in all (the default), whoever opens them: the
// 257th gets an Error frame and is closed, and is counted.
func TestConnectionTotalIsBounded(t *testing.T) {
	h := startHarness(t, Options{MaxConnectionsPerUID: 1000}) // one uid may take every place here
	for range defaultMaxConnections {
		dialRaw(t, h.sock, wire.ModeSubscribe)
	}
	if v := h.counter("connections"); v != defaultMaxConnections {
		t.Fatalf("connections %v", v)
	}
	nc := dialHello(t, h.sock, wire.ModeSubscribe)
	if text := readUntilClosed(t, nc); !strings.Contains(text, "too many connections") {
		t.Fatalf("connection 257: error %q", text)
	}
	if v := h.counter("refused_connections_total"); v != 1 {
		t.Fatalf("refused_connections_total %v", v)
	}
}

// Data over wire.MaxData, sent by a client that does not check it, is
// refused by the daemon as too_large and counted; the connection goes on.
func TestDaemonRefusesTooLarge(t *testing.T) {
	h := startHarness(t, Options{})
	rc := dialRaw(t, h.sock, wire.ModePublish)
	me := uint32(syscall.Getuid())
	pubs := []wire.Publish{
		{Seq: 1, Type: wire.String, Tag: []byte("usage"), Data: bytes.Repeat([]byte("x"), wire.MaxData+1), UID: me},
		{Seq: 2, Type: wire.JSON, Tag: []byte("usage"), Data: usage("after-large"), UID: me, Perm: 0o440},
	}
	var b []byte
	for i := range pubs {
		b = wire.AppendPublish(b, &pubs[i])
	}
	if len(b) > wire.MaxFrame+64 {
		t.Fatalf("frames of %d bytes", len(b))
	}
	rc.write(b)
	got := rc.acks(2)
	if got[1].Status != wire.Refused || got[1].Reason != dropTooLarge {
		t.Fatalf("seq 1: %+v, want refused too_large", got[1])
	}
	if got[2].Status != wire.Committed {
		t.Fatalf("seq 2: %+v", got[2])
	}
	if v := h.counter("dropped_total", "reason", dropTooLarge); v != 1 {
		t.Fatalf("dropped_total{too_large} = %v", v)
	}
}

// LastError says why the client is not connected (here: no socket yet), and
// is nil once it is.
func TestLastErrorSaysWhyNotConnected(t *testing.T) {
	h := newHarness(t, Options{})
	c := h.client(client.Options{})
	testkit.WaitFor(t, 10*time.Second, "a failed attempt", func() bool { return c.LastError() != nil })
	if err := c.LastError(); !errors.Is(err, fs.ErrNotExist) || c.State() == client.StateConnected {
		t.Fatalf("LastError %v, state %v", err, c.State())
	}
	h.start()
	testkit.WaitFor(t, 10*time.Second, "connected", func() bool { return c.State() == client.StateConnected })
	if err := c.LastError(); err != nil {
		t.Fatalf("LastError once connected: %v", err)
	}
}

// records is a slog handler that keeps what it is handed.
type records struct {
	mu   sync.Mutex
	recs []map[string]any
}

func (r *records) Write(p []byte) (int, error) {
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		return 0, err
	}
	r.mu.Lock()
	r.recs = append(r.recs, m)
	r.mu.Unlock()
	return len(p), nil
}

func (r *records) find(msg string) map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.recs {
		if m["msg"] == msg {
			return m
		}
	}
	return nil
}

// The logger handed in (the seed fetches one with ldms_msg_chan_log)
// receives the connection's events, with the socket.
func TestLoggerHandedInReceivesConnectionEvents(t *testing.T) {
	h := newHarness(t, Options{})
	var recs records
	log := slog.New(slog.NewJSONHandler(&recs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := h.client(client.Options{Logger: log})
	testkit.WaitFor(t, 10*time.Second, "a failed attempt logged", func() bool { return recs.find("channel connection failed") != nil })
	h.start()
	testkit.WaitFor(t, 10*time.Second, "the connection logged", func() bool { return recs.find("channel connected") != nil })
	if m := recs.find("channel connected"); m["socket"] != h.sock || m["level"] != "INFO" {
		t.Fatalf("record %v", m)
	}
	h.stop()
	testkit.WaitFor(t, 20*time.Second, "the disconnection logged", func() bool { return recs.find("channel disconnected") != nil })
	_ = c
}

// New may be called from a subscription's callback, as the seed allows
// ldms_msg_chan_new there: the new client connects and publishes while the
// callback that made it still runs.
func TestNewFromInsideCallback(t *testing.T) {
	h := startHarness(t, Options{})
	ctx := testCtx(t)
	type made struct {
		c   *client.Client
		err error
	}
	done := make(chan made, 1)
	var once sync.Once
	sub := h.client(client.Options{Mode: client.ModeSubscribe})
	subscribe(t, ctx, sub, `^license\.`, false, func(client.Delivery) {
		once.Do(func() {
			nc, err := client.New(client.Options{Socket: h.sock, ReconnectInterval: 50 * time.Millisecond, Name: "from-callback"})
			if err == nil {
				_, err = nc.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("made-in-callback")})
			}
			done <- made{nc, err}
		})
	})
	publishFlush(t, h.client(client.Options{}), "trigger")
	var m made
	select {
	case m = <-done:
	case <-ctx.Done():
		t.Fatal("the callback did not return")
	}
	if m.err != nil {
		t.Fatal(m.err)
	}
	defer m.c.Close(context.Background(), true)
	if err := m.c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, ev := range h.events() {
		ids[ev["event_id"].(string)] = true
	}
	if !ids["made-in-callback"] {
		t.Fatalf("events %v", ids)
	}
}

// The Python client answers the same: TooLarge, a NoBufs (an OSError with
// errno ENOBUFS) that publish_wait raises at once.
func TestPythonMessageLargerThanTheQueue(t *testing.T) {
	py := testkit.LookPath(t, "python3", "python3")
	script := `
import errno, sys, tally_channel as tc
c = tc.Client(sys.argv[1], queue_limit_bytes=8192, reconnect_interval=0.05)
for call in (c.publish, c.publish_wait):
    try:
        call("usage", b"x" * 9000)
        sys.exit("no error from %s" % call.__name__)
    except tc.TooLarge as e:
        assert isinstance(e, tc.NoBufs) and isinstance(e, OSError) and e.errno == errno.ENOBUFS, repr(e)
assert c.stats()["nobufs"] == 2, c.stats()
assert c.stats()["queued_messages"] == 0, c.stats()
c.close(cancel=True, timeout=5)
print("ok")
`
	cmd := exec.Command(py, "-c", script, filepath.Join(t.TempDir(), "no-daemon.sock"))
	cmd.Env = []string{"PYTHONPATH=" + testkit.RepoPath(t, "examples/channel/python"), "PATH=/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python: %v\n%s", err, out)
	}
}
