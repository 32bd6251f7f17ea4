package testkit

import (
	"testing"
	"time"
)

// WaitFor polls cond every 10 ms until it holds, and fails the test when it
// still does not after d. d bounds a background reaction (a consumer
// reconnecting, a file noticed); it is not a performance assertion, so give
// it room for a busy machine.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
