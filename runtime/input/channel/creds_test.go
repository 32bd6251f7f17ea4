package channel

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

const (
	userA = "tally-chan-a"
	userB = "tally-chan-b"
)

// A client run as a user who is not root, publishing as another user, has
// every message dropped (reason credentials, counted); the same user
// publishing as itself is taken. Root publishing as that user is taken.
func TestImpersonation(t *testing.T) {
	a := testUser(t, userA)
	b := testUser(t, userB)
	h := startHarness(t, Options{})

	// a as b: dropped.
	p := runAs(t, a, "publish", "CHANNEL_SOCKET="+h.sock, "CHANNEL_TAG=usage", "CHANNEL_COUNT=5",
		"CHANNEL_PERM=0440", "CHANNEL_ID_PREFIX=imp",
		"CHANNEL_AS_UID="+strconv.Itoa(int(b.UID)), "CHANNEL_AS_GID="+strconv.Itoa(int(b.GID)))
	for range 5 {
		s := p.next(t, "settled")
		if s["status"] != "refused" || s["reason"] != dropCredentials {
			t.Fatalf("impersonation settled %v", s)
		}
	}
	p.next(t, "done")
	if got := h.counter("dropped_total", "reason", dropCredentials); got != 5 {
		t.Fatalf("dropped_total{credentials} = %v", got)
	}
	// a as a's uid with another group it is not a member of: dropped too.
	p = runAs(t, a, "publish", "CHANNEL_SOCKET="+h.sock, "CHANNEL_TAG=usage", "CHANNEL_COUNT=1",
		"CHANNEL_PERM=0440", "CHANNEL_ID_PREFIX=imp-g",
		"CHANNEL_AS_UID="+strconv.Itoa(int(a.UID)), "CHANNEL_AS_GID="+strconv.Itoa(int(b.GID)))
	if s := p.next(t, "settled"); s["status"] != "refused" || s["reason"] != dropCredentials {
		t.Fatalf("foreign group settled %v", s)
	}
	// a as itself: taken.
	p = runAs(t, a, "publish", "CHANNEL_SOCKET="+h.sock, "CHANNEL_TAG=usage", "CHANNEL_COUNT=3",
		"CHANNEL_PERM=0440", "CHANNEL_ID_PREFIX=own")
	for range 3 {
		if s := p.next(t, "settled"); s["status"] != "committed" {
			t.Fatalf("own credentials settled %v", s)
		}
	}
	// Root as b: taken, and the events carry b's credentials on the tap.
	var mu sync.Mutex
	var seen []client.Delivery
	sub := h.client(client.Options{Mode: client.ModeSubscribe})
	ctx := testCtx(t)
	subscribe(t, ctx, sub, ".*", false, func(d client.Delivery) { mu.Lock(); seen = append(seen, d); mu.Unlock() })
	var settled []client.Settlement
	root := h.client(client.Options{OnSettled: func(s client.Settlement) { mu.Lock(); settled = append(settled, s); mu.Unlock() }})
	if _, err := root.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("root-as-b"), Cred: &b}); err != nil {
		t.Fatal(err)
	}
	if err := root.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "tap delivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(settled) != 1 || settled[0].Status != wire.Committed {
		t.Fatalf("root as b settled %+v", settled)
	}
	if seen[0].UID != b.UID || seen[0].GID != b.GID {
		t.Fatalf("event credentials %d:%d, want %d:%d", seen[0].UID, seen[0].GID, b.UID, b.GID)
	}
	if got := h.counter("dropped_total", "reason", dropCredentials); got != 6 {
		t.Fatalf("dropped_total{credentials} = %v", got)
	}
}

// Two users tap; messages are published as a (by root, who may) with 0400
// and with 0444. a sees both, b only the 0444 one; the events b does not
// see are counted as permission drops. Raw taps: only the owner sees the
// raw form, whatever the bits.
func TestPermissionsAcrossUsers(t *testing.T) {
	a := testUser(t, userA)
	b := testUser(t, userB)
	h := startHarness(t, Options{})

	tapA := runAs(t, a, "tap", "CHANNEL_SOCKET="+h.sock, "CHANNEL_REGEX=^license\\.")
	tapB := runAs(t, b, "tap", "CHANNEL_SOCKET="+h.sock, "CHANNEL_REGEX=^license\\.")
	rawA := runAs(t, a, "tap", "CHANNEL_SOCKET="+h.sock, "CHANNEL_REGEX=^usage", "CHANNEL_RAW=1")
	rawB := runAs(t, b, "tap", "CHANNEL_SOCKET="+h.sock, "CHANNEL_REGEX=^usage", "CHANNEL_RAW=1")
	for _, p := range []*helperProc{tapA, tapB, rawA, rawB} {
		p.next(t, "subscribed")
	}

	pub := h.client(client.Options{})
	for i, perm := range []uint32{0o400, 0o444, 0o440} {
		if _, err := pub.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage(fmt.Sprintf("perm-%o", perm)),
			Perm: perm, Cred: &a}); err != nil {
			t.Fatal(i, err)
		}
	}
	ctx := testCtx(t)
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	ids := func(p *helperProc, n int) map[string]bool {
		out := map[string]bool{}
		for range n {
			d := p.next(t, "delivery")
			data := d["data"].(map[string]any)
			id, _ := data["event_id"].(string)
			if id == "" {
				id, _ = data["id"].(string) // a raw message
			}
			out[id] = true
		}
		return out
	}
	if got := ids(tapA, 3); !got["perm-400"] || !got["perm-444"] || !got["perm-440"] {
		t.Fatalf("a saw %v", got)
	}
	if got := ids(tapB, 1); !got["perm-444"] {
		t.Fatalf("b saw %v", got)
	}
	if got := ids(rawA, 3); len(got) != 3 {
		t.Fatalf("a raw saw %v", got)
	}
	// Everything b may see has arrived before the next marker message: a
	// message only b's credentials pass. Nothing else may come before it.
	if _, err := pub.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("marker"), Perm: 0o444, Cred: &b}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ids(tapB, 1); !got["marker"] {
		t.Fatalf("b's next event was %v, want only the marker", got)
	}
	if got := ids(rawB, 1); !got["marker"] {
		t.Fatalf("b's next raw message was %v, want only the marker", got)
	}
	// b missed two mapped events and three raw ones; a missed the marker's
	// raw form (owned by b). The marker's event is 0444: a saw it.
	if got := h.counter("tap_dropped_total", "reason", dropPermission); got != 6 {
		t.Fatalf("tap_dropped_total{permission} = %v", got)
	}
}

// A subscriber that stops reading: what waits for it stays under the bound,
// what it misses is dropped and counted for it alone, and the publisher is
// not slowed: every message is committed, and a subscriber that reads sees
// them all.
func TestSlowSubscriberIsBounded(t *testing.T) {
	// The bound is the default: room for a burst of a whole commit (512 KiB
	// of events at most) for a subscriber that reads.
	const bound = defaultSubscriberQueueBytes
	h := startHarness(t, Options{})

	// The slow one: subscribes by hand and never reads again.
	slow := dialRaw(t, h.sock, wire.ModeSubscribe)
	slow.write(wire.AppendSubscribe(nil, wire.Subscribe{ID: 1, Regex: ".*"}))
	if ft, _ := slow.read(); ft != wire.FrameSubStatus {
		t.Fatalf("got %s", ft)
	}
	var mu sync.Mutex
	got := 0
	var lastDropped uint64
	fast := h.client(client.Options{Mode: client.ModeSubscribe})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	subscribe(t, ctx, fast, ".*", false, func(d client.Delivery) {
		mu.Lock()
		got++
		lastDropped = d.Dropped
		mu.Unlock()
	})

	const n, round = 10000, 100
	pub := h.client(client.Options{})
	// In rounds that the reading subscriber takes in well under its bound
	// (it is paced by the publisher here, not by the hub).
	for i := range n {
		if _, err := pub.PublishWait(ctx, client.Message{Tag: "usage", Type: client.JSON, Data: usage(fmt.Sprintf("s-%d", i)), Perm: 0o444}); err != nil {
			t.Fatal(err)
		}
		if (i+1)%round == 0 {
			if err := pub.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 60*time.Second, "the reading subscriber keeps up", func() bool { mu.Lock(); defer mu.Unlock(); return got == i+1 })
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := pub.Stats(); st.Acked != n {
		t.Fatalf("publisher %+v", st)
	}
	testkit.WaitFor(t, 30*time.Second, "the reading subscriber gets everything", func() bool { mu.Lock(); defer mu.Unlock(); return got == n })
	mu.Lock()
	if lastDropped != 0 {
		t.Fatalf("the reading subscriber was told it missed %d", lastDropped)
	}
	mu.Unlock()

	var slowConn *conn
	h.srv.connMu.Lock()
	for c := range h.srv.conns {
		if c.sub.subs.Load() != nil && c.cred.pid > 0 && c.q.droppedCount() > 0 {
			slowConn = c
		}
	}
	h.srv.connMu.Unlock()
	if slowConn == nil {
		t.Fatal("no connection counted a drop")
	}
	slowConn.q.mu.Lock()
	held := len(slowConn.q.dels)
	slowConn.q.mu.Unlock()
	dropped := slowConn.q.droppedCount()
	if held > bound {
		t.Fatalf("%d bytes held for the slow subscriber, bound %d", held, bound)
	}
	if counted := h.counter("tap_dropped_total", "reason", dropSlowSubscriber); counted != float64(dropped) || dropped == 0 {
		t.Fatalf("tap_dropped_total{slow_subscriber} = %v, the connection counted %d", counted, dropped)
	}
	t.Logf("slow subscriber: %d bytes held, %d of %d dropped", held, dropped, n)

	// The slow subscriber, reading at last, is told with the next message
	// how many it missed.
	found := make(chan uint64, 1)
	go func() {
		var dl wire.Deliver
		for {
			_ = slow.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			ft, p, err := slow.r.Next()
			if err != nil {
				close(found)
				return
			}
			if ft == wire.FrameDeliver && wire.ParseDeliver(p, &dl) == nil && dl.Dropped > 0 {
				found <- dl.Dropped
				return
			}
		}
	}()
	if _, err := pub.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("after"), Perm: 0o444}); err != nil {
		t.Fatal(err)
	}
	if told, ok := <-found; !ok || told != dropped {
		t.Fatalf("the slow subscriber was told it missed %d, want %d", told, dropped)
	}
}

// droppedCount is how many deliveries this connection missed.
func (q *outQueue) droppedCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}
