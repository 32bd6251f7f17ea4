package plog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// untrustedLoopback is a trusted set that leaves 127.0.0.1 out, so the
// test's own loopback datagrams take the path of a remote source. No traffic
// goes to the prefix itself.
var untrustedLoopback = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}

// TestUDPCommandsFromUntrustedSource: STAT (a reply of several KB to a 6-byte
// request, to a source address anyone can forge) gets no answer from a
// source outside the trusted set, nor ENVI; KILL is refused even where it is
// enabled; PING, whose reply is smaller than its request, is answered. Each
// refusal is counted.
func TestUDPCommandsFromUntrustedSource(t *testing.T) {
	var stopped atomic.Int32
	o := Options{Listeners: []Listener{{Network: UDP, Settings: Settings{AllowENVI: ptr(true), AllowKILL: ptr(true)}}}}
	o.Stop = func() { stopped.Add(1) }
	o.TrustedSources = untrustedLoopback
	h := newHarness(t, 0, o)
	ctx := context.Background()
	c := h.dial(0)
	// The reader handles datagrams in order: the PONG that follows proves
	// the three commands before it got no answer.
	for _, cmd := range []string{"STAT", "ENVI", "KILL"} {
		if _, err := c.conn.Write([]byte("\x00\x00" + cmd)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Command(ctx, "PING", []byte("after"))
	if err != nil || string(got) != "PONGafter" {
		t.Fatalf("the first answer after STAT, ENVI, KILL: %q %v", got, err)
	}
	if stopped.Load() != 0 {
		t.Fatal("KILL from an untrusted source stopped the daemon")
	}
	s := h.srv.Stats(0)
	if s.V0UntrustedCommands != 3 {
		t.Errorf("untrusted commands counted: %d, want 3", s.V0UntrustedCommands)
	}
	// The same listener answers STAT and obeys KILL from a trusted source.
	h2 := newHarness(t, 0, Options{Listeners: []Listener{{Network: UDP, Settings: Settings{AllowKILL: ptr(true)}}},
		Stop: func() { stopped.Add(1) }})
	c2 := h2.dial(0)
	if stat, err := c2.Command(ctx, "STAT", nil); err != nil || !bytes.Contains(stat, []byte(`"version"`)) {
		t.Fatalf("STAT from loopback: %q %v", stat, err)
	}
	c2.conn.Write([]byte("\x00\x00KILL"))
	h2.waitStat(0, "KILL handled", func(Snapshot) bool { return stopped.Load() == 1 })
}

// TestUDPCommandRateLimitPerSource: a source sending commands faster than the
// bucket refills gets answers for the burst and then at the refill rate; the
// rest are dropped and counted. Another source has a bucket of its own.
func TestUDPCommandRateLimitPerSource(t *testing.T) {
	h := newHarness(t, 0, udpOnly())
	flooder := h.dial(0)
	const n = 200
	var replies atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 64)
		for {
			flooder.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := flooder.conn.Read(buf); err != nil {
				return
			}
			replies.Add(1)
		}
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		flooder.conn.Write([]byte("\x00\x00PING"))
	}
	s := h.waitStat(0, "every PING handled", func(s Snapshot) bool { return s.V0Commands+s.V0RateLimitedCommands >= n })
	elapsed := time.Since(start)
	allowed := commandBurst + int(elapsed.Seconds()*commandRate) + 1
	if s.V0RateLimitedCommands == 0 || int(s.V0Commands) > allowed {
		t.Fatalf("%d answered, %d limited in %s; at most %d may be answered", s.V0Commands, s.V0RateLimitedCommands, elapsed, allowed)
	}
	// A second source address (127.0.0.2) is not held back by the first
	// one's flood.
	other, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(h.addr(0))))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.Write([]byte("\x00\x00PING2"))
	other.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	if n, err := other.Read(buf); err != nil || string(buf[:n]) != "PONG2" {
		t.Fatalf("another source: %q %v", buf[:n], err)
	}
	wg.Wait()
	if int(replies.Load()) != int(s.V0Commands) {
		t.Errorf("%d replies received for %d answered", replies.Load(), s.V0Commands)
	}
}

// TestCommandLimiterTableBounded: a flood of (forged) sources never grows the
// table past its bound; sources beyond it share one bucket.
func TestCommandLimiterTableBounded(t *testing.T) {
	lim := newCommandLimiter(8, 1, 2)
	now := time.Unix(1000, 0)
	allowed := 0
	for i := 0; i < 1000; i++ {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if lim.allow(a, now) {
			allowed++
		}
	}
	if len(lim.buckets) > 8 {
		t.Fatalf("table grew to %d entries", len(lim.buckets))
	}
	// 8 sources with a bucket each (one command each), the rest sharing one
	// bucket of 2.
	if allowed != 8+2 {
		t.Fatalf("%d allowed", allowed)
	}
	// Idle entries are recycled once their bucket is full again.
	later := now.Add(10 * time.Second)
	if !lim.allow(netip.MustParseAddr("10.9.9.9"), later) {
		t.Fatal("a new source after the others went idle was refused")
	}
}

// TestTCPConnectionsPerSource: one source holds at most
// MaxConnectionsPerSource connections; one more is closed at once and
// counted, and the connections it already has are served.
func TestTCPConnectionsPerSource(t *testing.T) {
	h := newHarness(t, 0, tcpOnly(Settings{MaxConnectionsPerSource: 3}))
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		c := h.rawConn(0)
		conns = append(conns, c)
	}
	h.waitStat(0, "three connections", func(s Snapshot) bool { return s.TCPConnections == 3 })
	extra := h.rawConn(0)
	extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("a fourth connection from the same source: %v", err)
	}
	s := h.waitStat(0, "refusal counted", func(s Snapshot) bool { return s.TCPRefusedPerSource == 1 })
	if s.TCPConnections != 3 {
		t.Fatalf("connections %d", s.TCPConnections)
	}
	conns[2].Write(append(canonical("kept"), '\n'))
	h.events(1)
	// A closed connection frees its place.
	conns[0].Close()
	h.waitStat(0, "a place freed", func(s Snapshot) bool { return s.TCPConnections == 2 })
	again := h.rawConn(0)
	again.Write(append(canonical("again"), '\n'))
	h.events(2)
}

// TestRefusedCommandsLogSampled: a stream of refused commands is counted in
// full and logged a few times only.
func TestRefusedCommandsLogSampled(t *testing.T) {
	logs := &testkit.SyncBuffer{}
	o := udpOnly()
	o.TrustedSources = untrustedLoopback
	h := newLoggedHarness(t, 0, o, zerolog.New(logs))
	c := h.dial(0)
	const n = 12 // within one source's burst: refused, not rate-limited
	for i := 0; i < n; i++ {
		c.conn.Write([]byte("\x00\x00KILL"))
	}
	h.waitStat(0, "every KILL refused", func(s Snapshot) bool { return s.V0UntrustedCommands == n })
	if lines := strings.Count(logs.String(), "plog command"); lines == 0 || lines > 5 {
		t.Fatalf("%d log lines for %d refusals:\n%s", lines, n, logs.String())
	}
}

// stormFragment is the first fragment of a message that announces
// announced bytes in fragments of fragSize and never sends the rest.
func stormFragment(id uint32, announced, fragSize int) []byte {
	count := (announced + fragSize - 1) / fragSize
	return (raw{typ: 1, count: uint16(count), fragSize: uint16(fragSize), id: id, length: int32(announced),
		checksum: 0xdeadbeef, payload: bytes.Repeat([]byte{'s'}, fragSize)}).bytes()
}

// TestUDPHonestMessagesSurviveAStormOfLargeClaims: first fragments
// announcing messages of nearly the whole defragmenter bound (1,000,000 bytes
// each, of which 1,000 arrive), twenty between any two fragments of 100
// honest three-fragment messages. Every honest message arrives, and the bytes
// the defragmenter held never passed its bound. The sender waits for the
// listener to have read what it sent every 32 datagrams, so the socket buffer
// loses nothing and the outcome is the defragmenter's alone.
func TestUDPHonestMessagesSurviveAStormOfLargeClaims(t *testing.T) {
	const (
		honest    = 100
		perGap    = 20
		announced = 1_000_000
		stormFrag = 1000
		window    = 32
	)
	h := newHarness(t, 0, udpOnly())
	storm := h.rawConn(0)
	good := h.rawConn(0)
	received := func(s Snapshot) uint64 {
		var n uint64
		for _, v := range s.V0Fragments {
			n += v
		}
		return n
	}
	var sent uint64
	send := func(c net.Conn, d []byte) {
		if _, err := c.Write(d); err != nil {
			t.Fatal(err)
		}
		if sent++; sent%window == 0 {
			want := sent
			h.waitStat(0, "the listener caught up", func(s Snapshot) bool { return received(s) >= want })
		}
	}
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	stormID := uint32(0)
	for i := 0; i < honest; i++ {
		frags, err := Fragments(uint32(i+1), canonical(fmt.Sprintf("honest-%03d", i)), nil, 70)
		if err != nil || len(frags) != 3 {
			t.Fatalf("%d fragments, %v", len(frags), err)
		}
		for _, f := range frags {
			send(good, f)
			for range perGap {
				stormID++
				send(storm, stormFragment(stormID, announced, stormFrag))
			}
		}
	}
	want := sent
	s := h.waitStat(0, "every datagram read", func(s Snapshot) bool { return received(s) >= want })
	seen := h.resourceIDs(honest)
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	if len(seen) != honest {
		t.Fatalf("%d distinct honest messages of %d", len(seen), honest)
	}
	peak := h.srv.listeners[0].st.defragBytes.peak.Load()
	if peak > defaultDefragMaxBytes {
		t.Fatalf("the defragmenter held %d bytes, bound %d", peak, defaultDefragMaxBytes)
	}
	if s.V0InvalidMultipartHeader != 0 || s.SocketDrops != 0 {
		t.Fatalf("invalid headers %d, socket drops %d", s.V0InvalidMultipartHeader, s.SocketDrops)
	}
	t.Logf("%d storm fragments announcing %d bytes each, %d honest messages delivered; "+
		"defragmenter peak %d bytes, %d evictions; %d MiB allocated by the process meanwhile",
		stormID, announced, len(seen), peak, s.Cache.Evictions, (ms1.TotalAlloc-ms0.TotalAlloc)>>20)
}

// TestLineBudgetShares: a connection within its share is never refused, even
// with the common part of the budget taken; growth past a share borrows from
// the common part until it is gone; what is released can be borrowed again.
// Five connections can hold the whole budget and no more.
func TestLineBudgetShares(t *testing.T) {
	var held heldBytes
	b := newLineBudget(1000, 5, &held) // share 100, common 500
	if b.share != 100 || b.common != 500 {
		t.Fatalf("share %d common %d", b.share, b.common)
	}
	if !b.resize(0, 400) || !b.resize(0, 300) { // two connections borrow 300 + 200
		t.Fatal("borrowing within the common part refused")
	}
	if b.resize(0, 101) {
		t.Fatal("a third connection borrowed past the common part")
	}
	for i := 0; i < 3; i++ {
		if !b.resize(0, 100) {
			t.Fatalf("connection %d refused its share", 3+i)
		}
	}
	if got := held.cur.Load(); got != 1000 {
		t.Fatalf("five connections hold %d bytes, want the whole budget", got)
	}
	b.resize(400, 0) // the first connection's line ends
	if !b.resize(100, 400) {
		t.Fatal("released bytes not lent again")
	}
	if peak := held.peak.Load(); peak != 1000 {
		t.Fatalf("peak %d, budget 1000", peak)
	}
	b.resize(400, 0)
	b.resize(300, 0)
	line, ok := b.appendLine(nil, bytes.Repeat([]byte("x"), 50), 1000)
	if !ok || len(line) != 50 || cap(line) != 50 {
		t.Fatalf("append: %v, len %d cap %d", ok, len(line), cap(line))
	}
	line, ok = b.appendLine(line, bytes.Repeat([]byte("x"), 60), 1000) // doubles to 110
	if !ok || len(line) != 110 || cap(line) != 110 || held.cur.Load() != 2*100+110 {
		t.Fatalf("append: %v, len %d cap %d, held %d", ok, len(line), cap(line), held.cur.Load())
	}
	if _, ok := b.appendLine(line, bytes.Repeat([]byte("x"), 1000), 2000); ok {
		t.Fatal("a line grew past its share and the common part")
	}
}

// TestTCPLineBudgetBoundsLongPartialLines: 24 connections each send 200 KiB
// without a newline beside one honest connection sending 100 events. The
// budget (2 MiB: a share of 32 KiB for each of 32 connections, 1 MiB in
// common) holds four of those partial lines; the other connections are closed
// and counted, a few of them logged. Every honest event arrives, and the line
// buffers never held more than the budget.
func TestTCPLineBudgetBoundsLongPartialLines(t *testing.T) {
	const (
		hostile = 24
		partial = 200 << 10
		honest  = 100
		budget  = 2 << 20
	)
	logs := &testkit.SyncBuffer{}
	o := tcpOnly(Settings{MaxConnections: 32, MaxConnectionsPerSource: 32, MaxLineBytes: 256 << 10, LineBudgetBytes: budget})
	h := newLoggedHarness(t, 0, o, zerolog.New(logs))
	good := h.rawConn(0)
	var wg sync.WaitGroup
	sent := 0
	for i := 0; i < hostile; i++ {
		c := h.rawConn(0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Write(bytes.Repeat([]byte("x"), partial)) // fails once the listener closes it
		}()
		for range honest / hostile {
			if _, err := good.Write(append(canonical(fmt.Sprintf("honest-%03d", sent)), '\n')); err != nil {
				t.Fatal(err)
			}
			sent++
		}
	}
	for ; sent < honest; sent++ {
		if _, err := good.Write(append(canonical(fmt.Sprintf("honest-%03d", sent)), '\n')); err != nil {
			t.Fatal(err)
		}
	}
	// A connection that read its 200 KiB holds a 256 KiB buffer: 224 KiB past
	// its share. Four of them fit in the common part; the others were closed
	// once they could borrow no more.
	const kept = (1 << 20) / ((256 - 32) << 10)
	s := h.waitStat(0, "the hostile connections held or closed", func(s Snapshot) bool {
		return s.TCPLineBudgetClosed == hostile-kept && s.TCPConnections == 1+kept && s.TCPLineBytes == kept*(256<<10)
	})
	wg.Wait()
	seen := h.resourceIDs(honest)
	if len(seen) != honest {
		t.Fatalf("%d distinct honest events of %d", len(seen), honest)
	}
	peak := h.srv.listeners[0].st.tcpLineBytes.peak.Load()
	if peak > budget {
		t.Fatalf("line buffers held %d bytes, budget %d", peak, budget)
	}
	if lines := strings.Count(logs.String(), "line budget"); lines == 0 || lines > 5 {
		t.Fatalf("%d log lines for %d closed connections", lines, s.TCPLineBudgetClosed)
	}
	want := fmt.Sprintf(`
# HELP tally_collector_plog_tcp_closed_connections_total TCP connections the listener closed, by reason: idle_timeout (STAT tcp_timeouts), line_budget (STAT tcp_line_budget_closed).
# TYPE tally_collector_plog_tcp_closed_connections_total counter
tally_collector_plog_tcp_closed_connections_total{listener=%[1]q,reason="idle_timeout"} 0
tally_collector_plog_tcp_closed_connections_total{listener=%[1]q,reason="line_budget"} %[2]d
`, h.srv.Listeners()[0].Name, hostile-kept)
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want), "tally_collector_plog_tcp_closed_connections_total"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d connections of %d KiB partial lines beside %d honest events: %d kept, %d closed; "+
		"line buffers peaked at %d bytes (budget %d), %d held at the end",
		hostile, partial>>10, len(seen), kept, s.TCPLineBudgetClosed, peak, budget, s.TCPLineBytes)
}
