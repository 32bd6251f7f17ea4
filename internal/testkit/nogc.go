package testkit

import (
	"runtime/debug"
	"testing"
)

// NoGC turns the garbage collector off for the rest of the test. A
// collection that starts while an unguarded guest runs waits for that guest
// to return, and every goroutine with it, the engine's watchdog included: a
// call would then end unseen past its deadline (the freeze docs/abi.md,
// "Runaway guests", describes). Tests of what the engine does once its
// watchdog sees a deadline call it first.
func NoGC(tb testing.TB) {
	old := debug.SetGCPercent(-1)
	tb.Cleanup(func() { debug.SetGCPercent(old) })
}
