package plog

import (
	"net/netip"
	"time"

	"github.com/rs/zerolog"
)

// Command packets are limited per source address: a token bucket of
// commandBurst, refilled at commandRate a second. The table of buckets holds
// commandSources addresses at most; beyond that (a flood of forged sources)
// new sources share one bucket, so the limit holds whatever the table.
const (
	commandRate    = 10
	commandBurst   = 20
	commandSources = 1024
)

// defaultTrusted are the sources that get STAT and ENVI answers and may send
// KILL when Options.TrustedSources is empty: loopback.
var defaultTrusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

type bucket struct {
	tokens float64
	last   time.Time
}

func (b *bucket) refill(now time.Time, rate, burst float64) {
	if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = min(burst, b.tokens+d*rate)
	}
	b.last = now
}

// commandLimiter is used by one listener's reader alone: no lock.
type commandLimiter struct {
	rate, burst float64
	max         int
	buckets     map[netip.Addr]*bucket
	shared      bucket // sources beyond the table
	lastSweep   time.Time
}

func newCommandLimiter(max int, rate, burst float64) *commandLimiter {
	return &commandLimiter{rate: rate, burst: burst, max: max, buckets: make(map[netip.Addr]*bucket, max),
		shared: bucket{tokens: burst}}
}

// allow takes a token from a's bucket, if it has one.
func (l *commandLimiter) allow(a netip.Addr, now time.Time) bool {
	b, ok := l.buckets[a]
	if !ok {
		if len(l.buckets) >= l.max {
			l.sweep(now)
		}
		if len(l.buckets) >= l.max {
			b = &l.shared
		} else {
			b = &bucket{tokens: l.burst, last: now}
			l.buckets[a] = b
		}
	}
	b.refill(now, l.rate, l.burst)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// sweep forgets the sources whose bucket has filled up again (idle for
// burst/rate seconds at least), at most once a second.
func (l *commandLimiter) sweep(now time.Time) {
	if !l.lastSweep.IsZero() && now.Sub(l.lastSweep) < time.Second {
		return
	}
	l.lastSweep = now
	for a, b := range l.buckets {
		b.refill(now, l.rate, l.burst)
		if b.tokens >= l.burst {
			delete(l.buckets, a)
		}
	}
}

// trusted reports whether a source address is in the trusted set.
func trusted(set []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range set {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// sampledLog is the logger of refused and dropped commands, and of TCP
// connections closed for the line budget: at most 5 lines a minute per
// listener and kind, whatever arrives (the counters have them all).
func sampledLog(log zerolog.Logger) zerolog.Logger {
	return log.Sample(&zerolog.BurstSampler{Burst: 5, Period: time.Minute})
}
