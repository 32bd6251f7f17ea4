package e2e

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/plog"
)

// The three floods of the inputs besides the broker, one after the other,
// against one collector with a plog UDP and a plog TCP listener, among
// ordinary notifications on the broker and honest plog messages:
//
//   - plog TCP: 256 connections from 16 source addresses (the per-source
//     cap), each sending a line of 1,000,000 bytes that never ends;
//   - plog UDP: 2,000 first fragments of 1,000 bytes, each announcing a
//     message of 1,000,000 bytes, twenty between any two fragments of 100
//     honest three-fragment messages;
//   - HTTP: 4,000 connections that never finish their request head, with
//     /livez asked meanwhile.
//
// The collector never exits, its peak resident set (VmHWM) stays within the
// budget docs/operations.md gives for two plog listeners, every ordinary and
// honest message reaches the Reporting API exactly once, and the ledger
// balances.
func TestEndToEndInputFloodsStayWithinBudget(t *testing.T) {
	udpAddr, tcpAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	e := setupE2E(t, "TALLY_OSC_PLOG_LISTENERS=udp://"+udpAddr+",tcp://"+tcpAddr)
	t.Cleanup(func() {
		if t.Failed() {
			logFirstErrors(t, e.c.p.out.String(), 8)
		}
	})
	pid := e.c.p.cmd.Process.Pid
	hwm := func() int64 { return int64(procStatus(t, pid, "VmHWM")) << 10 }
	alive := func(phase string) {
		t.Helper()
		if !e.c.p.running() {
			t.Fatalf("the collector exited during %s: %v", phase, e.c.p.err)
		}
	}
	const perPhase = 50
	ordinary := 0
	publishOrdinary := func() {
		publishRaw(t, e.v, e.corpus, e.prefix, ordinary, ordinary+perPhase)
		ordinary += perPhase
	}
	honest := map[string]bool{}
	peaks := []string{fmt.Sprintf("ready %d MiB", hwm()>>20)}

	// plog TCP: long lines that never end.
	publishOrdinary()
	tcpHonest := floodPlogTCP(t, e, tcpAddr)
	for _, id := range tcpHonest {
		honest[id] = true
	}
	alive("the TCP flood")
	peaks = append(peaks, fmt.Sprintf("after the plog TCP flood %d MiB", hwm()>>20))

	// plog UDP: a storm of large claims.
	publishOrdinary()
	for _, id := range floodPlogUDP(t, e, udpAddr) {
		honest[id] = true
	}
	alive("the UDP storm")
	peaks = append(peaks, fmt.Sprintf("after the plog UDP storm %d MiB", hwm()>>20))

	// HTTP: slow connections.
	publishOrdinary()
	floodHTTP(t, e, 4000)
	alive("the HTTP flood")
	peaks = append(peaks, fmt.Sprintf("after the HTTP flood %d MiB", hwm()>>20))

	want := make(map[string]bool, ordinary+len(honest))
	for i := range ordinary {
		want[messageID(e.prefix, i)] = true
	}
	for id := range honest {
		want[id] = true
	}
	testkit.WaitUntil(t, 3*time.Minute, "every ordinary and honest message at the Reporting API", func() (bool, string) {
		alive("the drain")
		events, _ := e.api.events(t)
		got := 0
		for _, ev := range events {
			if want[ev.EventID] {
				got++
			}
		}
		return got >= len(want), fmt.Sprintf("%d of %d delivered", got, len(want))
	})
	checkStoredOnce(t, e.api, want)

	m := e.c.metrics(t)
	compiled := int(sum(m, "tally_collector_mapper_builtins_compiled"))
	budget := residentBudget(compiled, budgetInputs{plogListeners: 2})
	peak := hwm()
	t.Logf("collector peak resident set (VmHWM) %s; at the end %d MiB (budget %d MiB, %d modules compiled); "+
		"TCP connections closed for the line budget %v, refused per source %v; UDP defragmenter evictions %v; "+
		"HTTP connections evicted %v",
		strings.Join(peaks, ", "), peak>>20, budget>>20, compiled,
		sum(m, "tally_collector_plog_tcp_closed_connections_total", `reason="line_budget"`),
		sum(m, "tally_collector_plog_tcp_refused_per_source_total"),
		sum(m, "tally_collector_plog_cache_evictions_total"),
		sum(m, "tally_collector_http_refused_total", `reason="evicted"`))
	if peak > budget {
		t.Errorf("peak resident set %d MiB, over the documented budget of %d MiB", peak>>20, budget>>20)
	}
	tot := e.c.checkLedgerBalanced(t)
	if tot.Delivered < int64(len(want)) {
		t.Errorf("ledger totals %+v, want at least %d delivered", tot, len(want))
	}
	if code, _ := e.c.p.stop(t, 40*time.Second); code != 0 {
		t.Errorf("stop: exit %d", code)
	}
}

// plogNote is a nova notification as a plog message, its message id id.
func plogNote(id string) []byte {
	return []byte(`{"message_id":"` + id + `","event_type":"compute.instance.exists","timestamp":"2024-05-01 12:00:00.5",` +
		`"publisher_id":"compute.host1","payload":{"instance_id":"i-` + id + `","tenant_id":"p1","vcpus":2,"memory_mb":2048}}`)
}

// floodPlogTCP opens 256 connections to the TCP listener at addr, 16 from
// each of 16 source addresses (127.0.1.1 to 127.0.1.16), each writing a line
// of 1,000,000 bytes without its newline, and holds them; meanwhile an honest
// client on 127.0.0.1 sends 50 lines, on a new connection whenever one is
// closed, until their events are at the Reporting API. It checks the lines
// held never passed the listener's budget and returns the honest ids.
func floodPlogTCP(t *testing.T, e *e2e, addr string) []string {
	t.Helper()
	const (
		sources, perSource = 16, 16
		lineBytes          = 1_000_000
		chunk              = 64 << 10
		lineBudget         = 32 << 20 // plog's LineBudgetBytes default
	)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	line := strings.Repeat("x", chunk)
	for s := range sources {
		for range perSource {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(s+1))}, Timeout: 10 * time.Second}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					return // refused: the listener is full
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				// A closed connection ends the writes: that is the bound at work.
				_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				for sent := 0; sent < lineBytes; sent += chunk {
					if _, err := io.WriteString(c, line[:min(chunk, lineBytes-sent)]); err != nil {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	m := e.c.metrics(t)
	held := sum(m, "tally_collector_plog_tcp_line_bytes")
	t.Logf("plog TCP: %v connections open, %v bytes of partial lines held, %v closed for the line budget, %v refused per source",
		sum(m, "tally_collector_plog_tcp_connections"), held,
		sum(m, "tally_collector_plog_tcp_closed_connections_total", `reason="line_budget"`),
		sum(m, "tally_collector_plog_tcp_refused_per_source_total"))
	if held > lineBudget {
		t.Errorf("the TCP listener holds %v bytes of partial lines, over its budget of %d", held, lineBudget)
	}

	ids := make([]string, 50)
	var lines strings.Builder
	for i := range ids {
		ids[i] = fmt.Sprintf("plog-tcp-%s-%02d", e.prefix, i)
		lines.Write(plogNote(ids[i]))
		lines.WriteByte('\n')
	}
	testkit.WaitUntil(t, 2*time.Minute, "the honest TCP lines at the Reporting API", func() (bool, string) {
		if n := countEvents(t, e, ids); n == len(ids) {
			return true, ""
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return false, fmt.Sprintf("dial: %v", err)
		}
		defer c.Close()
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, lines.String()); err != nil {
			return false, fmt.Sprintf("write: %v", err)
		}
		return countEvents(t, e, ids) == len(ids), fmt.Sprintf("%d of %d honest lines delivered", countEvents(t, e, ids), len(ids))
	})
	return ids
}

// countEvents is how many of ids the Reporting API holds.
func countEvents(t *testing.T, e *e2e, ids []string) int {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	events, _ := e.api.events(t)
	n := 0
	for _, ev := range events {
		if want[ev.EventID] {
			n++
			delete(want, ev.EventID)
		}
	}
	return n
}

// floodPlogUDP sends 100 honest three-fragment messages to the UDP listener
// at addr, and twenty storm fragments between any two of their fragments:
// first fragments of 1,000 bytes, each announcing a message of 1,000,000
// bytes. Every 32 datagrams it waits for the listener to have read them (its
// fragment counters), so the socket buffer loses nothing and what is lost is
// the defragmenter's doing. It checks every honest message arrives and the
// defragmenter never held more than its bound, and returns the honest ids.
func floodPlogUDP(t *testing.T, e *e2e, addr string) []string {
	t.Helper()
	const (
		honest, perGap  = 100, 20
		announced, frag = 1_000_000, 1000
		window          = 32
		defragBound     = 1 << 20 // plog's DefragMaxBytes default
		stormIDBase     = 1 << 20
		honestIDBase    = 1
		headerIDOffset  = 8 // the message id in a version 0 fragment header
	)
	// One real first fragment of a 1,000,000-byte message; the storm sends
	// it again under new ids.
	frags, err := plog.Fragments(stormIDBase, make([]byte, announced), nil, frag)
	if err != nil {
		t.Fatal(err)
	}
	stormFrag := frags[0]
	storm, good := dial(t, "udp", addr), dial(t, "udp", addr)
	received := func() float64 {
		m := e.c.metrics(t)
		return sum(m, "tally_collector_plog_cache_hits_total") + sum(m, "tally_collector_plog_cache_misses_total")
	}
	base := received()
	var sent float64
	maxHeld := 0.0
	send := func(c net.Conn, d []byte) {
		if _, err := c.Write(d); err != nil {
			t.Fatal(err)
		}
		if sent++; int(sent)%window == 0 {
			testkit.WaitUntil(t, 30*time.Second, "the UDP listener caught up", func() (bool, string) {
				m := e.c.metrics(t)
				maxHeld = max(maxHeld, sum(m, "tally_collector_plog_defrag_bytes"))
				got := sum(m, "tally_collector_plog_cache_hits_total") + sum(m, "tally_collector_plog_cache_misses_total") - base
				return got >= sent, fmt.Sprintf("%v of %v fragments read", got, sent)
			})
		}
	}
	ids := make([]string, honest)
	stormID := uint32(stormIDBase)
	for i := range ids {
		ids[i] = fmt.Sprintf("plog-udp-%s-%03d", e.prefix, i)
		note := plogNote(ids[i])
		hf, err := plog.Fragments(uint32(honestIDBase+i), note, nil, len(note)/3+1)
		if err != nil || len(hf) != 3 {
			t.Fatalf("%d fragments, %v", len(hf), err)
		}
		for _, f := range hf {
			send(good, f)
			for range perGap {
				stormID++
				binary.BigEndian.PutUint32(stormFrag[headerIDOffset:], stormID)
				send(storm, stormFrag)
			}
		}
	}
	testkit.WaitUntil(t, 30*time.Second, "every UDP datagram read", func() (bool, string) {
		got := received() - base
		return got >= sent, fmt.Sprintf("%v of %v fragments read", got, sent)
	})
	m := e.c.metrics(t)
	t.Logf("plog UDP: %d storm fragments announcing %d bytes each among %d honest messages; defragmenter held at most %v bytes when looked at, %v evictions, %v socket drops",
		stormID-stormIDBase, announced, honest, maxHeld, sum(m, "tally_collector_plog_cache_evictions_total"), sum(m, "tally_collector_plog_socket_drops_total"))
	if maxHeld > defragBound {
		t.Errorf("the defragmenter held %v bytes, over its bound %d", maxHeld, defragBound)
	}
	testkit.WaitUntil(t, time.Minute, "the honest UDP messages at the Reporting API", func() (bool, string) {
		n := countEvents(t, e, ids)
		return n == len(ids), fmt.Sprintf("%d of %d honest messages delivered", n, len(ids))
	})
	return ids
}

// floodHTTP opens n connections to the collector's HTTP address, each
// sending an unfinished request head, and holds them; /livez answers
// meanwhile and no more than HTTP_MAX_CONNECTIONS (256) stay open.
func floodHTTP(t *testing.T, e *e2e, n int) {
	t.Helper()
	const maxConns = 256 // HTTP_MAX_CONNECTIONS's default
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	livez := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range n {
		c, err := net.DialTimeout("tcp", e.c.httpAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: slow\r\n")
		if i%500 == 499 {
			resp, err := livez.Get("http://" + e.c.httpAddr + "/livez")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("/livez during the HTTP flood (%d connections): %v", i+1, err)
			}
			if resp != nil {
				_ = resp.Body.Close()
			}
		}
	}
	m := e.c.metrics(t)
	open := sum(m, "tally_collector_http_connections")
	t.Logf("HTTP: %d slow connections made, %v open, %v evicted", n, open, sum(m, `tally_collector_http_refused_total`, `reason="evicted"`))
	if open > maxConns {
		t.Errorf("%v HTTP connections open, over the cap %d", open, maxConns)
	}
}
