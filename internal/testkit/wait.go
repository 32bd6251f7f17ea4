package testkit

import (
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
