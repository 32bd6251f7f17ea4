package runtime

import (
	"crypto/sha256"
	"math/rand/v2"

	"github.com/tetratelabs/wazero/sys"
)

// What a guest sees of time and chance. Nothing here reads a real clock or
// the system's randomness, so that the same input maps to the same events
// (redeliveries are deduplicated by event_id) and no guest can wait on real
// time past its call's deadline (docs/abi.md, "Clocks, sleep and
// randomness").
//
//   - Monotonic time (clock_time_get MONOTONIC) is a counter of the instance:
//     it starts at virtualStart and moves only when the guest sleeps, by
//     exactly the length of the sleep.
//   - Wall time (clock_time_get REALTIME) is wallEpoch at the start of every
//     call, plus what the guest slept in that call.
//   - A sleep (poll_oneoff on a clock) returns at once, having moved the
//     clocks. Sleeps that add up past the call's budget end the call there,
//     with ReasonTimeout.
//   - random_get answers a ChaCha8 stream seeded with the SHA-256 of the
//     call's input (of nothing outside calls: _initialize, the manifest).

// wallEpoch is the wall time at the start of every call:
// 2000-01-01T00:00:00Z.
const wallEpoch = 946684800

// virtualStart is the monotonic clock of a new instance, in nanoseconds.
const virtualStart = int64(1e9)

// vclock is the clock state of one instance, touched only by the goroutine
// running its call.
type vclock struct {
	now       int64 // monotonic nanoseconds
	callStart int64 // now at the start of the current call
	budget    int64 // nanoseconds of sleep the call may take; 0: no limit
}

func (inst *instance) nanotime() int64 { return inst.clk.now }

func (inst *instance) walltime() (sec int64, nsec int32) {
	d := inst.clk.now - inst.clk.callStart
	return wallEpoch + d/1e9, int32(d % 1e9)
}

// nanosleep moves the clocks by ns; a sleep past the call's budget ends at
// the budget and stops the call with a deadline exit, which the call reports
// as ReasonTimeout.
func (inst *instance) nanosleep(ns int64) {
	inst.cc.abortIfExpired()
	if ns <= 0 {
		return
	}
	c := &inst.clk
	if c.budget > 0 && c.now+ns-c.callStart >= c.budget {
		c.now = c.callStart + c.budget
		panic(sys.NewExitError(sys.ExitCodeDeadlineExceeded))
	}
	c.now += ns
}

// beginClock starts the clocks of a call with budget nanoseconds of sleep and
// the call's input as the seed of its randomness.
func (inst *instance) beginClock(budget int64, input []byte) {
	inst.clk.callStart = inst.clk.now
	inst.clk.budget = budget
	inst.rnd.input = input
	inst.rnd.r = nil
}

// guestRand is the random source of one instance: a ChaCha8 stream seeded
// with the SHA-256 of the current call's input, made on the first read of the
// call.
type guestRand struct {
	cc    *callCtx
	input []byte
	r     *rand.ChaCha8
}

func (g *guestRand) Read(p []byte) (int, error) {
	if g.r == nil {
		g.cc.hostEnter() // input is the caller's
		g.r = rand.NewChaCha8(sha256.Sum256(g.input))
		g.cc.hostExit()
	}
	return g.r.Read(p)
}
