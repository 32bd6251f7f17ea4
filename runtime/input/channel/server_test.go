package channel

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

// Messages published as JSON and as STRING are mapped by the built-in
// channel module, committed, and only then acknowledged as Committed.
func TestPublishCommitsThenAcknowledges(t *testing.T) {
	h := startHarness(t, Options{})
	var mu sync.Mutex
	settled := map[uint64]client.Settlement{}
	c := h.client(client.Options{OnSettled: func(s client.Settlement) {
		mu.Lock()
		settled[s.Seq] = s
		mu.Unlock()
	}})
	const n = 200
	for i := range n {
		if _, err := c.Publish(client.Message{Tag: "usage.license", Type: client.JSON, Data: usage(fmt.Sprintf("m-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	seqText, err := c.Publish(client.Message{Tag: "usage", Type: client.String,
		Data: []byte(`type=meter.read resource_type=meter resource_id=m1 project_id=p kwh=2.5`)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(settled) != n+1 {
		t.Fatalf("%d settled, want %d", len(settled), n+1)
	}
	for seq, s := range settled {
		if s.Status != wire.Committed {
			t.Fatalf("seq %d: %v %s", seq, s.Status, s.Reason)
		}
	}
	evs := h.events()
	if len(evs) != n+1 {
		t.Fatalf("outbox holds %d events, want %d", len(evs), n+1)
	}
	var text map[string]any
	ids := map[string]bool{}
	for _, ev := range evs {
		if ev["event_type"] == "meter.read" {
			text = ev
			continue
		}
		ids[ev["event_id"].(string)] = true
		src := ev["source"].(map[string]any)
		if src["exchange"] != "channel" || src["routing_key"] != "usage.license" || !strings.HasPrefix(src["mapper"].(string), "channel@") {
			t.Fatalf("source %v", src)
		}
	}
	if len(ids) != n {
		t.Fatalf("%d distinct ids, want %d", len(ids), n)
	}
	if text == nil || text["attributes"].(map[string]any)["kwh"] != 2.5 || text["event_id"] == "" || text["timestamp"] == "" {
		t.Fatalf("STRING message event %v (seq %d)", text, seqText)
	}
	if got := h.counter("committed_total"); got != n+1 {
		t.Fatalf("committed_total %v", got)
	}
	if got := h.counter("events_committed_total"); got != n+1 {
		t.Fatalf("events_committed_total %v", got)
	}
	st := c.Stats()
	if st.Acked != n+1 || st.Published != n+1 || st.QueuedBytes != 0 || st.State != client.StateConnected {
		t.Fatalf("stats %+v", st)
	}
}

// A tag no module claims is settled Skipped (nothing to commit); a module
// failure is settled DeadLettered once the dead letter is committed.
func TestSkippedAndDeadLettered(t *testing.T) {
	h := startHarness(t, Options{})
	var mu sync.Mutex
	var got []client.Settlement
	c := h.client(client.Options{OnSettled: func(s client.Settlement) { mu.Lock(); got = append(got, s); mu.Unlock() }})
	_, _ = c.Publish(client.Message{Tag: "nobody.claims.this", Type: client.JSON, Data: usage("x")})
	_, _ = c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: []byte(`42`)})
	ctx := testCtx(t)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(got, func(i, j int) bool { return got[i].Seq < got[j].Seq })
	if len(got) != 2 || got[0].Status != wire.Skipped || got[0].Reason != "unclaimed" ||
		got[1].Status != wire.DeadLettered || got[1].Reason != "guest_error" {
		t.Fatalf("settlements %+v", got)
	}
	if n := h.box.DeadLetterCount(); n != 1 {
		t.Fatalf("%d dead letters", n)
	}
	if st := c.Stats(); st.Skipped != 1 || st.Acked != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// rawConn speaks the protocol by hand, as a client in another language
// would.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	r  *wire.Reader
}

func dialRaw(t testing.TB, sock string, modes uint8) *rawConn {
	t.Helper()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := &rawConn{t: t, nc: nc, r: wire.NewReader(nc, 0)}
	rc.write(wire.AppendHello(nil, wire.Hello{Modes: modes, Name: "raw"}))
	if ft, _ := rc.read(); ft != wire.FrameWelcome {
		t.Fatalf("got %s, want WELCOME", ft)
	}
	return rc
}

func (rc *rawConn) write(b []byte) {
	rc.t.Helper()
	if _, err := rc.nc.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *rawConn) read() (wire.FrameType, []byte) {
	rc.t.Helper()
	_ = rc.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	ft, p, err := rc.r.Next()
	if err != nil {
		rc.t.Fatal(err)
	}
	return ft, append([]byte(nil), p...)
}

func (rc *rawConn) acks(n int) map[uint64]wire.AckEntry {
	rc.t.Helper()
	out := map[uint64]wire.AckEntry{}
	for len(out) < n {
		ft, p := rc.read()
		if ft != wire.FrameAck {
			continue
		}
		es, err := wire.ParseAck(p, nil)
		if err != nil {
			rc.t.Fatal(err)
		}
		for _, e := range es {
			out[e.Seq] = e
		}
	}
	return out
}

// Each malformed message is refused with its reason and counted; the
// connection goes on.
func TestRefusals(t *testing.T) {
	h := startHarness(t, Options{})
	rc := dialRaw(t, h.sock, wire.ModePublish)
	me := uint32(syscall.Getuid())
	pubs := []wire.Publish{
		{Seq: 1, Type: wire.JSON, Tag: []byte("usage"), Data: []byte(`{"broken`), UID: me},
		{Seq: 2, Type: 7, Tag: []byte("usage"), Data: []byte(`{}`), UID: me},
		{Seq: 3, Type: wire.JSON, Tag: []byte("has space"), Data: []byte(`{}`), UID: me},
		{Seq: 4, Type: wire.JSON, Tag: nil, Data: []byte(`{}`), UID: me},
		{Seq: 5, Type: wire.JSON, Tag: []byte("usage"), Data: usage("ok"), UID: me, Perm: 0o440},
	}
	var b []byte
	for i := range pubs {
		b = wire.AppendPublish(b, &pubs[i])
	}
	rc.write(b)
	got := rc.acks(len(pubs))
	want := map[uint64]string{1: dropInvalidJSON, 2: dropInvalidType, 3: dropInvalidTag, 4: dropInvalidTag}
	for seq, reason := range want {
		if got[seq].Status != wire.Refused || got[seq].Reason != reason {
			t.Errorf("seq %d: %+v, want refused %s", seq, got[seq], reason)
		}
	}
	if got[5].Status != wire.Committed {
		t.Errorf("seq 5: %+v", got[5])
	}
	if v := h.counter("dropped_total", "reason", dropInvalidTag); v != 2 {
		t.Errorf("dropped_total{invalid_tag} = %v", v)
	}
	if v := h.counter("dropped_total", "reason", dropInvalidJSON); v != 1 {
		t.Errorf("dropped_total{invalid_json} = %v", v)
	}
	// A subscription on a connection opened to publish only is refused.
	rc.write(wire.AppendSubscribe(nil, wire.Subscribe{ID: 1, Regex: ".*"}))
	for {
		ft, p := rc.read()
		if ft == wire.FrameSubStatus {
			if s, _ := wire.ParseSubStatus(p); s.OK {
				t.Fatal("subscription taken on a publish-only connection")
			}
			break
		}
	}
}

// A frame of another protocol version is answered with an Error frame, the
// connection is closed and the error counted.
func TestUnsupportedVersion(t *testing.T) {
	h := startHarness(t, Options{})
	nc, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	hello := wire.AppendHello(nil, wire.Hello{Modes: wire.ModePublish})
	hello[4] = 9
	if _, err := nc.Write(hello); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := wire.NewReader(nc, 0)
	ft, p, err := r.Next()
	if err != nil || ft != wire.FrameError {
		t.Fatalf("%s %v", ft, err)
	}
	text, _ := wire.ParseError(p)
	if !strings.Contains(text, "version 1") {
		t.Fatalf("error text %q", text)
	}
	if _, _, err := r.Next(); err == nil {
		t.Fatal("connection still open")
	}

	// A malformed frame after the handshake ends the connection the same
	// way, naming the frame.
	rc := dialRaw(t, h.sock, wire.ModeSubscribe)
	b := wire.AppendUnsubscribe(nil, 7)
	b = b[:len(b)-2] // half of the id
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	rc.write(b)
	text = readUntilClosed(t, rc.nc)
	if v := h.counter("protocol_errors_total"); v != 2 || !strings.Contains(text, "UNSUBSCRIBE") {
		t.Errorf("after a malformed frame: error %q, protocol_errors_total %v (want 2)", text, v)
	}
}

// A client that half-closes after publishing still gets every answer: the
// daemon ends the connection once all are written.
func TestHalfCloseGetsEveryAnswer(t *testing.T) {
	h := startHarness(t, Options{})
	rc := dialRaw(t, h.sock, wire.ModePublish)
	var b []byte
	for i := range 50 {
		p := wire.Publish{Seq: uint64(i + 1), Type: wire.JSON, Tag: []byte("usage"), Data: usage(fmt.Sprintf("h-%d", i)),
			UID: uint32(syscall.Getuid()), GID: uint32(syscall.Getgid()), Perm: 0o440}
		b = wire.AppendPublish(b, &p)
	}
	rc.write(b)
	if err := rc.nc.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got := rc.acks(50)
	for seq, a := range got {
		if a.Status != wire.Committed {
			t.Fatalf("seq %d: %+v", seq, a)
		}
	}
	_ = rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := rc.r.Next(); err == nil {
		t.Fatal("the daemon kept the connection open after the last answer")
	}
}

// A subscriber (in this process) gets the mapped events whose type matches,
// as JSON, with the publisher's credentials and bits; the raw form of a
// JSON message is its redacted body.
func TestTapSeesMappedAndRaw(t *testing.T) {
	h := startHarness(t, Options{})
	var mu sync.Mutex
	var mapped, raw []client.Delivery
	sub := h.client(client.Options{Mode: client.ModeSubscribe})
	ctx := testCtx(t)
	s1 := subscribe(t, ctx, sub, `^license\.`, false, func(d client.Delivery) { mu.Lock(); mapped = append(mapped, d); mu.Unlock() })
	s2 := subscribe(t, ctx, sub, `^usage`, true, func(d client.Delivery) { mu.Lock(); raw = append(raw, d); mu.Unlock() })
	pub := h.client(client.Options{})
	data := []byte(`{"id":"t-1","type":"license.checkout","resource_type":"license","resource_id":"r","project_id":"p",` +
		`"attributes":{"seats":2},"auth_token":"tap-secret-1"}`)
	if _, err := pub.Publish(client.Message{Tag: "usage.license", Type: client.JSON, Data: data, Perm: 0o444}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "deliveries", func() bool { mu.Lock(); defer mu.Unlock(); return len(mapped) == 1 && len(raw) == 1 })
	mu.Lock()
	defer mu.Unlock()
	m := mapped[0]
	var ev map[string]any
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev["event_id"] != "t-1" || m.Tag != "license.checkout" || m.Raw ||
		m.Origin != OriginChannel || m.Perm != 0o444 || m.UID != uint32(syscall.Getuid()) {
		t.Fatalf("mapped delivery %+v %s", m, m.Data)
	}
	r := raw[0]
	if !r.Raw || r.Tag != "usage.license" || r.Perm != 0o400 || strings.Contains(string(r.Data), "tap-secret-1") ||
		!strings.Contains(string(r.Data), `"[redacted]"`) || !strings.Contains(string(r.Data), `"routing_key":"usage.license"`) {
		t.Fatalf("raw delivery %+v %s", r, r.Data)
	}
	if got := h.counter("tap_delivered_total"); got != 2 {
		t.Fatalf("tap_delivered_total %v", got)
	}
	// Unsubscribed: nothing more arrives, and the hub goes idle.
	if err := s1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "hub idle", func() bool { return !h.srv.Tap().Active() })
}

// A client publishes before the daemon exists; the daemon comes, is stopped
// in the middle of the stream and started again (its outbox reopened, as a
// restart does). Every message the client saw acknowledged is in the outbox,
// and every message is acknowledged in the end.
func TestPublisherSurvivesDaemonRestart(t *testing.T) {
	h := newHarness(t, Options{})
	var mu sync.Mutex
	acked := map[uint64]bool{}
	c := h.client(client.Options{QueueLimitBytes: 64 << 10, OnSettled: func(s client.Settlement) {
		if s.Status != wire.Committed {
			t.Errorf("seq %d settled %v %s", s.Seq, s.Status, s.Reason)
		}
		mu.Lock()
		acked[s.Seq] = true
		mu.Unlock()
	}})
	const n = 3000
	ids := make(map[uint64]string, n)
	published := make(chan struct{})
	go func() {
		defer close(published)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for i := range n {
			id := fmt.Sprintf("r-%d", i)
			seq, err := c.PublishWait(ctx, client.Message{Tag: "usage", Type: client.JSON, Data: usage(id)})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ids[seq] = id
			mu.Unlock()
		}
	}()
	// Nothing is there: the queue fills to its bound and waits.
	testkit.WaitFor(t, 10*time.Second, "queue full", func() bool { return c.Stats().NoBufs > 0 })
	if st := c.Stats(); st.State == client.StateConnected || st.Acked != 0 {
		t.Fatalf("stats before the daemon %+v", st)
	}
	h.start()
	testkit.WaitFor(t, 20*time.Second, "first acknowledgements", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > 500 })
	h.stop()
	h.restartBox()
	mid := c.Stats()
	h.start()
	<-published
	ctx := testCtx(t)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Reconnects < 1 || st.Acked < n {
		t.Fatalf("stats %+v (at the restart %+v)", st, mid)
	}
	inBox := map[string]int{}
	for _, ev := range h.events() {
		inBox[ev["event_id"].(string)]++
	}
	mu.Lock()
	defer mu.Unlock()
	for seq := range acked {
		if inBox[ids[seq]] == 0 {
			t.Fatalf("seq %d (%s) acknowledged but not in the outbox", seq, ids[seq])
		}
	}
	if len(acked) != n {
		t.Fatalf("%d acknowledged, want %d", len(acked), n)
	}
	t.Logf("%d events in the outbox for %d messages (duplicates are resends of unanswered messages); %d resent", len(h.events()), n, st.Resent)
}

// At the bound Publish answers ErrNoBufs (and ENOBUFS) at once, queues
// nothing, and never blocks; room comes back as the daemon settles.
func TestQueueBound(t *testing.T) {
	h := newHarness(t, Options{})
	c := h.client(client.Options{QueueLimitBytes: 8 << 10})
	msg := client.Message{Tag: "usage", Type: client.JSON, Data: usage("b")}
	queued := 0
	for {
		_, err := c.Publish(msg)
		if err != nil {
			if !errors.Is(err, client.ErrNoBufs) || !errors.Is(err, syscall.ENOBUFS) {
				t.Fatalf("err %v", err)
			}
			break
		}
		queued++
	}
	// Every further call answers at once; the loop ends.
	for range 100000 {
		if _, err := c.Publish(msg); !errors.Is(err, client.ErrNoBufs) {
			t.Fatalf("err %v", err)
		}
	}
	st := c.Stats()
	if st.QueuedMessages != queued || st.QueuedBytes > 8<<10 || st.NoBufs != 100001 {
		t.Fatalf("stats %+v, %d queued", st, queued)
	}
	big := client.Message{Tag: "usage", Type: client.String, Data: make([]byte, 9<<10)}
	if _, err := c.Publish(big); !errors.Is(err, client.ErrTooLarge) {
		t.Fatalf("a message over the bound alone: %v", err)
	}
	h.start()
	ctx := testCtx(t)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(msg); err != nil {
		t.Fatalf("after the drain: %v", err)
	}
}

// Close with drain waits until the daemon settled everything (here: while
// the pipeline is held); Close with cancel abandons the queue at once.
func TestCloseDrainAndCancel(t *testing.T) {
	h := startHarness(t, Options{})
	c := h.client(client.Options{})
	h.proc.hold()
	for i := range 20 {
		if _, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage(fmt.Sprintf("d-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close(context.Background(), false) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned while the daemon held every message: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("late")}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("publish while closing: %v", err)
	}
	h.proc.release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Acked != 20 || st.Dropped != 0 || st.State != client.StateClosed {
		t.Fatalf("drained %+v", st)
	}
	if n := len(h.events()); n != 20 {
		t.Fatalf("%d events", n)
	}

	// Cancel: the daemon is gone; Close returns at once, the queue counts
	// as dropped.
	h.stop()
	c2 := h.client(client.Options{})
	for i := range 10 {
		if _, err := c2.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage(fmt.Sprintf("c-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c2.Close(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if st := c2.Stats(); st.Dropped != 10 || st.QueuedBytes != 0 || st.State != client.StateClosed {
		t.Fatalf("cancelled %+v", st)
	}
	// A drain bounded by a context that ends abandons the rest and says so.
	c3 := h.client(client.Options{})
	_, _ = c3.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("e")})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c3.Close(ctx, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("drain past its deadline: %v", err)
	}
	if st := c3.Stats(); st.Dropped != 1 {
		t.Fatalf("%+v", st)
	}
}

// A second server on the same registry is refused at New, naming a metric,
// and leaves its socket unbound.
func TestMetricsRegisteredOnce(t *testing.T) {
	h := startHarness(t, Options{})
	o := Options{Socket: h.sock + "2", Processor: h.proc, Outbox: h.box, Registerer: h.reg}
	if _, err := New(o); !errors.Is(err, imetrics.ErrDuplicate) || !strings.Contains(err.Error(), "tally_collector_channel_") {
		t.Fatalf("second server on one registry: %v", err)
	}
	if _, err := net.Dial("unix", h.sock+"2"); err == nil {
		t.Fatal("the refused server left its socket listening")
	}
}

// A subscriber follows the daemon across a restart: its subscriptions are
// sent again on the new connection, and what is committed after the restart
// reaches it.
func TestSubscriptionSurvivesRestart(t *testing.T) {
	h := startHarness(t, Options{})
	var mu sync.Mutex
	var got []string
	sub := h.client(client.Options{Mode: client.ModeBidir})
	ctx := testCtx(t)
	subscribe(t, ctx, sub, `^license\.`, false, func(d client.Delivery) {
		var ev map[string]any
		_ = json.Unmarshal(d.Data, &ev)
		mu.Lock()
		got = append(got, ev["event_id"].(string))
		mu.Unlock()
	})
	publish := func(id string) {
		t.Helper()
		if _, err := sub.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage(id)}); err != nil {
			t.Fatal(err)
		}
		if err := sub.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	publish("before")
	testkit.WaitFor(t, 10*time.Second, "the first event", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 })
	h.stop()
	testkit.WaitFor(t, 10*time.Second, "disconnected", func() bool { return sub.State() != client.StateConnected })
	h.start()
	testkit.WaitFor(t, 10*time.Second, "subscribed again", func() bool { return h.srv.Tap().Active() })
	publish("after")
	testkit.WaitFor(t, 10*time.Second, "the event after the restart", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if got[0] != "before" || got[1] != "after" || sub.Stats().Reconnects != 1 {
		t.Fatalf("events %v, stats %+v", got, sub.Stats())
	}
}
