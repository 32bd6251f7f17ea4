package sender_test

// Run holding back for a backlogged intake. The assertions rest on lower
// bounds the sender's own waits guarantee (the n-th POST of a stretch cannot
// begin before n-1 intervals have passed) and on upper bounds far from what
// a correct sender needs.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/sender"
)

type fakeIntake struct{ backlogged atomic.Bool }

func (f *fakeIntake) Backlogged() bool { return f.backlogged.Load() }

// run starts s.Run and returns a function that stops it and waits.
func run(t testing.TB, s *sender.Sender) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("run did not return 5 s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (e *env) posts(t testing.TB) int64 { return e.stats(t).Requests["200"] }

// waitDrained waits until the outbox is empty, checking check on the way.
func (e *env) waitDrained(t testing.TB, d time.Duration, check func()) {
	t.Helper()
	testkit.WaitUntil(t, d, "the outbox to drain", func() (bool, string) {
		if e.ob.Depth() == 0 {
			return true, ""
		}
		if check != nil {
			check()
		}
		return false, fmt.Sprintf("depth %d, %d POSTs", e.ob.Depth(), e.posts(t))
	})
}

// yieldingSender is a sender of batches of 10 whose Intake reports a backlog
// (until the test says otherwise), with its own registry and captured logs.
func yieldingSender(t *testing.T, e *env, interval, yieldFor time.Duration) (*sender.Sender, *fakeIntake, *prometheus.Registry, *testkit.SyncBuffer) {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &testkit.SyncBuffer{}
	in := &fakeIntake{}
	in.backlogged.Store(true)
	s := e.sender(t, func(o *sender.Options) {
		o.BatchMax = 10
		o.Intake = in
		o.YieldInterval = interval
		o.YieldFor = yieldFor
		o.Registerer = reg
		o.Logger = zerolog.New(logs)
	})
	return s, in, reg, logs
}

// While the intake is backlogged the sender sends at most one batch per
// YieldInterval; without an Intake it sends them back to back.
func TestYieldOneBatchPerInterval(t *testing.T) {
	const interval = 200 * time.Millisecond
	e := newEnv(t)
	s, _, reg, logs := yieldingSender(t, e, interval, 10*time.Second)
	e.append(t, 0, 50, 10) // five batches
	start := time.Now()
	run(t, s)
	e.waitDrained(t, 20*time.Second, func() {
		// Counted before the clock is read: every POST counted began
		// before elapsed, and the n-th no earlier than (n-1) intervals
		// after Run started.
		n := e.posts(t)
		elapsed := time.Since(start)
		if limit := 1 + int64(elapsed/interval); n > limit {
			t.Fatalf("%d POSTs %v after the start; at most %d allowed at one per %v", n, elapsed, limit, interval)
		}
		if n > 0 && elapsed < 5*time.Second && testkit.Metric(t, reg, "tally_collector_sender_yielding") != 1 {
			t.Fatal("tally_collector_sender_yielding is not 1 while holding back")
		}
	})
	if elapsed := time.Since(start); elapsed < 4*interval {
		t.Fatalf("five batches delivered in %v while backlogged; one per %v takes at least %v", elapsed, interval, 4*interval)
	}
	if n := e.posts(t); n != 5 {
		t.Fatalf("%d POSTs, want 5", n)
	}
	if got := testkit.Metric(t, reg, "tally_collector_sender_yield_seconds_total"); got <= 0 {
		t.Fatalf("yield seconds %v, want > 0", got)
	}
	if !strings.Contains(logs.String(), "intake backlogged") {
		t.Fatalf("the start of the stretch is not logged:\n%s", logs.String())
	}

	// No Intake: all five at once.
	e2 := newEnv(t)
	reg2 := prometheus.NewRegistry()
	s2 := e2.sender(t, func(o *sender.Options) {
		o.BatchMax = 10
		o.YieldInterval = time.Hour
		o.Registerer = reg2
	})
	e2.append(t, 0, 50, 10)
	run(t, s2)
	e2.waitDrained(t, 10*time.Second, nil)
	if n := e2.posts(t); n != 5 {
		t.Fatalf("%d POSTs without an intake, want 5", n)
	}
	if testkit.Metric(t, reg2, "tally_collector_sender_yielding") != 0 || testkit.Metric(t, reg2, "tally_collector_sender_yield_seconds_total") != 0 {
		t.Fatal("a sender without an intake held back")
	}
}

// The sender holds back for at most YieldFor at a stretch, however long the
// backlog lasts; a later backlog starts a new stretch.
func TestYieldBoundedByYieldFor(t *testing.T) {
	const yieldFor = 300 * time.Millisecond
	e := newEnv(t)
	s, in, reg, logs := yieldingSender(t, e, time.Hour, yieldFor)
	e.append(t, 0, 50, 10)
	start := time.Now()
	run(t, s)
	// An hour per batch without the bound.
	e.waitDrained(t, 20*time.Second, nil)
	if elapsed := time.Since(start); elapsed < yieldFor {
		t.Fatalf("delivered in %v: the sender did not hold back", elapsed)
	}
	if n := e.posts(t); n != 5 {
		t.Fatalf("%d POSTs, want 5", n)
	}
	if testkit.Metric(t, reg, "tally_collector_sender_yielding") != 0 {
		t.Fatal("still reported yielding after YieldFor")
	}
	if c := strings.Count(logs.String(), "backlog lasted longer than YieldFor"); c != 1 {
		t.Fatalf("YieldFor exhausted logged %d times, want 1:\n%s", c, logs.String())
	}

	// The backlog ends (the stretch with it), then a new one begins: the
	// sender holds back again, again for at most YieldFor.
	in.backlogged.Store(false)
	waitLog(t, logs, "intake backlog over", 1)
	start = time.Now()
	in.backlogged.Store(true)
	waitLog(t, logs, "intake backlogged", 2)
	e.append(t, 50, 30, 10)
	e.waitDrained(t, 20*time.Second, nil)
	if elapsed := time.Since(start); elapsed < yieldFor {
		t.Fatalf("second backlog: delivered in %v, the sender did not hold back", elapsed)
	}
	waitLog(t, logs, "backlog lasted longer than YieldFor", 2)
	if st := e.stats(t); st.Accepted != 80 {
		t.Fatalf("stats %+v", st)
	}
}

func waitLog(t testing.TB, logs *testkit.SyncBuffer, msg string, count int) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("%q logged %d times", msg, count), func() bool {
		return strings.Count(logs.String(), msg) >= count
	})
}

// When the backlog ends the sender resumes at once, not at the end of the
// interval it was waiting out.
func TestYieldResumesWhenBacklogEnds(t *testing.T) {
	const interval = 10 * time.Second
	e := newEnv(t)
	s, in, reg, logs := yieldingSender(t, e, interval, time.Minute)
	e.append(t, 0, 50, 10)
	start := time.Now()
	run(t, s)
	testkit.WaitFor(t, 5*time.Second, "the first batch sent", func() bool { return e.posts(t) >= 1 })
	time.Sleep(200 * time.Millisecond)
	n, elapsed := e.posts(t), time.Since(start)
	if elapsed < interval && n != 1 {
		t.Fatalf("%d POSTs %v after the start, want 1 within the first %v", n, elapsed, interval)
	}
	if testkit.Metric(t, reg, "tally_collector_sender_yielding") != 1 {
		t.Fatal("tally_collector_sender_yielding is not 1 while holding back")
	}
	in.backlogged.Store(false)
	// Waiting the interval out would take until start+10s.
	e.waitDrained(t, interval*8/10-time.Since(start), nil)
	if n := e.posts(t); n != 5 {
		t.Fatalf("%d POSTs, want 5", n)
	}
	if testkit.Metric(t, reg, "tally_collector_sender_yielding") != 0 {
		t.Fatal("still reported yielding after the backlog ended")
	}
	if !strings.Contains(logs.String(), "intake backlog over") {
		t.Fatalf("the end of the stretch is not logged:\n%s", logs.String())
	}
}

// Flush, the last delivery of a graceful stop, never holds back; Run stops
// promptly while it does.
func TestFlushIgnoresYielding(t *testing.T) {
	e := newEnv(t)
	s, _, reg, _ := yieldingSender(t, e, time.Hour, time.Hour)
	e.append(t, 0, 10, 10)
	stop := run(t, s)
	testkit.WaitFor(t, 5*time.Second, "the first batch sent", func() bool { return e.posts(t) >= 1 })
	e.append(t, 10, 40, 10)
	time.Sleep(100 * time.Millisecond)
	if n := e.posts(t); n != 1 {
		t.Fatalf("%d POSTs while holding back for an hour, want 1", n)
	}
	stop() // fails the test unless Run returns within 5 s
	if testkit.Metric(t, reg, "tally_collector_sender_yielding") != 0 {
		t.Fatal("tally_collector_sender_yielding left at 1 after Run returned")
	}
	flush(t, s, 10*time.Second)
	if n := e.posts(t); n != 5 || e.ob.Depth() != 0 {
		t.Fatalf("flush: %d POSTs, depth %d", n, e.ob.Depth())
	}
}
