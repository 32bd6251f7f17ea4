package daemon

// The bound on the HTTP server's connections, with a share kept for the probes.

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
)

// Reasons of tally_collector_http_refused_total.
const (
	refusedEvicted = "evicted" // an open connection not serving a request, closed for a new one
	refusedFull    = "full"    // a new connection closed at once: every open one was serving a request
	refusedBusy    = "busy"    // a request other than a probe answered 503: the general share was serving
)

// connLimit is the HTTP server's listener, bounded: at most max connections
// are open at once, whatever the clients do, so a flood of slow connections
// holds at most max connections' memory (about 20 KiB each: a goroutine,
// its read buffer, the socket).
//
// The bound alone would let such a flood starve the probes: a slot held by a
// client that never finishes its request is a slot /livez cannot have. So:
//
//   - At the bound, a new connection closes the oldest open one that is not
//     serving a request: one still sending its request head (the slow
//     client's), or one idle between two requests. A probe's connection,
//     which sends its request at once, is served before a flood's later
//     connections reach it; the flood displaces itself.
//   - Requests other than /livez and /readyz are served on at most general
//     (max less an eighth) connections at once; more are answered 503 at once
//     and their connections closed. So the slow readers of /metrics or of a
//     control route can hold at most general connections serving, and the
//     rest, the probes' share, can always be displaced by a new connection.
//   - When every connection is serving a request anyway (the probes' share
//     taken by probes whose answers are not read), the new connection is
//     closed at once. A probe's answer is a few bytes: it fits the socket's
//     buffer, and its connection is idle again as soon as it is written.
//
// Every refusal is counted in tally_collector_http_refused_total by reason and
// logged, sampled. Safe for concurrent use; the server's ConnState must be
// connState, and its handler wrapped by serveLimited.
type connLimit struct {
	net.Listener
	max, general int

	mu    sync.Mutex
	conns list.List // *limitedConn, oldest first

	busy    atomic.Int64 // requests other than probes being served
	open    prometheus.Gauge
	refused *prometheus.CounterVec
	log     zerolog.Logger // sampled
}

// probeShare is the part of the connections kept for the probes: an eighth,
// two at the least.
func probeShare(maxConns int) int {
	return max(2, maxConns/8)
}

func newConnLimit(ln net.Listener, maxConns int, log zerolog.Logger, reg prometheus.Registerer) (*connLimit, error) {
	l := &connLimit{
		Listener: ln,
		max:      maxConns,
		general:  maxConns - probeShare(maxConns),
		open: imetrics.Gauge("tally_collector_http_connections",
			"Connections open to the HTTP server (HTTP_ADDR), at most HTTP_MAX_CONNECTIONS."),
		refused: imetrics.CounterVec("tally_collector_http_refused_total",
			"Connections and requests the HTTP server's bound refused, by reason: evicted (an open connection not serving a request, closed for a new one), full (a new connection closed at once, every open one serving), busy (a request other than a probe answered 503).",
			imetrics.By("reason", refusedEvicted, refusedFull, refusedBusy)),
		// At most 5 refusals a minute reach the log; the counter has them all.
		log: log.Sample(&zerolog.BurstSampler{Burst: 5, Period: time.Minute}),
	}
	if err := imetrics.Register(reg, l.open, l.refused); err != nil {
		return nil, err
	}
	return l, nil
}

// limitedConn is a connection of a connLimit. Its fields but Conn are guarded
// by the connLimit's mu.
type limitedConn struct {
	net.Conn
	l       *connLimit
	elem    *list.Element // nil once closed or evicted
	serving bool          // a request was read and is being answered
}

// Accept answers the next connection within the bound, displacing the oldest
// one not serving a request when at it, and closing at once those it cannot
// make room for.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l}
		l.mu.Lock()
		var evicted *limitedConn
		if l.conns.Len() >= l.max {
			for e := l.conns.Front(); e != nil; e = e.Next() {
				if old := e.Value.(*limitedConn); !old.serving {
					evicted = old
					l.removeLocked(old)
					break
				}
			}
		}
		admitted := l.conns.Len() < l.max
		if admitted {
			lc.elem = l.conns.PushBack(lc)
			l.open.Inc()
		}
		l.mu.Unlock()
		// Counted before the close, which is what a client sees.
		if evicted != nil {
			l.refused.WithLabelValues(refusedEvicted).Inc()
			_ = evicted.Conn.Close()
			l.log.Warn().Int("max", l.max).Str("closed", evicted.RemoteAddr().String()).
				Msg("HTTP connection bound reached: closed the oldest connection not serving a request")
		}
		if admitted {
			return lc, nil
		}
		l.refused.WithLabelValues(refusedFull).Inc()
		_ = c.Close()
		l.log.Warn().Int("max", l.max).Str("remote", c.RemoteAddr().String()).
			Msg("HTTP connection bound reached and every connection serving: closed a new one")
	}
}

func (l *connLimit) removeLocked(c *limitedConn) {
	if c.elem == nil {
		return
	}
	l.conns.Remove(c.elem)
	c.elem = nil
	l.open.Dec()
}

// Close closes the connection and frees its slot.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.removeLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// connState is the server's ConnState: it tells which connections serve a
// request.
func (l *connLimit) connState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateActive, http.StateHijacked:
		c.serving = true
	case http.StateNew, http.StateIdle:
		c.serving = false
	case http.StateClosed:
		l.removeLocked(c)
	}
}

// isProbe tells a request of the probes' share.
func isProbe(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/livez" || r.URL.Path == "/readyz")
}

// serveLimited serves next within the general share: a request other than a
// probe, past it, is answered 503 at once and its connection closed.
func (l *connLimit) serveLimited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isProbe(r) {
			next.ServeHTTP(w, r)
			return
		}
		if l.busy.Add(1) > int64(l.general) {
			l.busy.Add(-1)
			l.refused.WithLabelValues(refusedBusy).Inc()
			l.log.Warn().Int("general", l.general).Str("remote", r.RemoteAddr).
				Msg("HTTP requests other than the probes at their bound: answered 503")
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "1")
			plain(w, http.StatusServiceUnavailable, "busy\n")
			return
		}
		defer l.busy.Add(-1)
		next.ServeHTTP(w, r)
	})
}
