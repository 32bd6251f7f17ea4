package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// BenchmarkEndToEnd drains one pre-filled queue twice on the real broker:
// first with a bare amqp091-go consumer that only acknowledges (multiple=true
// every 100 deliveries, the fastest way to drain), then with the collector
// (map in WebAssembly, outbox commit, ack, and the sender posting to the
// reference Reporting API). It prints both rates, their ratio, the
// collector's CPU seconds per 10 000 notifications and its resident memory,
// idle with the five built-in modules and an empty outbox, and at its peak.
//
// It does its work once, whatever b.N: run it with -benchtime 1x (make bench).
// TALLY_BENCH_N sets the number of notifications (default 50 000).
func BenchmarkEndToEnd(b *testing.B) {
	testkit.RequireBroker(b)
	n := 50000
	if v, err := strconv.Atoi(os.Getenv("TALLY_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	const prefetch = 100
	e := &e2e{b: buildBinaries(b), corpus: loadCorpus(b), prefix: randHex(4)}
	e.v = testkit.NewVhost(b)
	e.v.DeclareExchanges(b, false, e.corpus.exchanges()...)
	e.api = startAPI(b, e.b)
	profile := os.Getenv("TALLY_BENCH_CPUPROFILE") // a file: the collector's CPU profile of the drain
	e.c = newCollector(b, e.b, e.v, e.api.url(), e.api.token,
		"TALLY_OSC_EXCHANGES="+strings.Join(e.corpus.exchanges(), ","),
		"TALLY_OSC_PREFETCH="+strconv.Itoa(prefetch),
		"TALLY_OSC_LOG_LEVEL=warn",
		"TALLY_OSC_DEBUG_PPROF="+strconv.FormatBool(profile != ""))

	// 1. The collector idle: it declares and binds its queue; resident memory
	// with the built-in modules loaded and an empty outbox.
	e.c.start(b)
	e.c.waitReady(b)
	time.Sleep(2 * time.Second)
	idleRSS := procStatus(b, e.c.p.cmd.Process.Pid, "VmRSS")
	if code, _ := e.c.p.stop(b, 40*time.Second); code != 0 {
		b.Fatalf("stop: exit %d", code)
	}

	// 2. The bare consumer on the same queue, pre-filled.
	publishRaw(b, e.v, e.corpus, e.prefix, 0, n)
	waitQueued(b, e.v, n)
	b.ResetTimer()
	brokerPid := pidOf("beam.smp")
	bareBroker0, self0 := pidCPU(brokerPid), pidCPU(os.Getpid())
	bareStart := time.Now()
	bareRate := bareDrain(b, e.v, "tally-notifications", n, prefetch)
	bareWall := time.Since(bareStart).Seconds()
	bareBroker := (pidCPU(brokerPid) - bareBroker0) / bareWall
	bareSelf := (pidCPU(os.Getpid()) - self0) / bareWall

	// 3. The collector on the same queue, pre-filled again with other ids.
	publishRaw(b, e.v, e.corpus, e.prefix, n, 2*n)
	waitQueued(b, e.v, n)
	e.c.start(b)
	pid := e.c.p.cmd.Process.Pid
	profDone := make(chan struct{})
	if profile != "" {
		go func() {
			defer close(profDone)
			e.c.waitReady(b)
			cl := http.Client{Timeout: time.Minute}
			resp, err := cl.Get("http://" + e.c.httpAddr + "/debug/pprof/profile?seconds=10")
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
	var t0, t1 time.Time
	var acked0 float64
	var cpu0, cpuAcked, broker0, broker1, api0, api1 float64
	// Polled every 100 ms, uncompressed, so that watching costs the collector
	// little CPU.
	scrape := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	for {
		resp, err := scrape.Get("http://" + e.c.httpAddr + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			acked := sum(parseMetrics(string(body)), "tally_collector_acked_total")
			now := time.Now()
			if t0.IsZero() && acked > 0 {
				t0, acked0, cpu0 = now, acked, procCPU(b, pid)
				broker0, api0 = pidCPU(brokerPid), pidCPU(e.api.p.cmd.Process.Pid)
			}
			if acked >= float64(n) {
				t1 = now
				cpuAcked = procCPU(b, pid)
				broker1, api1 = pidCPU(brokerPid), pidCPU(e.api.p.cmd.Process.Pid)
				break
			}
		}
		if !e.c.p.running() {
			b.Fatalf("collector exited: %s", tail(e.c.p.out.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The commits of the drain, read before the sender catches up.
	var commits, commitSecs, yieldSecs float64
	if resp, err := scrape.Get("http://" + e.c.httpAddr + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := parseMetrics(string(body))
		commits = sum(m, "tally_collector_commit_duration_seconds_count")
		commitSecs = sum(m, "tally_collector_commit_duration_seconds_sum")
		yieldSecs = sum(m, "tally_collector_sender_yield_seconds_total")
	}
	e.waitDelivered(b, n, 5*time.Minute)
	tAPI := time.Now()
	cpu1 := procCPU(b, pid)
	peakRSS := procStatus(b, pid, "VmHWM")
	b.StopTimer()
	<-profDone
	if code, _ := e.c.p.stop(b, 40*time.Second); code != 0 {
		b.Errorf("stop: exit %d", code)
	}

	collRate := (float64(n) - acked0) / t1.Sub(t0).Seconds()
	cpuPer10k := (cpu1 - cpu0) / (float64(n) - acked0) * 10000
	fmt.Printf("\nend-to-end drain of %d notifications, PREFETCH=%d, classic queue, RabbitMQ on %s\n", n, prefetch, brokerAddr)
	fmt.Printf("  bare amqp091-go consumer (ack multiple=true every 100): %8.0f msg/s\n", bareRate)
	fmt.Printf("  collector (map, outbox commit, ack):                    %8.0f msg/s\n", collRate)
	fmt.Printf("  ratio collector / bare:                                 %8.2f\n", collRate/bareRate)
	fmt.Printf("  collector CPU per 10 000 notifications (incl. sending): %8.2f s\n", cpuPer10k)
	drain := t1.Sub(t0).Seconds()
	fmt.Printf("  cores busy during the bare drain:      broker %.2f, consumer %.2f\n", bareBroker, bareSelf)
	fmt.Printf("  cores busy during the collector drain: broker %.2f, collector %.2f, reporting API %.2f\n",
		(broker1-broker0)/drain, (cpuAcked-cpu0)/drain, (api1-api0)/drain)
	if commits > 0 {
		fmt.Printf("  outbox commits during the drain: %.0f, %.1f deliveries and %.2f ms each; sender held back %.1f s\n",
			commits, float64(n)/commits, commitSecs/commits*1000, yieldSecs)
	}
	fmt.Printf("  collector resident memory, idle (5 modules, empty outbox): %5.1f MiB\n", idleRSS/1024)
	fmt.Printf("  collector resident memory, peak:                        %8.1f MiB\n", peakRSS/1024)
	fmt.Printf("  all %d events at the Reporting API %.1f s after the drain began\n\n", n, tAPI.Sub(t0).Seconds())
	b.ReportMetric(bareRate, "bare_msg/s")
	b.ReportMetric(collRate, "collector_msg/s")
	b.ReportMetric(collRate/bareRate, "ratio")
	b.ReportMetric(cpuPer10k, "cpu_s/10k")
	b.ReportMetric(peakRSS/1024, "peak_rss_MiB")
	b.ReportMetric(idleRSS/1024, "idle_rss_MiB")
}

// bareDrain consumes n deliveries and only acknowledges them, multiple=true
// every 100; it returns deliveries per second.
func bareDrain(tb testing.TB, v *vhost, queue string, n, prefetch int) float64 {
	tb.Helper()
	ch, err := v.Conn(tb).Channel()
	if err != nil {
		tb.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	deliveries, err := ch.Consume(queue, "bench-bare", false, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	count := 0
	for d := range deliveries {
		count++
		if count%100 == 0 || count == n {
			if err := d.Ack(true); err != nil {
				tb.Fatal(err)
			}
		}
		if count == n {
			break
		}
	}
	elapsed := time.Since(start)
	if err := ch.Cancel("bench-bare", false); err != nil {
		tb.Fatal(err)
	}
	return float64(n) / elapsed.Seconds()
}

func waitQueued(tb testing.TB, v *vhost, n int) {
	tb.Helper()
	testkit.WaitFor(tb, time.Minute, fmt.Sprintf("%d messages ready in the queue", n), func() bool {
		r, _ := queueDepth(tb, v, "tally-notifications")
		return r >= n
	})
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

// pidOf is the pid of the oldest process whose command name is comm, or 0.
func pidOf(comm string) int {
	entries, _ := os.ReadDir("/proc")
	best, bestStart := 0, -1.0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		open, closeAt := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closeAt < open || s[open+1:closeAt] != comm {
			continue
		}
		f := strings.Fields(s[closeAt+2:])
		start, _ := strconv.ParseFloat(f[19], 64)
		if bestStart < 0 || start < bestStart {
			best, bestStart = pid, start
		}
	}
	return best
}

// pidCPU is procCPU without failing: 0 when pid is unknown or gone.
func pidCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	v, _ := readCPU(pid)
	return v
}

// procStatus reads a kB field of /proc/<pid>/status.
func procStatus(tb testing.TB, pid int, field string) float64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	tb.Fatalf("%s not in /proc/%d/status", field, pid)
	return 0
}
