// Package backoff is the one retry schedule of the collector: capped
// exponential steps, optionally with full jitter.
//
// The step of attempt n (from 0) is Min·2ⁿ, capped at Max. Without jitter the
// delay is the step itself, a deterministic schedule (a probe, a pause, a
// local retry). With jitter the delay is drawn uniformly in [0, step] ("full
// jitter"): retries of many clients against one failed service spread over
// the whole step instead of arriving together, and the average wait is half
// the step. A delay may therefore be short, even zero; callers that need a
// floor do not use jitter.
//
// Accepting is the one accept loop of the collector's listeners, which
// waits on the Accept schedule after a failed accept.
package backoff

import (
	"errors"
	"math/rand/v2"
	"net"
	"time"
)

// Source draws the jitter; *rand.Rand satisfies it. Nil means the global
// source of math/rand/v2.
type Source interface {
	Int64N(n int64) int64
}

// Policy is a capped exponential schedule. The zero Max means no cap beyond
// the largest time.Duration.
type Policy struct {
	Min, Max time.Duration
	Jitter   bool   // full jitter: each delay uniform in [0, step]
	Rand     Source // nil: math/rand/v2
}

// Step is the step of attempt n (0 is the first): Min·2ⁿ capped at Max,
// without overflow. A Min of zero or less is 1 ns.
func (p Policy) Step(n int) time.Duration {
	d := max(p.Min, 1)
	limit := p.Max
	if limit <= 0 {
		limit = time.Duration(1<<63 - 1)
	}
	for range max(n, 0) {
		if d >= limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}

// Delay is the wait before attempt n: the step, or with Jitter a uniform
// draw in [0, step].
func (p Policy) Delay(n int) time.Duration {
	d := p.Step(n)
	if !p.Jitter {
		return d
	}
	if p.Rand != nil {
		return time.Duration(p.Rand.Int64N(int64(d) + 1))
	}
	return time.Duration(rand.Int64N(int64(d) + 1)) //nolint:gosec // G404: jitter spreads retries; nothing depends on it being unpredictable
}

// Backoff walks a Policy: Next returns the delay of the next attempt, Reset
// starts over (after a success). Not safe for concurrent use.
type Backoff struct {
	Policy
	n int
}

// New returns a Backoff at its first attempt.
func New(p Policy) *Backoff { return &Backoff{Policy: p} }

// Next returns the delay before the next attempt and moves on.
func (b *Backoff) Next() time.Duration {
	d := b.Delay(b.n)
	if b.n < 64 {
		b.n++
	}
	return d
}

// Reset starts the schedule over at Min.
func (b *Backoff) Reset() { b.n = 0 }

// Attempts is the number of delays handed out since the last Reset.
func (b *Backoff) Attempts() int { return b.n }

// Accept is the wait of a listener after a failed accept (out of file
// descriptors, say): 5 ms doubling to 1 s, no jitter (only this process
// retries), back to 5 ms after a connection is accepted. The plog TCP
// listener and the channel's server both use it.
var Accept = Policy{Min: 5 * time.Millisecond, Max: time.Second}

// Accepting is a listener's accept loop on the Accept schedule. It hands each
// connection accept returns to take; after a failed accept it tells failed
// the error and the wait, and waits. It returns when accept reports
// net.ErrClosed (the listener was closed) or take returns false.
func Accepting[C any](accept func() (C, error), failed func(err error, wait time.Duration), take func(C) bool) {
	retry := New(Accept)
	for {
		c, err := accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			d := retry.Next()
			failed(err, d)
			time.Sleep(d)
			continue
		}
		retry.Reset()
		if !take(c) {
			return
		}
	}
}
