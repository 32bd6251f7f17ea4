package e2e

// End-to-end tests: the built binary against the real RabbitMQ, the reference
// Reporting API and, for the main path, the real oslo.messaging Notifier.
// Each test has a virtual host of its own, so tests of other packages that
// publish on the same broker at the same time cannot reach its queue.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

type e2e struct {
	b      bins
	v      *vhost
	api    *api
	c      *collector
	corpus *corpus
	prefix string
}

// setupE2E prepares the broker as a cloud's would be (the service exchanges
// exist), starts the API and the collector, and waits until it consumes.
func setupE2E(t *testing.T, extraEnv ...string) *e2e {
	t.Helper()
	e := &e2e{corpus: loadCorpus(t), prefix: randHex(4)}
	e.b, e.v, e.api = stack(t, e.corpus.exchanges()...)
	env := append([]string{"TALLY_OSC_EXCHANGES=" + strings.Join(e.corpus.exchanges(), ",")}, extraEnv...)
	e.c = newCollector(t, e.b, e.v, e.api.url(), e.api.token, env...)
	e.c.start(t)
	e.c.waitReady(t)
	return e
}

// waitDelivered waits until the API holds n distinct events.
func (e *e2e) waitDelivered(t testing.TB, n int, limit time.Duration) {
	t.Helper()
	waitAccepted(t, e.api, n, limit)
}

// waitAccepted waits until the API a holds n distinct events.
func waitAccepted(t testing.TB, a *api, n int, limit time.Duration) {
	t.Helper()
	testkit.WaitUntil(t, limit, fmt.Sprintf("the Reporting API to hold %d events", n), func() (bool, string) {
		st := a.stats(t)
		return st.Accepted >= int64(n), fmt.Sprintf("the Reporting API holds %d of %d events (%d duplicates); a restart of the shared broker "+
			"during the test loses what is published before the exchanges are bound again (see brokerLockPath)",
			st.Accepted, n, st.Duplicates)
	})
}

// checkExactSet: the API holds exactly one event per published notification,
// with the expected id, and no credential.
func (e *e2e) checkExactSet(t *testing.T, n int) []storedEvent {
	t.Helper()
	return checkExactSet(t, e.api, e.prefix, n)
}

// checkExactSet: the API holds exactly one event for each of the n
// notifications published with prefix, and no credential.
func checkExactSet(t *testing.T, a *api, prefix string, n int) []storedEvent {
	t.Helper()
	events, raw := a.events(t)
	want := make(map[string]bool, n)
	for i := 0; i < n; i++ {
		want[messageID(prefix, i)] = true
	}
	seen := make(map[string]int, len(events))
	for _, ev := range events {
		seen[ev.EventID]++
	}
	var missing, unexpected, doubled int
	for id := range want {
		if seen[id] == 0 {
			missing++
		}
	}
	for id, k := range seen {
		if !want[id] {
			unexpected++
		}
		if k > 1 {
			doubled++
		}
	}
	if missing+unexpected+doubled > 0 || len(events) != n {
		t.Errorf("API holds %d events for %d published: %d missing, %d unexpected, %d stored twice", len(events), n, missing, unexpected, doubled)
	}
	if bytes.Contains(raw, []byte(secretFor(prefix))) {
		t.Error("a context token reached the Reporting API")
	}
	return events
}

func (e *e2e) checkQueueEmpty(t *testing.T) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "queue tally-notifications empty and nothing unacknowledged", func() bool {
		r, u := queueDepth(t, e.v, "tally-notifications")
		return r == 0 && u == 0
	})
}

// TestEndToEndOslo publishes 20 000 notifications of the five services
// through oslo.messaging's Notifier; the API must end with exactly their
// event_ids, and the collector's counters must agree.
func TestEndToEndOslo(t *testing.T) {
	testkit.NeedOslo(t)
	e := setupE2E(t)
	const n = 20000
	start := time.Now()
	publishOslo(t, e.v, e.corpus, e.prefix, 0, n, 2)
	t.Logf("published %d notifications through oslo.messaging in %s", n, time.Since(start).Round(time.Millisecond))
	e.waitDelivered(t, n, 3*time.Minute)
	t.Logf("all delivered %s after the first publish", time.Since(start).Round(time.Millisecond))

	events := e.checkExactSet(t, n)
	// Per service, exchange and mapper, as published.
	wantSvc := map[string]int{}
	for i := 0; i < n; i++ {
		it := e.corpus.items[i%len(e.corpus.items)]
		wantSvc[it.Service+" "+it.Exchange+" "+it.Service+"@"]++
	}
	gotSvc := map[string]int{}
	for _, ev := range events {
		mapper, _, _ := strings.Cut(ev.Source.Mapper, "@")
		gotSvc[ev.Service+" "+ev.Source.Exchange+" "+mapper+"@"]++
		if ev.Source.RoutingKey != "notifications.info" {
			t.Fatalf("routing key %q", ev.Source.RoutingKey)
		}
	}
	if len(wantSvc) != 5 {
		t.Fatalf("corpus covers %d services, want 5", len(wantSvc))
	}
	for k, w := range wantSvc {
		if gotSvc[k] != w {
			t.Errorf("%s: %d events, want %d", k, gotSvc[k], w)
		}
	}

	st := e.api.stats(t)
	if st.Accepted != n || st.Duplicates != 0 || st.Rejected != 0 {
		t.Errorf("API stats: %+v", st)
	}
	m := e.c.metrics(t)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"tally_collector_consumed_total", nil, n},
		{"tally_collector_mapped_total", nil, n},
		{"tally_collector_acked_total", nil, n},
		{"tally_collector_sent_events_total", nil, n},
		{"tally_collector_duplicate_events_total", nil, 0},
		{"tally_collector_rejected_events_total", nil, 0},
		{"tally_collector_skipped_total", nil, 0},
		{"tally_collector_unparseable_total", nil, 0},
		{"tally_collector_mapper_failures_total", nil, 0},
		{"tally_collector_outbox_depth", nil, 0},
		{"tally_collector_sender_requests_total", []string{`class="2xx"`}, float64(st.Requests["200"])},
		{"tally_collector_ready", nil, 1},
	} {
		if got := sum(m, c.name, c.labels...); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	e.checkQueueEmpty(t)
	// The ledger agrees: each notification consumed and committed once,
	// every event delivered, and the API holds what the ledger expects.
	if tot, _ := e.c.checkLedger(t); tot.Consumed != n || tot.Committed != n || tot.Delivered != n || tot.Duplicates != 0 {
		t.Errorf("ledger totals %+v for %d published", tot, n)
	}
	// Every hour the published timestamps may fall in.
	out, code := e.c.reconcile(t, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Now().Add(24*time.Hour))
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d events expected, %d stored by the API", n, n)) {
		t.Errorf("reconcile: exit %d\n%s", code, out)
	}
	if code, d := e.c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d after %s", code, d)
	}
}

// TestEndToEndChaos: while notifications stream in, the collector is killed
// with SIGKILL three times, the broker closes its connections once, and the
// API fails for 10 s once; a last slice meets three 413s. Nothing
// acknowledged may be lost; duplicates are allowed, and the API counts them.
// The ledger ends balanced and reconcile finds no differing hour.
func TestEndToEndChaos(t *testing.T) {
	e := setupE2E(t)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("chaos seed %d", seed)

	const n = 12000
	const tail413 = 200
	const publishFor = 12 * time.Second
	var wg sync.WaitGroup
	var pubErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		// In slices of 100, paced to spread n over publishFor.
		slice := 100
		pace := publishFor / time.Duration(n/slice)
		for from := 0; from < n; from += slice {
			t0 := time.Now()
			if pubErr = publishRawRetry(e.v.URL(), e.corpus, e.prefix, from, min(from+slice, n)); pubErr != nil {
				return
			}
			time.Sleep(pace - time.Since(t0))
		}
	}()

	at := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	type fault struct {
		at   time.Duration
		name string
		do   func()
	}
	kill := func() {
		e.c.p.kill9(t)
		e.c.start(t)
	}
	faults := []fault{
		{at(500*time.Millisecond, 2500*time.Millisecond), "kill -9", kill},
		{at(3*time.Second, 4*time.Second), "close_all_connections", func() { e.v.CloseConnections(t, "end-to-end test: connections closed on purpose") }},
		{at(4500*time.Millisecond, 5500*time.Millisecond), "API fails for 10 s", func() {
			e.api.fail(t, 503)
			time.AfterFunc(10*time.Second, func() { e.api.clearFail(t) })
		}},
		{at(6*time.Second, 8*time.Second), "kill -9", kill},
		{at(9*time.Second, 11*time.Second), "kill -9", kill},
	}
	begin := time.Now()
	for _, f := range faults {
		time.Sleep(time.Until(begin.Add(f.at)))
		t.Logf("%6s: %s", time.Since(begin).Round(time.Millisecond), f.name)
		f.do()
	}
	wg.Wait()
	if pubErr != nil {
		t.Fatal(pubErr)
	}
	time.Sleep(time.Until(begin.Add(11 * time.Second))) // the API outage is over
	e.c.waitReady(t)
	e.waitDelivered(t, n, 3*time.Minute)
	// Then the API answers 413 three times: a last slice is delivered in
	// halved batches. The slice is held in the outbox (the API answers 503)
	// until all of it is there, so that the 413s meet one batch of all of it,
	// halved to 100, 50 and 25: a 413 that met a batch of a single event
	// would rightly set that event aside as too large for the API.
	e.api.fail(t, 503)
	publishRaw(t, e.v, e.corpus, e.prefix, n, n+tail413)
	testkit.WaitFor(t, time.Minute, "the last slice held in the outbox", func() bool {
		return sum(e.c.metrics(t), "tally_collector_outbox_depth") >= tail413
	})
	e.api.do(t, "POST", "/admin/fail", map[string]any{"status": 413, "count": 3}, nil)
	e.waitDelivered(t, n+tail413, 3*time.Minute)
	e.checkExactSet(t, n+tail413)
	e.checkQueueEmpty(t)
	st := e.api.stats(t)
	t.Logf("API: %d accepted, %d duplicates counted, requests %v; collector restarts: %d", st.Accepted, st.Duplicates, st.Requests, e.c.runs-1)
	if st.Requests["503"] == 0 {
		t.Error("the API outage was not seen by the sender")
	}
	m := e.c.metrics(t)
	if got := sum(m, "tally_collector_outbox_depth"); got != 0 {
		t.Errorf("outbox depth %v after the drain", got)
	}
	if st.Requests["413"] != 3 {
		t.Errorf("%d answers 413, want 3", st.Requests["413"])
	}
	// The ledger survived the kills: every hour balances, every
	// notification published was consumed and committed at least once, and
	// what it expects the API to hold is what the API holds.
	tot, table := e.c.checkLedger(t)
	t.Logf("ledger:\n%s", table)
	if tot.Consumed < n+tail413 || tot.Committed < n+tail413 || tot.Delivered != tot.Events {
		t.Errorf("ledger totals %+v for %d published", tot, n)
	}
	out, code := e.c.reconcile(t, publishEpoch, publishEpoch.Add(time.Hour))
	t.Logf("reconcile (exit %d):\n%s", code, out)
	if code != 0 || !strings.Contains(out, "0 differing hours") || !strings.Contains(out, fmt.Sprintf("%d stored by the API", n+tail413)) {
		t.Errorf("reconcile after the chaos run: exit %d", code)
	}
	if code, d := e.c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d after %s", code, d)
	}
}

// TestEndToEndGracefulStop: SIGTERM while notifications stream in exits 0
// within the stop budget, leaves nothing unacknowledged on the broker, and
// loses nothing: a restarted collector delivers the rest.
func TestEndToEndGracefulStop(t *testing.T) {
	e := setupE2E(t, "TALLY_OSC_STOP_TIMEOUT=10s", "TALLY_OSC_FLUSH_TIMEOUT=4s")
	const n = 8000
	done := make(chan error, 1)
	go func() {
		for from := 0; from < n; from += 200 {
			if err := publishRawRetry(e.v.URL(), e.corpus, e.prefix, from, min(from+200, n)); err != nil {
				done <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		done <- nil
	}()
	testkit.WaitFor(t, 30*time.Second, "consumption under way", func() bool {
		return sum(e.c.metrics(t), "tally_collector_acked_total") >= 1000
	})
	code, took := e.c.p.stop(t, 30*time.Second)
	t.Logf("stopped under load in %s with exit %d", took.Round(time.Millisecond), code)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if took > 10*time.Second+2*time.Second {
		t.Errorf("stop took %s, budget 10 s", took)
	}
	out := e.c.p.out.String()
	for _, want := range []string{`"message":"inputs stopped`, `"message":"outbox closed"`, `"message":"stopped"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	if _, unacked := queueDepth(t, e.v, "tally-notifications"); unacked != 0 {
		t.Errorf("%d deliveries left unacknowledged after the stop", unacked)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.c.start(t)
	e.c.waitReady(t)
	e.waitDelivered(t, n, 2*time.Minute)
	e.checkExactSet(t, n)
	e.checkQueueEmpty(t)
	checkLedgerTotals(t, e.c, n)
	if code, _ := e.c.p.stop(t, 30*time.Second); code != 0 {
		t.Errorf("second stop: exit %d", code)
	}
}

// TestEndToEndSecondSignal: a second signal during the stop exits at once,
// and still loses nothing acknowledged.
func TestEndToEndSecondSignal(t *testing.T) {
	e := setupE2E(t, "TALLY_OSC_STOP_TIMEOUT=60s", "TALLY_OSC_FLUSH_TIMEOUT=50s")
	const n = 500
	e.api.fail(t, 503) // the flush cannot finish: the stop would take 50 s
	publishRaw(t, e.v, e.corpus, e.prefix, 0, n)
	testkit.WaitFor(t, time.Minute, "every delivery committed and acknowledged", func() bool {
		return sum(e.c.metrics(t), "tally_collector_acked_total") >= n
	})
	_ = e.c.p.cmd.Process.Signal(syscall.SIGTERM)
	testkit.WaitFor(t, 10*time.Second, "the stop under way", func() bool {
		return strings.Contains(e.c.p.out.String(), `"message":"inputs stopped`)
	})
	start := time.Now()
	code, _ := e.c.p.stop(t, 5*time.Second) // the second SIGTERM
	if code != 1 || time.Since(start) > 3*time.Second {
		t.Fatalf("second signal: exit %d after %s, want 1 at once", code, time.Since(start))
	}
	if !strings.Contains(e.c.p.out.String(), "second signal: exiting at once") {
		t.Error("the log does not say why it exited")
	}
	e.api.clearFail(t)
	e.c.start(t)
	e.waitDelivered(t, n, time.Minute)
	e.checkExactSet(t, n)
	checkLedgerTotals(t, e.c, n)
	if code, _ := e.c.p.stop(t, 30*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}

// TestEndToEndSenderMakesRoomForBacklog: the daemon hands its broker
// consumer to the sender, which holds back while the consumer drains a
// backlog and goes back to full speed once the queue is empty.
func TestEndToEndSenderMakesRoomForBacklog(t *testing.T) {
	e := setupE2E(t)
	// Stopped, the collector leaves its queue bound: what is published
	// meanwhile waits there, a backlog for the next start.
	if code, _ := e.c.p.stop(t, 30*time.Second); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	const n = 3000
	publishRaw(t, e.v, e.corpus, e.prefix, 0, n)
	e.c.start(t)
	e.c.waitReady(t)
	e.waitDelivered(t, n, 2*time.Minute)
	testkit.WaitFor(t, 30*time.Second, "the end of the backlog logged", func() bool {
		return strings.Contains(e.c.p.out.String(), `"message":"intake backlog over`)
	})
	if out := e.c.p.out.String(); !strings.Contains(out, `"message":"intake backlogged`) {
		t.Errorf("the sender did not log holding back:\n%s", tail(out, 4000))
	}
	m := e.c.metrics(t)
	if got := sum(m, "tally_collector_sender_yield_seconds_total"); got <= 0 {
		t.Errorf("tally_collector_sender_yield_seconds_total = %v, want > 0", got)
	}
	if got := sum(m, "tally_collector_sender_yielding"); got != 0 {
		t.Errorf("tally_collector_sender_yielding = %v after the backlog, want 0", got)
	}
	e.checkExactSet(t, n)
	e.checkQueueEmpty(t)
	checkLedgerTotals(t, e.c, n)
	if code, _ := e.c.p.stop(t, 30*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}
