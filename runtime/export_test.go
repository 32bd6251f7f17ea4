package runtime

import (
	"context"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// Grow makes m start n instances by holding n calls' worth of instances at
// once, then releases them (tests).
func Grow(tb testing.TB, m *Module, n int, in *jsonindex.Index, src Source) {
	ctx := context.Background()
	var held []*instance
	for range n {
		inst, err := m.acquire(ctx, false)
		if err != nil {
			tb.Fatal(err)
		}
		if _, _, err := inst.call(in, src, m.e.cfg.CallTimeout); err != nil {
			tb.Fatal(err)
		}
		held = append(held, inst)
	}
	for _, inst := range held {
		m.release(inst, true)
	}
}

// MemorySize returns the linear memory size of an idle instance of m (tests).
func MemorySize(m *Module) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.idle) == 0 {
		return 0
	}
	return m.idle[len(m.idle)-1].mem.Size()
}

// MostCharged returns the most instructions a metered call of m was charged
// (tests).
func MostCharged(m *Module) int64 { return m.charged.Load() }

// TrustAfter is trustAfter, for the test that counts the calls to trust.
const TrustAfter = trustAfter

// IsGuardedCall is isGuardedCall, for the test of GuardedCall's context.
var IsGuardedCall = isGuardedCall
