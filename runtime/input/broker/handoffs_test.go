package broker

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/trace"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// TestHandoffsPerDelivery drains a queue with an execution trace running and
// counts the waits of the consumer's own goroutines: the session wakes once
// or a few times per commit group (to cut it, to acknowledge it, when a
// short group's linger ends), not for each delivery, and a worker waits at
// most once for each delivery it takes from the client library. The bounds
// are counts, whatever the machine's load: before the workers took
// deliveries themselves, the session woke about once per delivery.
func TestHandoffsPerDelivery(t *testing.T) {
	t.Parallel() // its own virtual host
	const n, prefetch = 3000, 100
	v, _ := classicQueueVhost(t)
	fill(t, v, readTestdata(t, "wire/v2_nova_001.body"), n)
	opts := testOptions(v, &testkit.SyncBuffer{}, "nova")
	opts.Prefetch = prefetch
	c := newConsumer(t, newTestProcessor(t), openOutbox(t, t.TempDir(), 1<<40), opts)
	r := startConsumer(t, c)
	acked := func() float64 { return testutil.ToFloat64(c.m.acked) }
	testkit.WaitFor(t, time.Minute, "first acknowledgement", func() bool { return acked() > 0 })
	acked0 := acked()
	tr := startTrace(t)
	t.Cleanup(func() { _ = tr.stop() }) // when the drain fails; a second stop does nothing
	testkit.WaitFor(t, 5*time.Minute, "queue drained", func() bool { return acked() >= n })
	if err := tr.stop(); err != nil {
		t.Fatal(err)
	}
	r.stop()
	measured := float64(n) - acked0
	if measured < n/2 {
		t.Fatalf("only %.0f deliveries in the trace", measured)
	}
	h := readHandoffs(t, tr.path)
	t.Log(h.report(measured))

	// startConsumer runs Run, and with it the session's loop, on a
	// goroutine of its own (testkit.Background's).
	session := h.waitsOf("testkit.Background.func1")
	if session == 0 {
		t.Fatalf("no wait of the session's goroutine in the trace; its entry function is not the one named here:\n%s", h.report(measured))
	}
	workers := h.waitsOf("broker.(*sess).worker")
	own := session + workers + h.waitsOf("broker.(*sess).committer") + h.waitsOf("broker.(*sess).settler")
	if per := float64(session) / measured; per > 0.25 {
		t.Errorf("the session waited %.2f times per delivery, want at most 0.25 (a few per commit group)", per)
	}
	if per := float64(workers) / measured; per > 1.1 {
		t.Errorf("the workers waited %.2f times per delivery, want at most 1.1 (one per delivery taken)", per)
	}
	if per := float64(own) / measured; per > 1.3 {
		t.Errorf("the consumer's goroutines waited %.2f times per delivery, want at most 1.3", per)
	}
}

// drainTrace is an execution trace of part of a test or benchmark, written
// to path.
type drainTrace struct {
	path string
	f    *os.File
}

// startTrace starts an execution trace into a file of the test's own.
func startTrace(tb testing.TB) *drainTrace {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "drain.trace")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := trace.Start(f); err != nil {
		tb.Fatal(err)
	}
	return &drainTrace{path: path, f: f}
}

// startBenchTrace is startTrace when TALLY_BENCH_TRACE=1, and no trace (an
// empty path) otherwise.
func startBenchTrace(b *testing.B) *drainTrace {
	b.Helper()
	if os.Getenv("TALLY_BENCH_TRACE") != "1" {
		return &drainTrace{}
	}
	return startTrace(b)
}

// stop ends the trace and closes its file; a second stop does nothing.
func (t *drainTrace) stop() error {
	if t.f == nil {
		return nil
	}
	trace.Stop()
	err := t.f.Close()
	t.f = nil
	return err
}

// handoffs is what an execution trace says about the hand-offs between
// goroutines: how often a goroutine was put on a thread (switches), and each
// time one stopped to wait, which goroutine (by the function it was started
// with) and why (the trace's reason: "chan receive", "select", "sync", ...).
type handoffs struct {
	switches int
	wakeups  int            // Waiting -> Runnable: a wait that another goroutine or the poller ended
	byWaiter map[string]int // "entry function|reason"
}

func (h handoffs) waits() int {
	n := 0
	for _, c := range h.byWaiter {
		n += c
	}
	return n
}

// waitsOf counts the waits of the goroutines started with entry.
func (h handoffs) waitsOf(entry string) int {
	n := 0
	for k, c := range h.byWaiter {
		if who, _, _ := strings.Cut(k, "|"); who == entry {
			n += c
		}
	}
	return n
}

func (h handoffs) report(deliveries float64) string {
	var sb strings.Builder
	per := func(c int) float64 { return float64(c) / deliveries }
	fmt.Fprintf(&sb, "execution trace of the consumer's drain, per delivery: %.2f goroutine switches, %.2f wake-ups, %.2f waits\n",
		per(h.switches), per(h.wakeups), per(h.waits()))
	keys := make([]string, 0, len(h.byWaiter))
	for k := range h.byWaiter {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return h.byWaiter[keys[i]] > h.byWaiter[keys[j]] })
	for _, k := range keys {
		if per(h.byWaiter[k]) < 0.005 {
			continue
		}
		who, why, _ := strings.Cut(k, "|")
		fmt.Fprintf(&sb, "  %6.3f  %-60s %s\n", per(h.byWaiter[k]), who, why)
	}
	return sb.String()
}

// readHandoffs reads a trace with `go tool trace -d=parsed` (the runtime's
// own parser, as text). An event is a line starting "M="; a goroutine's state
// change is a StateTransition with "GoID=" and "From->To"; the stack that
// follows a goroutine's own transition to Waiting ("Stack=", one function
// line and one file line per frame, outermost last) names where it waited
// and, in its last frame, the function the goroutine was started with.
func readHandoffs(b testing.TB, path string) handoffs {
	b.Helper()
	cmd := exec.Command(testkit.GoBin(b), "tool", "trace", "-d=parsed", path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	h := handoffs{byWaiter: map[string]int{}}
	var (
		waitReason string // the reason of a Running->Waiting whose stack is being read
		inStack    bool
		lastFunc   string
	)
	flush := func() {
		if waitReason != "" {
			h.byWaiter[lastFunc+"|"+waitReason]++
		}
		waitReason, inStack, lastFunc = "", false, ""
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "M="):
			flush()
			if !strings.Contains(line, " StateTransition ") || !strings.Contains(line, " GoID=") {
				continue
			}
			from, to := transition(line)
			if to == "Running" {
				h.switches++
			}
			if from == "Waiting" && to == "Runnable" {
				h.wakeups++
			}
			if from == "Running" && to == "Waiting" {
				waitReason = reason(line)
				lastFunc = "(no stack)"
			}
		case line == "Stack=":
			inStack = waitReason != ""
		case strings.HasSuffix(line, "Stack="):
			inStack = false // another goroutine's stack (TransitionStack=)
		case inStack && strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t\t"):
			fn, _, _ := strings.Cut(strings.TrimPrefix(line, "\t"), " @ ")
			lastFunc = shortFunc(fn)
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("go tool trace: %v", err)
	}
	return h
}

// transition returns the states of "... GoID=12 Running->Waiting Reason=...".
func transition(line string) (from, to string) {
	for _, f := range strings.Fields(line) {
		if a, z, ok := strings.Cut(f, "->"); ok && !strings.Contains(f, "=") {
			return a, z
		}
	}
	return "", ""
}

func reason(line string) string {
	_, r, ok := strings.Cut(line, ` Reason="`)
	if !ok {
		return ""
	}
	r, _, _ = strings.Cut(r, `"`)
	return r
}

// shortFunc drops the module path: "github.com/x/y/pkg.(*T).f" -> "pkg.(*T).f".
func shortFunc(fn string) string {
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		return fn[i+1:]
	}
	return fn
}
