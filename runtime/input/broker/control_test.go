package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// replicaLink is one replica's control link in a test, and what it received.
type replicaLink struct {
	*Control
	logs *testkit.SyncBuffer

	mu   sync.Mutex
	got  []Decision
	fail int // Apply fails this many more times

	cancel context.CancelFunc
	done   chan struct{}
}

func (r *replicaLink) received() []Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Decision(nil), r.got...)
}

// controlOptions are fast schedules for tests on v (nil: the local broker's
// default vhost, for tests that never dial).
func controlOptions(v *vhost, name string, r *replicaLink) ControlOptions {
	u := "amqp://guest:guest@" + brokerAddr + "/"
	if v != nil {
		u = v.URL()
	}
	return ControlOptions{
		TransportURL: u, Replica: name, QueueType: QueueClassic,
		ReconnectMin: 100 * time.Millisecond, ReconnectMax: 400 * time.Millisecond,
		ApplyRetry: 100 * time.Millisecond,
		Apply: func(_ context.Context, d Decision) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.fail > 0 {
				r.fail--
				return errors.New("outbox refused the write")
			}
			r.got = append(r.got, d)
			return nil
		},
		Logger: zerolog.New(r.logs).Level(zerolog.DebugLevel),
	}
}

// newLink makes a link; adjust its options with edit before it is built.
func newLink(t *testing.T, v *vhost, name string, edit func(*ControlOptions)) *replicaLink {
	t.Helper()
	r := &replicaLink{logs: &testkit.SyncBuffer{}}
	opts := controlOptions(v, name, r)
	if edit != nil {
		edit(&opts)
	}
	l, err := NewControl(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.Control = l
	return r
}

// upLink makes a link with the default options, starts it and waits until
// it is up.
func upLink(t *testing.T, v *vhost, name string) *replicaLink {
	t.Helper()
	r := newLink(t, v, name, nil)
	r.start(t)
	r.waitUp(t)
	return r
}

func (r *replicaLink) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(r.stop)
}

func (r *replicaLink) waitUp(t *testing.T) {
	t.Helper()
	testkit.WaitFor(t, 15*time.Second, r.opts.Replica+" link up", func() bool { return testutil.ToFloat64(r.m.up) == 1 })
}

func (r *replicaLink) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.cancel = nil
}

func decision(n int, by string) Decision {
	return Decision{Action: "promote", Module: "echo", Candidate: fmt.Sprintf("echo@2.0.%d", n),
		SHA256: strings.Repeat(fmt.Sprintf("%x", n%16), 64), By: by, At: time.Now().UTC().Truncate(time.Second)}
}

// TestControlReachesEveryReplica: a decision published by one replica reaches
// every replica's queue, its own included, and one that was down when it
// was published gets it when it comes back.
func TestControlReachesEveryReplica(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t)
	r1, r2, r3 := newLink(t, v, "collector-0", nil), newLink(t, v, "collector-1", nil), newLink(t, v, "collector-2", nil)
	for _, r := range []*replicaLink{r1, r2, r3} {
		r.start(t)
		r.waitUp(t)
	}
	r3.stop()

	d := decision(1, "collector-0")
	if err := r1.Publish(context.Background(), d); err != nil {
		t.Fatalf("publish: %v", err)
	}
	for _, r := range []*replicaLink{r1, r2} {
		testkit.WaitFor(t, 15*time.Second, r.opts.Replica+" received", func() bool { return len(r.received()) == 1 })
		if got := r.received()[0]; got != d {
			t.Errorf("%s received %+v, want %+v", r.opts.Replica, got, d)
		}
	}
	if n := testutil.ToFloat64(r1.m.published); n != 1 {
		t.Errorf("published %v", n)
	}
	if ready, exists := v.QueueState(t, r3.Queue()); !exists || ready != 1 {
		t.Fatalf("the stopped replica's queue holds %d (exists %v), want the decision", ready, exists)
	}

	// collector-2 comes back (a new process: a new link).
	r3 = newLink(t, v, "collector-2", nil)
	r3.start(t)
	testkit.WaitFor(t, 15*time.Second, "collector-2 received after its restart", func() bool { return len(r3.received()) == 1 })
	if got := r3.received()[0]; got != d {
		t.Errorf("collector-2 received %+v", got)
	}
	testkit.WaitFor(t, 15*time.Second, "acknowledged", func() bool { ready, _ := v.QueueState(t, r3.Queue()); return ready == 0 })
}

// TestControlUnsentKeptAcrossARestart: with the broker out of reach Publish
// says so at once; the decision is kept in the store and sent by the next
// run once the broker is reachable.
func TestControlUnsentKeptAcrossARestart(t *testing.T) {
	v := newVhost(t)
	ob := openOutbox(t, t.TempDir(), 100)
	other := upLink(t, v, "collector-1")

	down := newLink(t, v, "collector-0", func(o *ControlOptions) {
		o.TransportURL = "amqp://guest:guest@127.0.0.1:1/" + url.PathEscape(v.Name)
		o.Store = ob
	})
	down.start(t)
	d := decision(2, "collector-0")
	err := down.Publish(context.Background(), d)
	if !errors.Is(err, ErrNotShared) || !strings.Contains(err.Error(), "kept") {
		t.Fatalf("publish with the broker out of reach: %v", err)
	}
	if down.Unsent() != 1 || testutil.ToFloat64(down.m.unsent) != 1 {
		t.Fatalf("unsent %d", down.Unsent())
	}
	down.stop()

	// The collector restarts with the broker reachable.
	up := newLink(t, v, "collector-0", func(o *ControlOptions) { o.Store = ob })
	if up.Unsent() != 1 {
		t.Fatalf("the unsent decision was not kept: %d", up.Unsent())
	}
	up.start(t)
	testkit.WaitFor(t, 15*time.Second, "the kept decision at the other replica", func() bool { return len(other.received()) == 1 })
	if got := other.received()[0]; got != d {
		t.Errorf("received %+v", got)
	}
	testkit.WaitFor(t, 15*time.Second, "nothing left unsent", func() bool { return up.Unsent() == 0 })
	up.stop()
	if again := newLink(t, v, "collector-0", func(o *ControlOptions) { o.Store = ob }); again.Unsent() != 0 {
		t.Errorf("a confirmed decision is still kept: %d", again.Unsent())
	}
}

// TestControlHeldUntilApplied: a decision Apply could not record is held,
// not acknowledged, and offered again; the next one waits behind it.
func TestControlHeldUntilApplied(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t)
	r1 := newLink(t, v, "collector-0", nil)
	r2 := newLink(t, v, "collector-1", nil)
	r2.fail = 2
	r1.start(t)
	r2.start(t)
	r1.waitUp(t)
	r2.waitUp(t)
	d1, d2 := decision(3, "collector-0"), decision(4, "collector-0")
	for _, d := range []Decision{d1, d2} {
		if err := r1.Publish(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 15*time.Second, "both applied", func() bool { return len(r2.received()) == 2 })
	if got := r2.received(); got[0] != d1 || got[1] != d2 {
		t.Errorf("order %+v", got)
	}
	if !strings.Contains(r2.logs.String(), "held and tried again") {
		t.Error("the failed Apply was not logged")
	}
	testkit.WaitFor(t, 15*time.Second, "acknowledged", func() bool { ready, _ := v.QueueState(t, r2.Queue()); return ready == 0 })
}

// TestControlReplicaNameTaken: a second collector with the same REPLICA_NAME
// is refused the queue (exclusive consumer) and says why.
func TestControlReplicaNameTaken(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t)
	upLink(t, v, "collector-0")
	twin := newLink(t, v, "collector-0", nil)
	twin.start(t)
	testkit.WaitFor(t, 15*time.Second, "the twin refused", func() bool {
		return strings.Contains(twin.logs.String(), "REPLICA_NAME of its own")
	})
	if testutil.ToFloat64(twin.m.up) != 0 {
		t.Error("the twin reports its link up")
	}
	if err := twin.Publish(context.Background(), decision(5, "collector-0")); !errors.Is(err, ErrNotShared) {
		t.Errorf("publish on the refused twin: %v", err)
	}
}

// TestControlUnreadableMessageDropped: a body that is not a decision is
// acknowledged, counted and logged, and the next decision is delivered.
func TestControlUnreadableMessageDropped(t *testing.T) {
	t.Parallel() // its own virtual host
	v := newVhost(t)
	r := upLink(t, v, "collector-0")
	v.Publish(t, DefaultControlExchange, "", []byte("not json"), []byte(`{"format":2,"action":"promote"}`))
	d := decision(6, "collector-1")
	if err := r.Publish(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, "the decision after two unreadable ones", func() bool { return len(r.received()) == 1 })
	if n := testutil.ToFloat64(r.m.unreadable); n != 2 {
		t.Errorf("unreadable %v, want 2", n)
	}
}

// TestControlUnsentBounded: at most maxUnsent decisions wait for the broker;
// the oldest goes first.
func TestControlUnsentBounded(t *testing.T) {
	r := &replicaLink{logs: &testkit.SyncBuffer{}}
	opts := controlOptions(nil, "collector-0", r)
	opts.TransportURL = "amqp://guest:guest@127.0.0.1:1/"
	l, err := NewControl(opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxUnsent + 1 {
		if err := l.Publish(context.Background(), decision(i, "collector-0")); !errors.Is(err, ErrNotShared) {
			t.Fatal(err)
		}
	}
	if l.Unsent() != maxUnsent || l.unsent[0].d.Candidate != "echo@2.0.1" {
		t.Fatalf("unsent %d, oldest %s", l.Unsent(), l.unsent[0].d.Candidate)
	}
	if !strings.Contains(r.logs.String(), "dropped") {
		t.Error("the drop was not logged")
	}
}

func TestControlOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*ControlOptions)
		want string
	}{
		{"no replica", func(o *ControlOptions) { o.Replica = "" }, "replica name"},
		{"replica with a space", func(o *ControlOptions) { o.Replica = "a b" }, "replica name"},
		{"reserved exchange", func(o *ControlOptions) { o.Exchange = "amq.fanout" }, "control exchange"},
		{"no apply", func(o *ControlOptions) { o.Apply = nil }, "Apply"},
	} {
		r := &replicaLink{logs: &testkit.SyncBuffer{}}
		opts := controlOptions(nil, "collector-0", r)
		tc.edit(&opts)
		if _, err := NewControl(opts); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestControlNarrowAccount: the account of docs/broker.md runs the control
// link with the patterns given there.
func TestControlNarrowAccount(t *testing.T) {
	t.Parallel() // its own virtual host
	v, narrowUser := narrowVhost(t)
	narrowURL := "amqp://" + narrowUser + ":" + narrowPassword + "@" + brokerAddr + "/" + url.PathEscape(v.Name)
	r1 := newLink(t, v, "collector-0", func(o *ControlOptions) { o.TransportURL = narrowURL })
	r2 := newLink(t, v, "collector-1", func(o *ControlOptions) { o.TransportURL = narrowURL })
	r1.start(t)
	r2.start(t)
	r1.waitUp(t)
	r2.waitUp(t)
	if err := r1.Publish(context.Background(), decision(7, "collector-0")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, "received with the narrow account", func() bool { return len(r2.received()) == 1 })
	if strings.Contains(r1.logs.String()+r2.logs.String(), narrowPassword) {
		t.Error("the password reached a log")
	}
	// The account may not declare other exchanges.
	ch := testkit.Channel(t, narrowURL)
	err := ch.ExchangeDeclare("tally-other", amqp.ExchangeFanout, true, false, false, false, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
		t.Errorf("declaring another exchange: %v, want ACCESS_REFUSED", err)
	}
}

// Queue is the name of this replica's queue.
func (l *Control) Queue() string { return l.queue }

// Unsent is the number of decisions waiting for the broker's confirm.
func (l *Control) Unsent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.unsent)
}
