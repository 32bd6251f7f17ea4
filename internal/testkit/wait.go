package testkit

import (
	"context"
	"sync"
	"testing"
	"time"
)

// WaitFor polls cond until it holds, and fails the test when it still does
// not after d. It polls every 10 ms at first, then less often (up to every
// 100 ms), so that a long wait on a costly condition does not load the
// machine. d bounds a background reaction (a consumer
// reconnecting, a file noticed); it is not a performance assertion, so give
// it room for a busy machine.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	WaitUntil(tb, d, what, func() (bool, string) { return cond(), "" })
}

// WaitUntil is WaitFor for a condition worth describing when it fails: look
// reports whether the condition holds and, when it does not, the state it
// saw ("4,980 of 5,000 events at the API"), which the failure quotes from
// the last look.
func WaitUntil(tb testing.TB, d time.Duration, what string, look func() (done bool, state string)) {
	tb.Helper()
	deadline := time.Now().Add(d)
	pause := 10 * time.Millisecond
	for {
		done, state := look()
		if done {
			return
		}
		if time.Now().After(deadline) {
			if state != "" {
				tb.Fatalf("timed out after %s waiting for %s; at the last look: %s", d, what, state)
			}
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(pause)
		pause = min(pause*5/4, 100*time.Millisecond)
	}
}

// Background calls run (a Run method) in a goroutine of its own, with a
// context that the returned stop cancels; stop then waits at most limit for
// run to return, and fails the test when it does not. The test's end stops
// it too, and a stop after the first returns at once.
func Background(tb testing.TB, limit time.Duration, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = run(ctx) // the callers' own tests look at what Run did
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(limit):
				tb.Errorf("Run did not return within %s of its context's end", limit)
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}
