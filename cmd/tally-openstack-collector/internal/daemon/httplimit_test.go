package daemon

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// boundedServer is the daemon's HTTP server as listen builds it, on a
// loopback port: the probes, the metrics, and a control route that holds
// every request until release is closed. blockReady, closed, holds /readyz
// the same way.
type boundedServer struct {
	addr       string
	lim        *connLimit
	inControl  atomic.Int64 // control requests being held
	inReady    atomic.Int64 // /readyz requests being held
	release    chan struct{}
	released   sync.Once
	blockReady chan struct{}
}

func newBoundedServer(t *testing.T, maxConns int) *boundedServer {
	t.Helper()
	b := &boundedServer{release: make(chan struct{}), blockReady: make(chan struct{})}
	reg := prometheus.NewRegistry()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	b.lim, err = newConnLimit(ln, maxConns, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	p := &probes{
		outbox: func() error { return nil },
		ready: map[string]func() error{"broker": func() error {
			select {
			case <-b.blockReady:
				b.inReady.Add(1)
				defer b.inReady.Add(-1)
				<-b.release
			default:
			}
			return nil
		}},
		live: newLivenessTracker(time.Minute, nil),
		log:  zerolog.Nop(),
	}
	guard, err := newControlAuth(nil, true, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	control := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b.inControl.Add(1)
		defer b.inControl.Add(-1)
		<-b.release
		plain(w, http.StatusOK, "done\n")
	})
	srv := newHTTPServer(b.lim.serveLimited(newMux(p, reg, guard, control)), 60*time.Second)
	srv.ConnState = b.lim.connState
	go func() { _ = srv.Serve(b.lim) }()
	t.Cleanup(func() {
		b.unblock()
		_ = srv.Close()
	})
	return b
}

// unblock lets every held request finish.
func (b *boundedServer) unblock() {
	b.released.Do(func() { close(b.release) })
}

// finishHeld lets the held requests finish and checks that each of the n
// answering on done was answered 200.
func (b *boundedServer) finishHeld(t *testing.T, done <-chan int, n int) {
	t.Helper()
	b.unblock()
	for range n {
		if code := <-done; code != http.StatusOK {
			t.Errorf("a held request ended with %d", code)
		}
	}
}

func (b *boundedServer) refused(reason string) int {
	return int(testutil.ToFloat64(b.lim.refused.WithLabelValues(reason)))
}

// get asks path on a connection of its own.
func (b *boundedServer) get(t *testing.T, path string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + b.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// slowConn opens a connection to addr that sends part of a request head and
// no more, as a slow client does.
func slowConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: slow\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// hold starts a request to path in the background; it answers on done.
func (b *boundedServer) hold(t *testing.T, path string, done chan<- int) {
	c, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: held\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
}

// closedByServer reports whether the server closed c: a read answers EOF or a
// reset, not data.
func closedByServer(c net.Conn) bool {
	// The deadline only keeps a wrong answer from hanging the test.
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	var buf [1]byte
	_, err := c.Read(buf[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestHTTPBoundSlowFloodKeepsProbesAnswering: three times the bound of slow
// connections (request heads never finished) hold no more than the bound
// open, the oldest displaced by the newer, and /livez and /readyz still
// answer, each on a connection that displaces one more of the flood.
func TestHTTPBoundSlowFloodKeepsProbesAnswering(t *testing.T) {
	const maxConns = 16
	b := newBoundedServer(t, maxConns)
	flood := make([]net.Conn, 3*maxConns)
	for i := range flood {
		flood[i] = slowConn(t, b.addr)
	}
	testkit.WaitUntil(t, time.Minute, "the flood accepted", func() (bool, string) {
		n := b.refused(refusedEvicted)
		return n == len(flood)-maxConns, "evicted " + strconv.Itoa(n)
	})
	if n := b.lim.openConns(); n != maxConns {
		t.Fatalf("%d connections open, want the bound, %d", n, maxConns)
	}
	if g := testutil.ToFloat64(b.lim.open); g != maxConns {
		t.Errorf("tally_collector_http_connections = %v, want %d", g, maxConns)
	}
	// The oldest were closed by the server; the newest hold the slots.
	for i, c := range flood[:len(flood)-maxConns] {
		if !closedByServer(c) {
			t.Fatalf("slow connection %d (of the oldest) was not closed", i)
		}
	}
	for _, path := range []string{"/livez", "/readyz", "/livez"} {
		if code, body := b.get(t, path); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("%s during the flood: %d %q", path, code, body)
		}
	}
	// The first probe displaced one of the flood; the next ones found the
	// slot of the one before free, unless its close was not through yet.
	if n := b.refused(refusedEvicted); n < len(flood)-maxConns+1 || n > len(flood)-maxConns+3 {
		t.Errorf("evicted %d, want %d to %d: one for the first probe, at most one for each", n, len(flood)-maxConns+1, len(flood)-maxConns+3)
	}
	if n := b.lim.openConns(); n > maxConns {
		t.Errorf("%d connections open, over the bound %d", n, maxConns)
	}
	if n := b.refused(refusedFull); n != 0 {
		t.Errorf("%d connections closed as full, with slow ones to displace", n)
	}
}

// TestHTTPBoundGeneralShare: requests other than the probes are served on
// at most the bound less the probes' share at once; past it they are
// answered 503 at once, and the probes still answer.
func TestHTTPBoundGeneralShare(t *testing.T) {
	const maxConns = 16
	general := maxConns - probeShare(maxConns)
	b := newBoundedServer(t, maxConns)
	done := make(chan int, general)
	for range general {
		b.hold(t, "/mappers", done)
	}
	testkit.WaitUntil(t, time.Minute, "the control requests held", func() (bool, string) {
		n := b.inControl.Load()
		return n == int64(general), "held " + strconv.Itoa(int(n))
	})
	if code, body := b.get(t, "/mappers"); code != http.StatusServiceUnavailable || body != "busy\n" {
		t.Fatalf("a control request past the general share: %d %q", code, body)
	}
	if code, _ := b.get(t, "/metrics"); code != http.StatusServiceUnavailable {
		t.Fatalf("/metrics past the general share: %d", code)
	}
	if n := b.refused(refusedBusy); n != 2 {
		t.Errorf("busy %d, want 2", n)
	}
	for _, path := range []string{"/livez", "/readyz"} {
		if code, body := b.get(t, path); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("%s with the general share serving: %d %q", path, code, body)
		}
	}
	b.finishHeld(t, done, general)
	if code, _ := b.get(t, "/mappers"); code != http.StatusOK {
		t.Errorf("a control request once the share is free: %d", code)
	}
}

// TestHTTPBoundEveryConnectionServing: with every slot serving a request, a
// new connection is closed at once and counted; once they finish, the probes
// answer again.
func TestHTTPBoundEveryConnectionServing(t *testing.T) {
	const maxConns = 16
	general := maxConns - probeShare(maxConns)
	b := newBoundedServer(t, maxConns)
	close(b.blockReady)
	done := make(chan int, maxConns)
	for range general {
		b.hold(t, "/mappers", done)
	}
	for range maxConns - general {
		b.hold(t, "/readyz", done)
	}
	testkit.WaitUntil(t, time.Minute, "every slot serving", func() (bool, string) {
		c, r := b.inControl.Load(), b.inReady.Load()
		return c == int64(general) && r == int64(maxConns-general), "control " + strconv.Itoa(int(c)) + ", readyz " + strconv.Itoa(int(r))
	})
	c, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: late\r\n\r\n"); err != nil && !isReset(err) {
		t.Fatal(err)
	}
	if !closedByServer(c) {
		t.Fatal("a connection over the bound, every slot serving, was answered")
	}
	if n := b.refused(refusedFull); n != 1 {
		t.Errorf("full %d, want 1", n)
	}
	if n := b.refused(refusedEvicted); n != 0 {
		t.Errorf("evicted %d connections that were serving", n)
	}
	b.finishHeld(t, done, maxConns)
	if code, _ := b.get(t, "/livez"); code != http.StatusOK {
		t.Errorf("/livez after the held requests: %d", code)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "reset")
}

// openConns is the number of connections open.
func (l *connLimit) openConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns.Len()
}
