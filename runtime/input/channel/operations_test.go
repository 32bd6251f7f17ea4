package channel

// Every client operation of the message channel, against the real server
// over a real socket.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/client"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/channel/wire"
)

// eventID is the event_id of a delivered event.
func eventID(t *testing.T, d client.Delivery) string {
	t.Helper()
	v, err := d.Value()
	if err != nil {
		t.Fatal(err)
	}
	ev, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("delivery %s is not an object", d.Data)
	}
	id, _ := ev["event_id"].(string)
	return id
}

// collector gathers the event ids a callback receives.
type collector struct {
	mu  sync.Mutex
	ids []string
}

func (c *collector) add(id string) { c.mu.Lock(); c.ids = append(c.ids, id); c.mu.Unlock() }
func (c *collector) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ids...)
}

func publishFlush(t *testing.T, c *client.Client, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// Unsubscribing is answered: Subscription.Close returns once the daemon
// removed the subscription, and nothing reaches it afterwards; the daemon
// answers an unknown id as not subscribed.
func TestUnsubscribeIsAnswered(t *testing.T) {
	h := startHarness(t, Options{})
	ctx := testCtx(t)
	c := h.client(client.Options{Mode: client.ModeBidir})
	var gone, kept collector
	s1 := subscribe(t, ctx, c, `^license\.`, false, func(d client.Delivery) { gone.add(eventID(t, d)) })
	s2 := subscribe(t, ctx, c, `^license\.`, false, func(d client.Delivery) { kept.add(eventID(t, d)) })
	publishFlush(t, c, "u-1")
	testkit.WaitFor(t, 10*time.Second, "both subscriptions served", func() bool { return len(gone.list()) == 1 && len(kept.list()) == 1 })
	if err := s1.Close(ctx); err != nil {
		t.Fatalf("unsubscribe: %v", err)
	}
	if err := s1.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if v := h.counter("tap_subscriptions"); v != 1 {
		t.Fatalf("tap_subscriptions %v after the answer", v)
	}
	publishFlush(t, c, "u-2")
	testkit.WaitFor(t, 10*time.Second, "the open subscription served", func() bool { return len(kept.list()) == 2 })
	if got := gone.list(); len(got) != 1 {
		t.Fatalf("the closed subscription received %v", got)
	}
	// By hand: an id the connection never subscribed is answered refused.
	rc := dialRaw(t, h.sock, wire.ModeSubscribe)
	rc.write(wire.AppendUnsubscribe(nil, 42))
	for {
		ft, p := rc.read()
		if ft == wire.FrameUnsubStatus {
			if st, err := wire.ParseSubStatus(p); err != nil || st.OK || st.ID != 42 || st.Text == "" {
				t.Fatalf("unknown id: %+v %v", st, err)
			}
			break
		}
	}
	// While disconnected there is nothing to remove: Close returns at once.
	h.stop()
	testkit.WaitFor(t, 10*time.Second, "disconnected", func() bool { return c.State() != client.StateConnected })
	if err := s2.Close(ctx); err != nil {
		t.Fatalf("Close while disconnected: %v", err)
	}
}

// A client lists its subscriptions (the seed's subscr_json): match, kind,
// and the daemon's answer.
func TestListSubscriptions(t *testing.T) {
	h := startHarness(t, Options{Hub: HubOptions{MaxSubscriptions: 2}})
	ctx := testCtx(t)
	c := h.client(client.Options{Mode: client.ModeSubscribe})
	a, _ := c.Subscribe(`^a\.`, false, func(client.Delivery) {})
	b, _ := c.SubscribeWith("b.exact", client.SubscribeOptions{Exact: true, Raw: true})
	x, _ := c.Subscribe(`^x`, false, nil)
	_ = a.Wait(ctx)
	_ = b.Wait(ctx)
	if err := x.Wait(ctx); !errors.Is(err, client.ErrRefused) {
		t.Fatalf("third subscription: %v", err)
	}
	var got []client.SubscriptionInfo
	if err := json.Unmarshal(c.SubscriptionsJSON(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 ||
		got[0].Match != `^a\.` || got[0].Exact || got[0].Raw || got[0].Polling || got[0].Status != "taken" ||
		got[1].Match != "b.exact" || !got[1].Exact || !got[1].Raw || !got[1].Polling || got[1].Status != "taken" ||
		got[2].Status != "refused" || got[2].Error == "" {
		t.Fatalf("subscriptions %+v", got)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Subscriptions(); len(got) != 2 || got[0].Match != "b.exact" || c.Stats().Subscriptions != 2 {
		t.Fatalf("after a Close: %+v", got)
	}
}

// Clients are found by application name within the process, and the name is
// in their statistics.
func TestFindAndListByName(t *testing.T) {
	h := newHarness(t, Options{})
	first := h.client(client.Options{Name: "find-meter"})
	second := h.client(client.Options{Name: "find-meter"})
	other := h.client(client.Options{Name: "find-other"})
	if client.Find("find-meter") != first || client.Find("find-other") != other || client.Find("find-none") != nil {
		t.Fatal("Find")
	}
	if l := client.List("find-meter"); len(l) != 2 || l[0] != first || l[1] != second {
		t.Fatalf("List %v", l)
	}
	all := client.List("")
	seen := 0
	for _, c := range all {
		if c == first || c == second || c == other {
			seen++
		}
	}
	if seen != 3 {
		t.Fatalf("List(\"\") holds %d of the 3 clients", seen)
	}
	if st := first.Stats(); st.Name != "find-meter" || first.Name() != "find-meter" {
		t.Fatalf("stats name %q", st.Name)
	}
	if err := first.Close(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if client.Find("find-meter") != second || len(client.List("find-meter")) != 1 {
		t.Fatal("a closed client is still listed")
	}
}

// A subscription without a callback keeps its deliveries for Next and Poll
// (the seed's get_data), within its bound; past it they are counted as
// missed.
func TestPollingSubscription(t *testing.T) {
	h := startHarness(t, Options{})
	ctx := testCtx(t)
	c := h.client(client.Options{Mode: client.ModeBidir})
	s := subscribe(t, ctx, c, `^license\.`, false, nil)
	if _, ok := s.Poll(); ok {
		t.Fatal("a delivery before any publish")
	}
	publishFlush(t, c, "p-1", "p-2", "p-3")
	got := map[string]bool{}
	for range 3 {
		d, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[eventID(t, d)] = true // in commit order, which the workers decide
	}
	if !got["p-1"] || !got["p-2"] || !got["p-3"] {
		t.Fatalf("deliveries %v", got)
	}
	if _, ok := s.Poll(); ok {
		t.Fatal("a fourth delivery")
	}
	// Poll hands out what arrived without waiting.
	publishFlush(t, c, "p-4")
	var d client.Delivery
	testkit.WaitFor(t, 10*time.Second, "the fourth delivery", func() bool {
		var ok bool
		d, ok = s.Poll()
		return ok
	})
	if eventID(t, d) != "p-4" {
		t.Fatalf("polled %s", d.Data)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}

	// A small bound: what does not fit is missed, and counted.
	small := h.client(client.Options{Mode: client.ModeBidir, DeliveryQueueBytes: 2 << 10})
	s2 := subscribe(t, ctx, small, `^license\.`, false, nil)
	publishFlush(t, small, "q-1", "q-2", "q-3", "q-4", "q-5", "q-6", "q-7", "q-8")
	testkit.WaitFor(t, 10*time.Second, "eight deliveries handled", func() bool {
		st := small.Stats()
		return st.Delivered == 8
	})
	st := small.Stats()
	info := small.Subscriptions()[0]
	if st.LocalDropped == 0 || info.Missed != st.LocalDropped || info.Delivered+info.Missed != 8 {
		t.Fatalf("stats %+v, subscription %+v", st, info)
	}
	n := uint64(0)
	for {
		if _, ok := s2.Poll(); !ok {
			break
		}
		n++
	}
	if n != info.Delivered {
		t.Fatalf("polled %d, delivered %d", n, info.Delivered)
	}
}

// An exact subscription takes the name alone; an expression of the same
// text takes more: it is unanchored, and its dot matches any character.
func TestExactSubscription(t *testing.T) {
	h := startHarness(t, Options{})
	ctx := testCtx(t)
	c := h.client(client.Options{Mode: client.ModeBidir})
	var exact, regex collector
	se, _ := c.SubscribeWith("license.checkout", client.SubscribeOptions{Exact: true,
		Callback: func(d client.Delivery) { exact.add(d.Tag) }})
	sr, _ := c.Subscribe("license.checkout", false, func(d client.Delivery) { regex.add(d.Tag) })
	for _, s := range []*client.Subscription{se, sr} {
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, typ := range []string{"license.checkout", "license.checkout.end", "xlicense-checkout"} {
		data := fmt.Sprintf(`{"id":"e-%d","type":%q,"resource_type":"license","resource_id":"r","project_id":"p"}`, i, typ)
		if _, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the expression's deliveries", func() bool { return len(regex.list()) == 3 })
	if got := exact.list(); len(got) != 1 || got[0] != "license.checkout" {
		t.Fatalf("exact subscription got %v", got)
	}
}

// A delivery carries the publisher's pid as the kernel reported it: of this
// process, and of a publisher run as another user in a child process.
func TestDeliveryCarriesPublisherPID(t *testing.T) {
	other := testUser(t, "tally-chan-a")
	h := startHarness(t, Options{})
	ctx := testCtx(t)
	c := h.client(client.Options{Mode: client.ModeBidir})
	var mu sync.Mutex
	pids := map[string]uint32{}
	subscribe(t, ctx, c, `^license\.`, false, func(d client.Delivery) {
		id := eventID(t, d)
		mu.Lock()
		pids[id] = d.PID
		mu.Unlock()
	})
	publishFlush(t, c, "pid-self")
	p := runAs(t, other, "publish", "CHANNEL_SOCKET="+h.sock, "CHANNEL_COUNT=1", "CHANNEL_TAG=usage",
		"CHANNEL_PERM=0444", "CHANNEL_ID_PREFIX=pid")
	p.next(t, "done")
	childID := fmt.Sprintf("pid-%d-0", other.UID)
	testkit.WaitFor(t, 10*time.Second, "both deliveries", func() bool { mu.Lock(); defer mu.Unlock(); return len(pids) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if pids["pid-self"] != uint32(os.Getpid()) || pids[childID] != uint32(p.cmd.Process.Pid) {
		t.Fatalf("pids %v, want self %d and child %d", pids, os.Getpid(), p.cmd.Process.Pid)
	}
}

// With no Type, the client infers it: a string or []byte is STRING, a
// json.RawMessage or any other value JSON. The daemon maps each by the type
// it was sent with.
func TestMessageTypeInferred(t *testing.T) {
	h := startHarness(t, Options{})
	c := h.client(client.Options{})
	msgs := []client.Message{
		{Tag: "usage", Value: map[string]any{"id": "v-map", "type": "license.checkout", "resource_type": "license", "resource_id": "r", "project_id": "p"}},
		{Tag: "usage", Value: json.RawMessage(usage("v-raw"))},
		{Tag: "usage", Value: "id=v-string type=license.checkout resource_type=license resource_id=r project_id=p"},
		{Tag: "usage", Value: []byte("id=v-bytes type=license.checkout resource_type=license resource_id=r project_id=p")},
		{Tag: "usage", Data: []byte("id=v-data type=license.checkout resource_type=license resource_id=r project_id=p")},
	}
	for _, m := range msgs {
		if _, err := c.Publish(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Publish(client.Message{Tag: "usage", Value: func() {}}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("a value JSON cannot encode: %v", err)
	}
	if err := c.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, ev := range h.events() {
		ids[ev["event_id"].(string)] = true
	}
	for _, id := range []string{"v-map", "v-raw", "v-string", "v-bytes", "v-data"} {
		if !ids[id] {
			t.Fatalf("no event %s in %v", id, ids)
		}
	}
	// A value typed String is sent as text even when it parses as JSON.
	if _, err := c.Publish(client.Message{Tag: "usage", Type: client.String, Value: `{"id":"not-json"}`}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range h.events() {
		if ev["event_id"] == "not-json" {
			t.Fatal("a String message was mapped as JSON")
		}
	}
}

// In a bidirectional client, a subscription callback blocked on a channel
// the test holds does not delay the daemon's answers: publishes are
// settled (and OnSettled called) while the callback is still blocked.
func TestBlockedCallbackDoesNotDelayAnswers(t *testing.T) {
	h := startHarness(t, Options{})
	ctx := testCtx(t)
	var settled atomic.Int64
	c := h.client(client.Options{Mode: client.ModeBidir, OnSettled: func(client.Settlement) { settled.Add(1) }})
	entered := make(chan struct{})
	release := make(chan struct{})
	var returned atomic.Bool
	var once sync.Once
	subscribe(t, ctx, c, `^license\.`, false, func(client.Delivery) {
		once.Do(func() {
			close(entered)
			<-release
			returned.Store(true)
		})
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	publishFlush(t, c, "blk-0")
	<-entered
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = fmt.Sprintf("blk-%d", i+1)
	}
	publishFlush(t, c, ids...)
	if returned.Load() {
		t.Fatal("the callback returned before the test released it")
	}
	if n := settled.Load(); n != 201 {
		t.Fatalf("%d settled while the callback was blocked, want 201", n)
	}
	if st := c.Stats(); st.Acked != 201 {
		t.Fatalf("stats %+v", st)
	}
	close(release)
	testkit.WaitFor(t, 10*time.Second, "the callback released", returned.Load)
}

// SetQueueLimit moves the bound at once, both ways.
func TestSetQueueLimit(t *testing.T) {
	h := newHarness(t, Options{})
	c := h.client(client.Options{QueueLimitBytes: 8 << 10})
	msg := client.Message{Tag: "usage", Type: client.JSON, Data: usage("ql")}
	fill := func() int {
		n := 0
		for {
			if _, err := c.Publish(msg); errors.Is(err, client.ErrNoBufs) {
				return n
			} else if err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	first := fill()
	c.SetQueueLimit(16 << 10)
	more := fill()
	if first == 0 || more < first-1 || c.Stats().QueuedBytes > 16<<10 {
		t.Fatalf("%d fit under 8 KiB, %d more under 16 KiB, stats %+v", first, more, c.Stats())
	}
	c.SetQueueLimit(4 << 10)
	if _, err := c.Publish(msg); !errors.Is(err, client.ErrNoBufs) {
		t.Fatalf("below what is queued: %v", err)
	}
	h.start()
	if err := c.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(msg); err != nil {
		t.Fatalf("after the drain, under the lowered bound: %v", err)
	}
}

// Publishing on a subscribe-only client, and subscribing on a publish-only
// one, answer ErrMode; the daemon itself refuses a PUBLISH on a connection
// opened to subscribe only.
func TestModeIsEnforced(t *testing.T) {
	h := startHarness(t, Options{})
	sub := h.client(client.Options{Mode: client.ModeSubscribe})
	if _, err := sub.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("m")}); !errors.Is(err, client.ErrMode) {
		t.Fatalf("publish on a subscribe-only client: %v", err)
	}
	pub := h.client(client.Options{Mode: client.ModePublish})
	if _, err := pub.Subscribe(".", false, nil); !errors.Is(err, client.ErrMode) {
		t.Fatalf("subscribe on a publish-only client: %v", err)
	}
	if _, err := pub.SubscribeWith("x", client.SubscribeOptions{Exact: true}); !errors.Is(err, client.ErrMode) {
		t.Fatalf("exact subscribe on a publish-only client: %v", err)
	}
	rc := dialRaw(t, h.sock, wire.ModeSubscribe)
	p := wire.Publish{Seq: 1, Type: wire.JSON, Tag: []byte("usage"), Data: usage("m"),
		UID: uint32(syscall.Getuid()), GID: uint32(syscall.Getgid()), Perm: 0o440}
	rc.write(wire.AppendPublish(nil, &p))
	if a := rc.acks(1)[1]; a.Status != wire.Refused || a.Reason != dropMode {
		t.Fatalf("publish on a subscribe-only connection: %+v", a)
	}
	if v := h.counter("dropped_total", "reason", dropMode); v != 1 {
		t.Fatalf("dropped_total{mode} %v", v)
	}
	if n := len(h.events()); n != 0 {
		t.Fatalf("%d events", n)
	}
}

// Publish, Subscribe, SetQueueLimit and Subscription.Close called from
// inside a subscription callback and from OnSettled return, and take
// effect.
func TestOperationsFromInsideCallbacks(t *testing.T) {
	h := startHarness(t, Options{})
	ctx := testCtx(t)
	var c *client.Client
	var fromSettled atomic.Bool
	type result struct {
		seq uint64
		sub *client.Subscription
		err error
	}
	done := make(chan result, 1)
	var once, settledOnce sync.Once
	c = h.client(client.Options{Mode: client.ModeBidir, OnSettled: func(client.Settlement) {
		settledOnce.Do(func() {
			c.SetQueueLimit(2 << 20)
			_, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("from-settled")})
			fromSettled.Store(err == nil)
		})
	}})
	var first *client.Subscription
	first = subscribe(t, ctx, c, `^license\.`, false, func(d client.Delivery) {
		once.Do(func() {
			c.SetQueueLimit(1 << 20)
			seq, err := c.Publish(client.Message{Tag: "usage", Type: client.JSON, Data: usage("from-callback")})
			if err != nil {
				done <- result{err: err}
				return
			}
			s, err := c.Subscribe(`^license\.checkout$`, false, nil)
			if err == nil {
				err = first.Close(ctx)
			}
			done <- result{seq: seq, sub: s, err: err}
		})
	})
	publishFlush(t, c, "cb-0")
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the callback's calls did not return")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.sub.Wait(ctx); err != nil {
		t.Fatalf("subscription made in a callback: %v", err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if !fromSettled.Load() {
		t.Fatal("Publish from OnSettled failed")
	}
	ids := map[string]bool{}
	for _, ev := range h.events() {
		ids[ev["event_id"].(string)] = true
	}
	if !ids["from-callback"] || !ids["from-settled"] {
		t.Fatalf("events %v", ids)
	}
	if got := c.Subscriptions(); len(got) != 1 || got[0].Match != `^license\.checkout$` {
		t.Fatalf("subscriptions %+v", got)
	}
}
