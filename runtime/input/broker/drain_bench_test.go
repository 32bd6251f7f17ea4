package broker

import (
	"context"
	"fmt"
	"math"
	"os"
	goruntime "runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/input"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// BenchmarkDrain drains one pre-filled queue twice, as the end-to-end
// benchmark does but without sender or Reporting API: first with a bare
// consumer that only acknowledges (multiple=true every 100), then with the
// consumer (the real pipeline, the real outbox with its synced commits, the
// acknowledgements), both at PREFETCH=100. It reports both rates, their ratio
// and the mean deliveries per commit. The consumer maps with a small Go mapper
// (mapper=go) or with the built-in nova module in wazero, watched as in the
// daemon (mapper=wasm; needs make wasm): the
// difference between the two is what mapping in the sandbox costs the drain.
// Each does its work once, whatever b.N: run it with -benchtime 1x.
// TALLY_BENCH_N sets the number of notifications (default 20 000).
// TALLY_BENCH_GUARD=always runs nova guarded; TALLY_BENCH_CALL_TIMEOUT
// lengthens a call's deadline; TALLY_BENCH_HANDOVER=1 runs the watched calls
// with the hand-over of an engine without the daemon's overrun hook.
//
// Beside the rates it reports what each delivery costs in hand-offs: heap
// allocations per delivery (the process's, for the bare drain and for the
// consumer's), and, with TALLY_BENCH_TRACE=1, goroutine switches and blocking
// waits per delivery from an execution trace of the consumer's drain
// (handoffs_test.go reads `go tool trace -d=parsed`), the waits listed by
// the goroutine that waited and its reason, and the same for the bare
// drain (amqp091-go's own waits, which the collector cannot avoid). TALLY_BENCH_ONLY=bare or
// TALLY_BENCH_ONLY=consumer runs one of the two drains, for counting
// instructions with callgrind (docs/performance.md, "Instructions per stage").
func BenchmarkDrain(b *testing.B) {
	b.Run("mapper=go", func(b *testing.B) { benchDrain(b, newTestProcessor(b)) })
	b.Run("mapper=wasm", func(b *testing.B) { benchDrain(b, novaProcessor(b)) })
}

// novaProcessor is the real pipeline with the built-in nova module, loaded as
// the daemon loads it.
func novaProcessor(b *testing.B) input.Processor {
	wasm := testkit.BuiltModule(b, "mappers/dist/nova.wasm")
	ctx := context.Background()
	// TALLY_BENCH_CALL_TIMEOUT lengthens a call's deadline, as in package
	// mappers: under valgrind a call past the default deadline would be
	// abandoned and the module would run guarded from then on.
	timeout, _ := time.ParseDuration(os.Getenv("TALLY_BENCH_CALL_TIMEOUT"))
	cfg := runtime.Config{CacheDir: testkit.CacheDir(b), CallTimeout: timeout, Logger: zerolog.Nop()}
	// As the daemon's engine: a watched call that overruns ends the process
	// (status 70, as the daemon's), so watched calls run on the worker
	// without a hand-over. TALLY_BENCH_HANDOVER=1 leaves the hook out, as
	// an embedder without it: each watched call is handed over to its
	// instance's goroutine.
	if os.Getenv("TALLY_BENCH_HANDOVER") != "1" {
		cfg.OnWatchedOverrun = func(module string) {
			fmt.Fprintf(os.Stderr, "a watched call of %s overran its deadline: exiting with status 70, as the daemon does (TALLY_BENCH_CALL_TIMEOUT lengthens the deadline)\n", module)
			os.Exit(70)
		}
		cfg.OverrunEndsProcess = true
	}
	eng, err := runtime.NewEngine(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = eng.Close(ctx) })
	// Watched, as the daemon runs its built-in modules with
	// MAPPER_METERED=false (TALLY_BENCH_GUARD=always: guarded, as
	// MAPPER_BUILTIN_GUARD=always).
	guard := runtime.GuardWatched
	if os.Getenv("TALLY_BENCH_GUARD") == "always" {
		guard = runtime.GuardAlways
	}
	mod, err := eng.Load(ctx, "builtin:nova.wasm", wasm, runtime.WithGuard(guard))
	if err != nil {
		b.Fatal(err)
	}
	p, err := pipeline.New(pipeline.Options{Router: pipeline.Chain{mod}, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func benchDrain(b *testing.B, proc input.Processor) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("TALLY_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	const prefetch = 100
	v, _ := classicQueueVhost(b)
	body := readTestdata(b, "wire/v2_nova_001.body")
	if r := proc.Process(context.Background(), pipeline.Message{Body: body, Exchange: "nova", RoutingKey: "notifications.info"}); r.Outcome != pipeline.Mapped {
		b.Fatalf("the benchmark's notification is not mapped: %v %s", r.Outcome, r.Reason)
	}

	b.ResetTimer()
	bare, bareAllocs := math.NaN(), math.NaN()
	only := os.Getenv("TALLY_BENCH_ONLY")
	if only != "consumer" {
		fill(b, v, body, n)
		tr := startBenchTrace(b)
		bare, bareAllocs = bareDrainRate(b, v, n, prefetch)
		_ = tr.stop()
		if tr.path != "" {
			h := readHandoffs(b, tr.path)
			fmt.Print("bare consumer: ", h.report(float64(n)))
			b.ReportMetric(float64(h.waits())/float64(n), "bare_waits/delivery")
		}
	}
	if only == "bare" {
		fmt.Printf("\nbare drain of %d notifications, PREFETCH=%d: %.0f msg/s, %.1f heap allocations per delivery\n", n, prefetch, bare, bareAllocs)
		b.ReportMetric(bare, "bare_msg/s")
		return
	}

	fill(b, v, body, n)
	ob := openOutbox(b, b.TempDir(), 1<<40)
	opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
	opts.Prefetch = prefetch
	// Group-commit knobs, for comparing policies: TALLY_BENCH_BATCH_MAX (a
	// count) and TALLY_BENCH_LINGER (a duration; negative: none).
	if v, err := strconv.Atoi(os.Getenv("TALLY_BENCH_BATCH_MAX")); err == nil && v > 0 {
		opts.BatchMax = v
	}
	if v, err := time.ParseDuration(os.Getenv("TALLY_BENCH_LINGER")); err == nil {
		opts.CommitLinger = v
	}
	c := newConsumer(b, proc, ob, opts)
	// The polls of the acknowledged count allocate too: counted, and taken
	// off the consumer's allocations.
	polls := 0
	acked := func() float64 { polls++; return testutil.ToFloat64(c.m.acked) }
	perPoll := testing.AllocsPerRun(100, func() { testutil.ToFloat64(c.m.acked) })
	r := startConsumer(b, c)
	var t0 time.Time
	waitForTight(b, time.Minute, func() bool { return acked() > 0 }, &t0)
	// Counted from the first acknowledgement on, as the rate: what the
	// first delivery sets up once (an instance, the module's compiled
	// variant) is not a delivery's cost.
	acked0 := testutil.ToFloat64(c.m.acked)
	m0, polls0 := mallocs(), polls
	tr := startBenchTrace(b)
	var t1 time.Time
	waitForTight(b, 10*time.Minute, func() bool { return acked() >= float64(n) }, &t1)
	_ = tr.stop()
	measured := float64(n) - acked0
	allocs := (float64(mallocs()-m0) - float64(polls-polls0)*perPoll) / measured
	b.StopTimer()
	r.stop()
	rate := measured / t1.Sub(t0).Seconds()
	var m dto.Metric
	if err := c.m.commitSeconds.Write(&m); err != nil {
		b.Fatal(err)
	}
	commits := m.GetHistogram().GetSampleCount()
	meanCommit := m.GetHistogram().GetSampleSum() / float64(commits)
	fmt.Printf("\ndrain of %d notifications, PREFETCH=%d: bare %.0f msg/s, consumer %.0f msg/s, ratio %.2f, "+
		"%.1f deliveries per commit, commit %.2f ms mean\n",
		n, prefetch, bare, rate, rate/bare, float64(n)/float64(commits), meanCommit*1000)
	fmt.Printf("heap allocations per delivery, the whole process: bare %.1f, consumer %.1f\n", bareAllocs, allocs)
	b.ReportMetric(bare, "bare_msg/s")
	b.ReportMetric(rate, "consumer_msg/s")
	b.ReportMetric(rate/bare, "ratio")
	b.ReportMetric(float64(n)/float64(commits), "deliveries/commit")
	b.ReportMetric(bareAllocs, "bare_allocs/delivery")
	b.ReportMetric(allocs, "allocs/delivery")
	if tr.path != "" {
		h := readHandoffs(b, tr.path)
		fmt.Print(h.report(measured))
		b.ReportMetric(float64(h.switches)/measured, "switches/delivery")
		b.ReportMetric(float64(h.waits())/measured, "waits/delivery")
	}
}

func mallocs() uint64 {
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.Mallocs
}

// fill publishes n copies of body straight to the queue and waits for the
// broker's confirmations.
func fill(b testing.TB, v *vhost, body []byte, n int) {
	b.Helper()
	ch := v.Channel(b)
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	var last *amqp.DeferredConfirmation
	for i := 0; i < n; i++ {
		var err error
		last, err = ch.PublishWithDeferredConfirm("", defaultQueue, false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		if err != nil {
			b.Fatal(err)
		}
	}
	if ok, err := last.WaitContext(context.Background()); !ok || err != nil {
		b.Fatalf("publish not confirmed: %v", err)
	}
	testkit.WaitFor(b, time.Minute, "queue filled", func() bool {
		ready, _ := v.QueueState(b, defaultQueue)
		return ready >= n
	})
}

// bareDrainRate drains n notifications with a consumer that only
// acknowledges, and returns its rate and the process's heap allocations per
// delivery meanwhile.
func bareDrainRate(b *testing.B, v *vhost, n, prefetch int) (rate, allocs float64) {
	b.Helper()
	ch := v.Channel(b)
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	start, m0 := time.Now(), mallocs()
	ds, err := ch.Consume(defaultQueue, "bench-bare", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	count := 0
	for d := range ds {
		count++
		if count%100 == 0 || count == n {
			if err := d.Ack(true); err != nil {
				b.Fatal(err)
			}
		}
		if count == n {
			break
		}
	}
	rate = float64(n) / time.Since(start).Seconds()
	allocs = float64(mallocs()-m0) / float64(n)
	if err := ch.Cancel("bench-bare", false); err != nil {
		b.Fatal(err)
	}
	return rate, allocs
}

// waitForTight polls every millisecond and records when cond became true.
func waitForTight(b *testing.B, d time.Duration, cond func() bool, at *time.Time) {
	b.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
	*at = time.Now()
}
