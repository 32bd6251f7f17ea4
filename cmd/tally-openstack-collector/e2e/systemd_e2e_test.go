package e2e

// The binary under systemd's notification protocol, and its readiness during
// a graceful stop.

import (
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// notifySocket is the datagram socket systemd would listen on.
type notifySocket struct {
	path string
	mu   sync.Mutex
	msgs []string
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	ns := &notifySocket{path: filepath.Join(t.TempDir(), "notify")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: ns.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			ns.mu.Lock()
			ns.msgs = append(ns.msgs, strings.TrimSpace(string(buf[:n])))
			ns.mu.Unlock()
		}
	}()
	return ns
}

// index is the position of the first message equal to m, or -1.
func (ns *notifySocket) index(m string) int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for i, x := range ns.msgs {
		if x == m {
			return i
		}
	}
	return -1
}

func (ns *notifySocket) count(m string) int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n := 0
	for _, x := range ns.msgs {
		if x == m {
			n++
		}
	}
	return n
}

// TestSystemdNotify: with NOTIFY_SOCKET set (Type=notify), the daemon sends
// READY=1 once the broker session consumes, WATCHDOG=1 regularly when
// systemd asks for a watchdog (WATCHDOG_USEC), and STOPPING=1 at SIGTERM.
func TestSystemdNotify(t *testing.T) {
	b, v, a := stack(t, "nova")
	ns := listenNotify(t)
	c := newCollector(t, b, v, a.url(), a.token, "NOTIFY_SOCKET="+ns.path, "WATCHDOG_USEC=400000")
	c.start(t)
	testkit.WaitFor(t, time.Minute, "READY=1", func() bool {
		if !c.p.running() {
			t.Fatalf("collector exited: %v", c.p.err)
		}
		return ns.index("READY=1") >= 0
	})
	// READY=1 came after the broker session: the daemon answers ready now.
	if code, _ := mustGet(t, c.httpAddr, "/readyz", ""); code != 200 {
		t.Errorf("/readyz after READY=1: %d", code)
	}
	testkit.WaitFor(t, 20*time.Second, "watchdog pings", func() bool { return ns.count("WATCHDOG=1") >= 3 })
	if code, _ := c.p.stop(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	stop := ns.index("STOPPING=1")
	if stop < 0 || stop < ns.index("READY=1") {
		t.Fatalf("STOPPING=1 at %d, READY=1 at %d: %v", stop, ns.index("READY=1"), ns.msgs)
	}
}

// TestEndToEndReadyzFailsFromTheSignal: from the first SIGTERM on, /readyz
// answers 503 until the server closes, while the stop waits on the flush (the
// Reporting API answers 503, so the flush takes its whole budget).
func TestEndToEndReadyzFailsFromTheSignal(t *testing.T) {
	e := setupE2E(t, "TALLY_OSC_STOP_TIMEOUT=8s", "TALLY_OSC_FLUSH_TIMEOUT=3s")
	const n = 200
	e.api.fail(t, 503)
	publishRaw(t, e.v, e.corpus, e.prefix, 0, n)
	testkit.WaitFor(t, time.Minute, "every delivery committed and acknowledged", func() bool {
		return sum(e.c.metrics(t), "tally_collector_acked_total") >= n
	})
	if code, _ := mustGet(t, e.c.httpAddr, "/readyz", ""); code != 200 {
		t.Fatalf("/readyz before the stop: %d", code)
	}
	_ = e.c.p.cmd.Process.Signal(syscall.SIGTERM)
	// The signal is handled asynchronously; its log line is written once
	// readiness has already been withdrawn.
	testkit.WaitFor(t, 10*time.Second, "the stop begun", func() bool {
		return strings.Contains(e.c.p.out.String(), `"message":"stopping: no new deliveries`)
	})
	var codes []int
	for e.c.p.running() {
		code, _, err := getWith(e.c.httpAddr, "/readyz", "")
		if err == nil {
			codes = append(codes, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n503 := 0
	for _, code := range codes {
		switch code {
		case 503:
			n503++
		default:
			t.Errorf("/readyz answered %d during the stop", code)
		}
	}
	if n503 < 10 {
		t.Errorf("only %d answers seen during the stop: the window was not observed", n503)
	}
	e.api.clearFail(t)
	e.c.start(t)
	e.waitDelivered(t, n, time.Minute)
	checkLedgerTotals(t, e.c, n)
	if code, _ := e.c.p.stop(t, 30*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}
