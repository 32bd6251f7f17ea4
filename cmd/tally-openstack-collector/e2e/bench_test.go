package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// BenchmarkEndToEnd drains pre-filled queues on real brokers, side by side
// in one run: for each queue, a bare amqp091-go consumer that only
// acknowledges (multiple=true every 100 deliveries, the fastest way to
// drain), then the collector (map in WebAssembly, outbox commit, ack, and the
// sender posting to the reference Reporting API), both at PREFETCH=100, on
// the same queue refilled with the same notifications under other ids.
//
// The queues (TALLY_BENCH_QUEUES, default "classic,quorum"):
//   - classic: a classic queue on the machine's RabbitMQ (127.0.0.1:5672), in
//     a virtual host of its own, the collector set to QUEUE_TYPE=classic;
//   - quorum: the default quorum queue (x-delivery-limit -1) on the three-node
//     RabbitMQ 4 cluster of .ci/rabbitmq4-cluster, in a virtual host of its
//     own. The collector consumes from node 1 only and declares the queue
//     there, so its leader is on node 1; the notifications are published,
//     with confirms, to node 1 too.
//
// Each drain is measured over a window: the bare consumer's from the moment
// it is told to start to its last acknowledgement; the collector's from the
// first to the last acknowledgement it counts (tally_collector_acked_total,
// polled every 100 ms). Over that window: the rate; the process's CPU
// (user+system from /proc/PID/stat, % of one core) and that CPU divided by
// the notifications; the whole machine's busy time from /proc/stat (% of
// NumCPU×100); the broker's CPU (its nodes' Erlang VMs, see beamPIDs: the
// one whose root is "/" for the classic queue, the sum of the three nodes'
// whose root is the cluster's root for the quorum queue). The bare consumer runs as a separate
// small process (this test binary, started again with
// TALLY_BENCH_BARE_CONSUMER set, which only consumes), so that its CPU is
// read from /proc exactly as the collector's is, and the benchmark's own
// sampling stays out of it.
//
// It prints, for each queue, a Markdown table of the two drains, the ratio
// collector/bare, the collector's outbox commits, and its resident memory:
// idle (VmRSS two seconds after /readyz answered, with the built-in modules
// and an empty outbox) and peak (VmHWM at the end of a run).
//
// It does its work once, whatever b.N: run it with -benchtime 1x (make
// bench-e2e). TALLY_BENCH_N sets the number of notifications per drain
// (default 50 000), TALLY_BENCH_RUNS the runs per queue (default 1; with
// more, the table shows the median and the range), TALLY_BENCH_CPUPROFILE a
// file for a 10 s CPU profile of the collector's first drain (with both
// queues, "-classic" and "-quorum" are appended to the name).
func BenchmarkEndToEnd(b *testing.B) {
	n := benchEnvInt(b, "TALLY_BENCH_N", 50000)
	runs := benchEnvInt(b, "TALLY_BENCH_RUNS", 1)
	queues := []string{"classic", "quorum"}
	if v := os.Getenv("TALLY_BENCH_QUEUES"); v != "" {
		queues = strings.Split(v, ",")
	}
	for _, kind := range queues {
		if kind != "classic" && kind != "quorum" {
			b.Fatalf("TALLY_BENCH_QUEUES: unknown queue type %q (classic, quorum)", kind)
		}
	}
	for _, kind := range queues {
		b.Run(kind, func(b *testing.B) {
			profile := os.Getenv("TALLY_BENCH_CPUPROFILE")
			if profile != "" && len(queues) > 1 {
				profile += "-" + kind
			}
			var q *benchQueue
			if kind == "classic" {
				q = classicBenchQueue(b)
			} else {
				q = quorumBenchQueue(b)
			}
			q.bench(b, n, runs, profile)
		})
	}
}

const benchPrefetch = 100

func benchEnvInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	i, err := strconv.Atoi(v)
	if err != nil || i <= 0 {
		tb.Fatalf("%s=%q: want a positive number", name, v)
	}
	return i
}

// benchQueue is one queue BenchmarkEndToEnd drains, on its broker.
type benchQueue struct {
	kind    string // classic or quorum
	where   string // the broker, for the heading
	amqpURL string // where the bare consumer consumes and the notifications are published
	corpus  *corpus
	prefix  string
	api     *api
	c       *collector
	queued  func() int   // messages in the queue
	brokers func() []int // the broker's beam.smp processes
	note    func() string
	pprof   string // the collector's profiler address (DEBUG_PPROF_ADDR)
}

// classicBenchQueue is a classic queue on the machine's RabbitMQ.
func classicBenchQueue(b *testing.B) *benchQueue {
	testkit.RequireBroker(b)
	bn := buildBinaries(b)
	q := &benchQueue{kind: "classic", corpus: loadCorpus(b), prefix: randHex(4)}
	v := testkit.NewVhost(b)
	v.DeclareExchanges(b, false, q.corpus.exchanges()...)
	q.amqpURL = v.URL()
	q.where = "RabbitMQ " + brokerVersion(b, q.amqpURL) + " on " + brokerAddr
	q.api = startAPI(b, bn)
	q.c = newCollector(b, bn, v, q.api.url(), q.api.token, q.collectorEnv(b)...)
	q.queued = func() int {
		r, _ := queueDepth(b, v, clusterQueueName)
		return r
	}
	q.brokers = func() []int {
		pids := beamPIDs("/")
		if len(pids) != 1 {
			b.Fatalf("%d RabbitMQ nodes with root /, want the machine's alone", len(pids))
		}
		return pids
	}
	q.note = func() string { return "" }
	return q
}

// quorumBenchQueue is the collector's default quorum queue on the RabbitMQ 4
// cluster, consumed from and published to on node 1.
func quorumBenchQueue(b *testing.B) *benchQueue {
	bn := buildBinaries(b)
	q := &benchQueue{kind: "quorum", corpus: loadCorpus(b), prefix: randHex(4)}
	v := newClusterVhost(b)
	v.declareExchanges(b, q.corpus.exchanges()...)
	q.amqpURL = v.nodeURL(1)
	q.where = fmt.Sprintf("RabbitMQ %s, three-node cluster, node 1 at %s", brokerVersion(b, q.amqpURL), v.hosts[0])
	q.api = startAPI(b, bn)
	q.c = newCollectorAt(b, bn, "rabbit://guest:guest@"+v.hosts[0]+"/"+v.name, q.api.url(), q.api.token, q.collectorEnv(b)...)
	q.queued = func() int {
		cq, _ := v.queue(b, clusterQueueName)
		return cq.Messages
	}
	root := testkit.RabbitMQ4Root(b)
	q.brokers = func() []int {
		pids := beamPIDs(root)
		if len(pids) != 3 {
			b.Fatalf("%d RabbitMQ nodes with root %s, want the cluster's three", len(pids), root)
		}
		return pids
	}
	q.note = func() string {
		cq, _ := v.queue(b, clusterQueueName)
		if cq.Type != "quorum" || cq.leaderNode() != 1 {
			b.Fatalf("queue %s: type %q, leader %q; want a quorum queue led by node 1", clusterQueueName, cq.Type, cq.Leader)
		}
		d, _ := cq.argument("x-delivery-limit")
		return fmt.Sprintf("queue type %s, x-delivery-limit %v, leader %s, %d members", cq.Type, d, cq.Leader, len(cq.Members))
	}
	return q
}

func (q *benchQueue) collectorEnv(tb testing.TB) []string {
	q.pprof = testkit.FreeAddr(tb)
	return []string{
		"TALLY_OSC_EXCHANGES=" + strings.Join(q.corpus.exchanges(), ","),
		"TALLY_OSC_PREFETCH=" + strconv.Itoa(benchPrefetch),
		"TALLY_OSC_LOG_LEVEL=warn",
		"TALLY_OSC_DEBUG_PPROF=true",
		"TALLY_OSC_DEBUG_PPROF_ADDR=" + q.pprof,
	}
}

// brokerVersion is the version the broker announces to a client.
func brokerVersion(tb testing.TB, url string) string {
	tb.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		tb.Fatalf("dial %s: %v", url, err)
	}
	defer c.Close()
	v, _ := c.Properties["version"].(string)
	return v
}

// benchRun is what one run measured: the two drains, and the collector's
// outbox commits, memory and delivery to the API.
type benchRun struct {
	bare, coll       drain
	commits          float64 // outbox commits during the collector's drain
	commitSecs       float64 // their total time
	yieldSecs        float64 // how long the sender held back
	cpuWithSendUs    float64 // collector CPU per notification up to the last event at the API
	apiSecs          float64 // from the first acknowledgement to the last event at the API
	peakRSSKiB       float64
	loadBefore, load string
}

// bench measures the queue's idle collector, then runs times a bare drain
// and a collector drain, and prints the table.
func (q *benchQueue) bench(b *testing.B, n, runs int, profile string) {
	// The collector idle: it declares and binds its queue; resident memory
	// with the built-in modules loaded and an empty outbox.
	q.c.start(b)
	q.c.waitReady(b)
	time.Sleep(2 * time.Second)
	idleRSS := procStatus(b, q.c.p.cmd.Process.Pid, "VmRSS")
	modules := len(q.c.status(b).Modules)
	if code, _ := q.c.p.stop(b, 40*time.Second); code != 0 {
		b.Fatalf("stop: exit %d", code)
	}
	note := q.note()

	b.ResetTimer()
	var rs []benchRun
	for r := 0; r < runs; r++ {
		var br benchRun
		br.loadBefore = loadAvg()
		// The bare consumer on the pre-filled queue.
		from := 2 * n * r
		q.fill(b, from, from+n)
		br.bare = bareDrainProcess(b, q.amqpURL, clusterQueueName, n, benchPrefetch, q.brokers())
		// The collector on the same queue, filled again with other ids.
		q.fill(b, from+n, from+2*n)
		p := ""
		if r == 0 {
			p = profile
		}
		q.collectorDrain(b, &br, n, (r+1)*n, p)
		br.load = loadAvg()
		rs = append(rs, br)
	}
	b.StopTimer()
	q.print(b, n, rs, idleRSS, modules, note)
}

// fill publishes notifications [from, to) and waits until the queue holds
// them.
func (q *benchQueue) fill(tb testing.TB, from, to int) {
	tb.Helper()
	if err := publishRawRetry(q.amqpURL, q.corpus, q.prefix, from, to); err != nil {
		tb.Fatal(err)
	}
	testkit.WaitFor(tb, time.Minute, fmt.Sprintf("%d messages ready in the queue", to-from), func() bool {
		return q.queued() >= to-from
	})
}

// usage is a sample of the CPU time of a process, of the broker and of the
// machine.
type usage struct {
	at          time.Time
	proc        float64 // CPU seconds of the process measured
	broker      float64 // CPU seconds of the broker's processes together
	busy, total float64 // the machine's busy and total time from /proc/stat, in USER_HZ
}

func sample(tb testing.TB, pid int, brokers []int) usage {
	tb.Helper()
	u := usage{proc: procCPU(tb, pid)}
	for _, p := range brokers {
		u.broker += procCPU(tb, p)
	}
	u.busy, u.total = machineCPU(tb)
	u.at = time.Now()
	return u
}

// drain is one drain as measured between two samples.
type drain struct {
	rate       float64 // notifications per second
	cpuPct     float64 // the process's CPU, % of one core
	cpuPerUs   float64 // the process's CPU per notification, µs
	machinePct float64 // the machine's busy time, % of NumCPU×100
	brokerPct  float64 // the broker's CPU, % of one core
}

func measure(u0, u1 usage, n float64) drain {
	secs := u1.at.Sub(u0.at).Seconds()
	return drain{
		rate:       n / secs,
		cpuPct:     (u1.proc - u0.proc) / secs * 100,
		cpuPerUs:   (u1.proc - u0.proc) / n * 1e6,
		machinePct: (u1.busy - u0.busy) / (u1.total - u0.total) * float64(runtime.NumCPU()) * 100,
		brokerPct:  (u1.broker - u0.broker) / secs * 100,
	}
}

// The bare consumer's process: this test binary started again with
// bareConsumerEnv set runs bareConsumerMain from TestMain instead of the
// tests.
const bareConsumerEnv = "TALLY_BENCH_BARE_CONSUMER"

// bareDrainProcess runs the bare consumer as a child process and measures
// its drain of n deliveries of queue: the child connects and sets its
// prefetch, says "ready", and starts consuming when told; it says "done"
// after its last acknowledgement and exits when its standard input closes.
func bareDrainProcess(tb testing.TB, url, queue string, n, prefetch int, brokers []int) drain {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), bareConsumerEnv+"=1", "TALLY_BENCH_BARE_URL="+url,
		"TALLY_BENCH_BARE_QUEUE="+queue, "TALLY_BENCH_BARE_N="+strconv.Itoa(n),
		"TALLY_BENCH_BARE_PREFETCH="+strconv.Itoa(prefetch))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start the bare consumer: %v", err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	fail := func(format string, args ...any) {
		tb.Helper()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		tb.Fatalf("bare consumer: %s\n%s", fmt.Sprintf(format, args...), stderr.String())
	}
	expect := func(want string, limit time.Duration) {
		tb.Helper()
		select {
		case l, ok := <-lines:
			if !ok || l != want {
				fail("said %q (open %v), want %q", l, ok, want)
			}
		case <-time.After(limit):
			fail("did not say %q within %s", want, limit)
		}
	}
	expect("ready", time.Minute)
	pid := cmd.Process.Pid
	u0 := sample(tb, pid, brokers)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		fail("%v", err)
	}
	expect("done", 5*time.Minute)
	u1 := sample(tb, pid, brokers)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		tb.Fatalf("bare consumer: %v\n%s", err, stderr.String())
	}
	return measure(u0, u1, float64(n))
}

// bareConsumerMain is the bare consumer's process (see bareDrainProcess):
// it consumes n deliveries and only acknowledges them, multiple=true every
// 100 and at the last.
func bareConsumerMain() int {
	if err := bareConsume(os.Getenv("TALLY_BENCH_BARE_URL"), os.Getenv("TALLY_BENCH_BARE_QUEUE"),
		os.Getenv("TALLY_BENCH_BARE_N"), os.Getenv("TALLY_BENCH_BARE_PREFETCH")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func bareConsume(url, queue, nStr, prefetchStr string) error {
	n, err := strconv.Atoi(nStr)
	if err != nil {
		return fmt.Errorf("n: %w", err)
	}
	prefetch, err := strconv.Atoi(prefetchStr)
	if err != nil {
		return fmt.Errorf("prefetch: %w", err)
	}
	conn, ch, err := dialChannel(url, "tally-bench-bare")
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if l, err := in.ReadString('\n'); err != nil || l != "go\n" {
		return fmt.Errorf("waiting for go: %q %w", l, err)
	}
	deliveries, err := ch.Consume(queue, "bench-bare", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	count := 0
	for d := range deliveries {
		count++
		if count%100 == 0 || count == n {
			if err := d.Ack(true); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
		}
		if count == n {
			break
		}
	}
	if count < n {
		return fmt.Errorf("the deliveries ended after %d of %d", count, n)
	}
	fmt.Println("done")
	if err := ch.Cancel("bench-bare", false); err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	_, _ = io.Copy(io.Discard, in) // until the benchmark closes standard input
	return nil
}

// collectorDrain starts the collector on the filled queue and measures its
// drain of n notifications; total is the number of events the API must hold
// at the end of this run.
func (q *benchQueue) collectorDrain(b *testing.B, br *benchRun, n, total int, profile string) {
	brokers := q.brokers()
	q.c.start(b)
	pid := q.c.p.cmd.Process.Pid
	profDone := make(chan struct{})
	if profile != "" {
		go func() {
			defer close(profDone)
			testkit.WaitFor(b, time.Minute, "collector up", func() bool {
				_, _, err := q.c.get("/livez")
				return err == nil
			})
			cl := http.Client{Timeout: time.Minute}
			resp, err := cl.Get("http://" + q.pprof + "/debug/pprof/profile?seconds=10")
			if err != nil {
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			_ = os.WriteFile(profile, body, 0o644)
		}()
	} else {
		close(profDone)
	}
	var u0, u1 usage
	var acked0 float64
	// Polled every 100 ms, uncompressed, so that watching costs the collector
	// little CPU.
	scrape := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	for {
		resp, err := scrape.Get("http://" + q.c.httpAddr + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			acked := sum(parseMetrics(string(body)), "tally_collector_acked_total")
			if u0.at.IsZero() && acked > 0 {
				u0, acked0 = sample(b, pid, brokers), acked
			}
			if acked >= float64(n) {
				u1 = sample(b, pid, brokers)
				break
			}
		}
		if !q.c.p.running() {
			b.Fatalf("collector exited: %s", tail(q.c.p.out.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	br.coll = measure(u0, u1, float64(n)-acked0)
	// The commits of the drain, read before the sender catches up.
	m := q.c.metrics(b)
	br.commits = sum(m, "tally_collector_commit_duration_seconds_count")
	br.commitSecs = sum(m, "tally_collector_commit_duration_seconds_sum")
	br.yieldSecs = sum(m, "tally_collector_sender_yield_seconds_total")
	waitAccepted(b, q.api, total, 5*time.Minute)
	br.apiSecs = time.Since(u0.at).Seconds()
	br.cpuWithSendUs = (procCPU(b, pid) - u0.proc) / (float64(n) - acked0) * 1e6
	br.peakRSSKiB = procStatus(b, pid, "VmHWM")
	<-profDone
	if code, _ := q.c.p.stop(b, 40*time.Second); code != 0 {
		b.Errorf("stop: exit %d", code)
	}
}

// print writes the table of the runs, with medians and ranges when there
// are several, and reports the medians as the benchmark's metrics.
func (q *benchQueue) print(b *testing.B, n int, rs []benchRun, idleRSS float64, modules int, note string) {
	col := func(f func(benchRun) float64) []float64 {
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		return v
	}
	var w strings.Builder
	fmt.Fprintf(&w, "\nend-to-end drain, %s queue, %s: %d notifications per drain, PREFETCH=%d, %d run(s)",
		q.kind, q.where, n, benchPrefetch, len(rs))
	if len(rs) > 1 {
		w.WriteString(", median (range)")
	}
	w.WriteString("\n")
	if note != "" {
		fmt.Fprintf(&w, "%s\n", note)
	}
	fmt.Fprintf(&w, "\n| measure | bare consumer | collector |\n| --- | --- | --- |\n")
	row := func(label string, f func(drain) float64, digits int) {
		fmt.Fprintf(&w, "| %s | %s | %s |\n", label,
			spread(col(func(r benchRun) float64 { return f(r.bare) }), digits),
			spread(col(func(r benchRun) float64 { return f(r.coll) }), digits))
	}
	row("rate, msg/s", func(d drain) float64 { return d.rate }, 0)
	row("process CPU, % of one core", func(d drain) float64 { return d.cpuPct }, 0)
	row("CPU per notification, µs", func(d drain) float64 { return d.cpuPerUs }, 1)
	row(fmt.Sprintf("whole machine busy, %% of %d (from /proc/stat)", runtime.NumCPU()*100), func(d drain) float64 { return d.machinePct }, 0)
	row("broker CPU, % of one core", func(d drain) float64 { return d.brokerPct }, 0)
	w.WriteString("\n")
	ratio := col(func(r benchRun) float64 { return r.coll.rate / r.bare.rate })
	cpuRatio := col(func(r benchRun) float64 { return r.coll.cpuPerUs / r.bare.cpuPerUs })
	fmt.Fprintf(&w, "ratio collector / bare: rate %s, CPU per notification %s\n", spread(ratio, 2), spread(cpuRatio, 2))
	fmt.Fprintf(&w, "outbox commits during the collector's drain: %s, %s deliveries and %s ms each; sender held back %s s\n",
		spread(col(func(r benchRun) float64 { return r.commits }), 0),
		spread(col(func(r benchRun) float64 { return float64(n) / r.commits }), 1),
		spread(col(func(r benchRun) float64 { return r.commitSecs / r.commits * 1000 }), 2),
		spread(col(func(r benchRun) float64 { return r.yieldSecs }), 1))
	fmt.Fprintf(&w, "collector CPU per notification up to the last event at the Reporting API: %s µs; all there %s s after the drain began\n",
		spread(col(func(r benchRun) float64 { return r.cpuWithSendUs }), 1),
		spread(col(func(r benchRun) float64 { return r.apiSecs }), 1))
	fmt.Fprintf(&w, "collector resident memory: idle (%d built-in modules, empty outbox) %.1f MiB; peak of the draining process %s MiB\n",
		modules, idleRSS/1024, spread(col(func(r benchRun) float64 { return r.peakRSSKiB / 1024 }), 1))
	for i, r := range rs {
		fmt.Fprintf(&w, "run %d: load average %s before, %s after\n", i+1, r.loadBefore, r.load)
	}
	fmt.Println(w.String())

	b.ReportMetric(median(col(func(r benchRun) float64 { return r.bare.rate })), "bare_msg/s")
	b.ReportMetric(median(col(func(r benchRun) float64 { return r.coll.rate })), "collector_msg/s")
	b.ReportMetric(median(ratio), "ratio")
	b.ReportMetric(median(col(func(r benchRun) float64 { return r.bare.cpuPerUs })), "bare_cpu_µs/msg")
	b.ReportMetric(median(col(func(r benchRun) float64 { return r.coll.cpuPerUs })), "collector_cpu_µs/msg")
	b.ReportMetric(median(col(func(r benchRun) float64 { return r.peakRSSKiB / 1024 })), "peak_rss_MiB")
	b.ReportMetric(idleRSS/1024, "idle_rss_MiB")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is one figure, or the median and the range of several.
func spread(v []float64, digits int) string {
	if len(v) == 1 {
		return number(v[0], digits)
	}
	return fmt.Sprintf("%s (%s–%s)", number(median(v), digits), number(slices.Min(v), digits), number(slices.Max(v), digits))
}

// number formats with thousands separators.
func number(x float64, digits int) string {
	s := strconv.FormatFloat(x, 'f', digits, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	var out []byte
	for i := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, intPart[i])
	}
	if neg {
		out = append([]byte{'-'}, out...)
	}
	if frac != "" {
		return string(out) + "." + frac
	}
	return string(out)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

// machineCPU answers the busy (all but idle and iowait) and total time of
// every CPU from /proc/stat, in USER_HZ.
func machineCPU(tb testing.TB) (busy, total float64) {
	tb.Helper()
	b := testkit.ReadFile(tb, "/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		tb.Fatalf("/proc/stat begins %q", line)
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice,
	// already counted in user and nice]
	for i, s := range f[1:9] {
		v, _ := strconv.ParseFloat(s, 64)
		total += v
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy, total
}

// procCPU is the user+system CPU seconds of pid so far.
func procCPU(tb testing.TB, pid int) float64 {
	tb.Helper()
	v, err := readCPU(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// readCPU reads the user+system CPU seconds of pid from /proc/<pid>/stat.
func readCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which is in parentheses).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

// beamPIDs lists the RabbitMQ nodes, Erlang VMs (command name beam.smp)
// started with "-s rabbit boot", whose root directory is root: "/" for the
// machine's RabbitMQ, the cluster's root for the nodes of
// .ci/rabbitmq4-cluster, which run chrooted into it. The VMs of rabbitmqctl
// runs, which come and go, are left out.
func beamPIDs(root string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "beam.smp" {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("\x00-s\x00rabbit\x00boot\x00")) {
			continue
		}
		if r, err := os.Readlink(filepath.Join("/proc", e.Name(), "root")); err == nil && r == root {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStatus reads a kB field of /proc/<pid>/status.
func procStatus(tb testing.TB, pid int, field string) float64 {
	tb.Helper()
	b := testkit.ReadFile(tb, fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	tb.Fatalf("%s not in /proc/%d/status", field, pid)
	return 0
}
