package channel

// The socket under abuse: what one local user can hold, take or stall, each
// tried against the real server over a real socket.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

// dialHello connects and sends HELLO without waiting for the answer. A
// daemon that refuses the connection may have closed it before HELLO is
// written: the write's error is left to the reads that follow (what the
// daemon sent before it closed is still there to read).
func dialHello(t testing.TB, sock string, modes uint8) net.Conn {
	t.Helper()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_, _ = nc.Write(wire.AppendHello(nil, wire.Hello{Modes: modes, Name: "abuse"}))
	return nc
}

// readUntilClosed reads frames until the daemon closes the connection and
// returns the text of the Error frame it sent first, if any. It fails the
// test when the connection is still open after 20 s (the daemon never
// closed it).
func readUntilClosed(t testing.TB, nc net.Conn) string {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := wire.NewReader(nc, 0)
	text := ""
	for {
		ft, p, err := r.Next()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the daemon kept the connection open")
			}
			return text
		}
		if ft == wire.FrameError {
			text, _ = wire.ParseError(p)
		}
	}
}

// unsentBytes is what the kernel still holds of what was written on nc and
// not yet read by the peer (SIOCOUTQ).
func unsentBytes(t testing.TB, nc net.Conn) int {
	t.Helper()
	raw, err := nc.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var ierr error
	if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatal(ierr)
	}
	return n
}

// Close called from inside a subscription callback, or from OnSettled,
// returns (with either cancel value) instead of waiting for the callback
// that called it.
func TestCloseFromInsideCallback(t *testing.T) {
	h := startHarness(t, Options{})
	for _, cancel := range []bool{false, true} {
		t.Run(fmt.Sprintf("delivery/cancel=%v", cancel), func(t *testing.T) {
			closed := make(chan error, 1)
			var once sync.Once
			c := h.client(client.Options{Mode: client.ModeBidir})
			ctx := testCtx(t)
			subscribe(t, ctx, c, `^license\.`, false, func(client.Delivery) {
				once.Do(func() { closed <- c.Close(ctx, cancel) })
			})
			if _, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("cb-close")}); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close from the callback: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Close called from a subscription callback did not return: deadlock")
			}
			if st := c.Stats(); st.State != client.StateClosed {
				t.Fatalf("state %v", st.State)
			}
		})
		t.Run(fmt.Sprintf("settled/cancel=%v", cancel), func(t *testing.T) {
			closed := make(chan error, 1)
			var once sync.Once
			var c *client.Client
			ctx := testCtx(t)
			c = h.client(client.Options{OnSettled: func(client.Settlement) {
				once.Do(func() { closed <- c.Close(ctx, cancel) })
			}})
			for i := range 3 {
				if _, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage(fmt.Sprintf("st-close-%d", i))}); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close from OnSettled: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Close called from OnSettled did not return: deadlock")
			}
			if st := c.Stats(); st.State != client.StateClosed || (!cancel && st.Acked != 3) {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// One uid may hold at most MaxConnectionsPerUID connections; the next is
// refused with an Error frame naming the bound, while another user still
// gets in, and a slot given back is taken again.
func TestConnectionsPerUIDBounded(t *testing.T) {
	other := testUser(t, "tally-chan-a")
	h := startHarness(t, Options{MaxConnectionsPerUID: 3})
	var held []*rawConn
	for range 3 {
		held = append(held, dialRaw(t, h.sock, wire.ModeSubscribe))
	}
	nc := dialHello(t, h.sock, wire.ModeSubscribe)
	text := readUntilClosed(t, nc)
	if !strings.Contains(text, "too many connections") || !strings.Contains(text, fmt.Sprintf("uid %d", syscall.Getuid())) {
		t.Fatalf("fourth connection of one uid: error %q", text)
	}
	if v := h.counter("refused_connections_total"); v != 1 {
		t.Fatalf("refused_connections_total %v", v)
	}
	// Another user is not held back by this one's connections.
	p := runAs(t, other, "publish", "CHANNEL_SOCKET="+h.sock, "CHANNEL_COUNT=2", "CHANNEL_TAG=usage",
		"CHANNEL_PERM=0440", "CHANNEL_ID_PREFIX=peruid")
	for range 2 {
		if s := p.next(t, "settled"); s["status"] != "committed" {
			t.Fatalf("the other user's message: %v", s)
		}
	}
	p.next(t, "done")
	// A slot given back is free again.
	held[0].nc.Close()
	testkit.WaitFor(t, 10*time.Second, "the slot given back", func() bool { return h.counter("connections") == 2 })
	dialRaw(t, h.sock, wire.ModeSubscribe)
}

// At most MaxSubscriptions per connection: the next is refused with its
// reason and counted; replacing an id in use, or subscribing after an
// unsubscription, is taken.
func TestSubscriptionLimit(t *testing.T) {
	h := startHarness(t, Options{Hub: HubOptions{MaxSubscriptions: 4}})
	rc := dialRaw(t, h.sock, wire.ModeSubscribe)
	status := func(id uint32) wire.SubStatus {
		t.Helper()
		for {
			ft, p := rc.read()
			if ft != wire.FrameSubStatus {
				continue
			}
			s, err := wire.ParseSubStatus(p)
			if err != nil {
				t.Fatal(err)
			}
			if s.ID == id {
				return s
			}
		}
	}
	for id := uint32(1); id <= 4; id++ {
		rc.write(wire.AppendSubscribe(nil, wire.Subscribe{ID: id, Regex: fmt.Sprintf("^t%d$", id)}))
		if s := status(id); !s.OK {
			t.Fatalf("subscription %d refused: %s", id, s.Text)
		}
	}
	rc.write(wire.AppendSubscribe(nil, wire.Subscribe{ID: 5, Regex: "^t5$"}))
	if s := status(5); s.OK || !strings.Contains(s.Text, "too many subscriptions") {
		t.Fatalf("fifth subscription: %+v", s)
	}
	if v := h.counter("refused_subscriptions_total"); v != 1 {
		t.Fatalf("refused_subscriptions_total %v", v)
	}
	rc.write(wire.AppendSubscribe(nil, wire.Subscribe{ID: 2, Regex: "^other$"}))
	if s := status(2); !s.OK {
		t.Fatalf("replacing subscription 2: %s", s.Text)
	}
	rc.write(wire.AppendUnsubscribe(nil, 3))
	rc.write(wire.AppendSubscribe(nil, wire.Subscribe{ID: 6, Regex: "^t6$"}))
	if s := status(6); !s.OK {
		t.Fatalf("after an unsubscription: %s", s.Text)
	}
	if v := h.counter("tap_subscriptions"); v != 4 {
		t.Fatalf("tap_subscriptions %v", v)
	}
}

// A connection that does not complete its HELLO within HelloTimeout is
// closed and its slot given back: silent, or with a HELLO cut short.
func TestHelloTimeout(t *testing.T) {
	h := startHarness(t, Options{HelloTimeout: time.Second})
	silent, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	cut, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	if _, err := cut.Write(wire.AppendHello(nil, wire.Hello{Modes: wire.ModePublish, Name: "slow"})[:7]); err != nil {
		t.Fatal(err)
	}
	readUntilClosed(t, silent)
	readUntilClosed(t, cut)
	testkit.WaitFor(t, 10*time.Second, "slots given back", func() bool { return h.counter("connections") == 0 })
	// A client that says HELLO in time is served.
	dialRaw(t, h.sock, wire.ModePublish)
}

// Once the handshake is done, a frame must arrive within IdleTimeout: a
// silent connection, and one that stops in the middle of a frame, are
// answered an Error frame and closed.
func TestIdleReadDeadline(t *testing.T) {
	h := startHarness(t, Options{IdleTimeout: 300 * time.Millisecond})
	silent := dialRaw(t, h.sock, wire.ModeSubscribe)
	stalled := dialRaw(t, h.sock, wire.ModePublish)
	hdr := binary.BigEndian.AppendUint32(nil, 1000)
	stalled.write(append(hdr, wire.Version, byte(wire.FramePublish), 1, 2, 3))
	for name, nc := range map[string]net.Conn{"silent": silent.nc, "mid-frame": stalled.nc} {
		if text := readUntilClosed(t, nc); !strings.Contains(text, "idle") {
			t.Fatalf("%s connection: error %q", name, text)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "slots given back", func() bool { return h.counter("connections") == 0 })
	if v := h.counter("idle_timeouts_total"); v != 2 {
		t.Fatalf("idle_timeouts_total %v", v)
	}
}

// With the pipeline held, the daemon reads no more than its byte budget
// (QueueBytes, plus the message that crosses it) across connections; the
// rest waits in the clients' bounded queues, which answer ErrNoBufs; once
// released, everything is committed.
func TestByteBudget(t *testing.T) {
	const budget = 16 << 10
	h := startHarness(t, Options{QueueBytes: budget})
	h.proc.hold()
	released := false
	defer func() {
		if !released {
			h.proc.release()
		}
	}()
	pad := strings.Repeat("x", 2<<10)
	msg := func(id string) []byte {
		return []byte(fmt.Sprintf(`{"id":%q,"type":"license.checkout","resource_type":"license","resource_id":"r","project_id":"p","attributes":{"pad":%q}}`, id, pad))
	}
	var clients []*client.Client
	for range 2 {
		clients = append(clients, h.client(client.Options{QueueLimitBytes: 128 << 10}))
	}
	published := 0
	for i, c := range clients {
		for j := 0; ; j++ {
			_, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: msg(fmt.Sprintf("b-%d-%d", i, j))})
			if errors.Is(err, client.ErrNoBufs) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			published++
		}
	}
	// Everything is either in the daemon (within its budget), in the
	// sockets, or still queued in the clients.
	maxItem := float64(len(msg("b-0-000")) + 512 + 256)
	testkit.WaitFor(t, 10*time.Second, "the budget reached", func() bool {
		return h.counter("queued_bytes") > budget-2*maxItem
	})
	if v := h.counter("queued_bytes"); v > budget+maxItem {
		t.Fatalf("queued_bytes %v past the budget %d", v, budget)
	}
	received := h.counter("received_total")
	if received >= float64(published) {
		t.Fatalf("the daemon read all %d messages while its budget was spent", published)
	}
	t.Logf("budget %d B: %v messages read of %d published while the pipeline was held", budget, received, published)
	h.proc.release()
	released = true
	ctx := testCtx(t)
	for _, c := range clients {
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Each message is committed (a mapper call that overran its deadline on
	// a loaded machine is dead-lettered instead).
	if n := int64(len(h.events())) + h.box.DeadLetterCount(); n != int64(published) {
		t.Fatalf("%d events and dead letters, want %d", n, published)
	}
}

// A frame that announces the largest size and delivers a few bytes does not
// make the daemon allocate the announced size: the buffer grows with what
// arrives.
func TestAnnouncedFrameDoesNotAllocate(t *testing.T) {
	const conns = 32
	h := startHarness(t, Options{MaxConnectionsPerUID: conns, IdleTimeout: time.Hour})
	var ncs []net.Conn
	for range conns {
		ncs = append(ncs, dialRaw(t, h.sock, wire.ModePublish).nc)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	hdr := binary.BigEndian.AppendUint32(nil, wire.MaxFrame)
	hdr = append(hdr, wire.Version, byte(wire.FramePublish), 0, 0, 0, 0, 0, 0, 0, 1)
	drained := func(what string) {
		for _, nc := range ncs {
			testkit.WaitFor(t, 10*time.Second, what, func() bool { return unsentBytes(t, nc) == 0 })
		}
	}
	for _, nc := range ncs {
		if _, err := nc.Write(hdr); err != nil {
			t.Fatal(err)
		}
	}
	drained("the headers read")
	// One more byte each: the daemon reads it only once it has sized the
	// frame's buffer and waits for the rest.
	for _, nc := range ncs {
		if _, err := nc.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
	}
	drained("the next byte read")
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	runtime.GC()
	var held runtime.MemStats
	runtime.ReadMemStats(&held)
	t.Logf("%d connections announcing %d-byte frames with 11 bytes sent: %d KiB allocated (%d KiB each), heap %+d KiB",
		conns, wire.MaxFrame, allocated>>10, allocated/conns>>10, (int64(held.HeapAlloc)-int64(before.HeapAlloc))>>10)
	if allocated > conns*wire.MaxFrame/8 {
		t.Fatalf("%d bytes allocated for %d connections that sent 11 bytes of a frame each", allocated, conns)
	}
	for _, nc := range ncs {
		nc.Close()
	}
}

// The Go client keeps an idle connection open with PING frames (a quarter
// of the idle timeout WELCOME announces): a tap that receives nothing for
// many idle timeouts is never cut off.
func TestClientKeepsIdleConnectionOpen(t *testing.T) {
	h := startHarness(t, Options{IdleTimeout: 4 * time.Second})
	c := h.client(client.Options{Mode: client.ModeBidir})
	ctx := testCtx(t)
	subscribe(t, ctx, c, `^nothing$`, false, func(client.Delivery) {})
	testkit.WaitFor(t, 60*time.Second, "eight pings (two idle timeouts)", func() bool { return c.Stats().Pings >= 8 })
	if st := c.Stats(); st.Reconnects != 0 || st.State != client.StateConnected || h.counter("idle_timeouts_total") != 0 {
		t.Fatalf("stats %+v, idle_timeouts_total %v", st, h.counter("idle_timeouts_total"))
	}
	if _, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("after-idle")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Acked != 1 || st.Reconnects != 0 {
		t.Fatalf("stats %+v", st)
	}
}
