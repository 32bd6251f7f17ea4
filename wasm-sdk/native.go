//go:build !wasip1

package sdk

import (
	"fmt"
	"sync"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// nativeRunner is what one tally_map call needs natively: the index the host
// would have built, and the guest's reusable state.
type nativeRunner struct {
	idx    jsonindex.Index
	budget abi.Budget
	r      runner
}

// MaxNativeLookups bounds the field lookups of one native call (MapJSON):
// where the collector stops a call at its deadline, a native run stops a map
// function at its MaxNativeLookups+1st lookup, deterministically, so that a
// test or fuzz target finds a loop instead of hanging. A built-in mapper
// makes a few dozen lookups per event, a few thousand at most.
const MaxNativeLookups = 1 << 16

// run indexes input (a non-JSON input answers every lookup Missing, as in the
// runtime) and maps it with f. The result is valid until the next run.
func (n *nativeRunner) run(f MapFunc, input []byte) []byte {
	if err := n.idx.Parse(input); err != nil {
		n.idx.SetRaw(input)
	}
	n.budget = abi.Budget{Left: MaxNativeLookups}
	return n.r.run(f, n.idx.Bytes(), abi.NewHost(&n.idx, &n.budget))
}

var nativeRunners = sync.Pool{New: func() any { return new(nativeRunner) }}

// MapJSON runs f natively on input, the way the runtime would run it inside a
// module, and returns the tally_map output document: {"events":[...]} or
// {"error":"..."}. Field lookups are answered by the same indexer the
// collector uses. The document is the caller's. The error is non-nil, with the
// {"error":"panic: ..."} document, wrapping ErrPanic when f panicked, or
// ErrLookupBudget when f made more than MaxNativeLookups lookups. Safe for
// concurrent use.
//
// The host adds "source" to each event after the call; MapJSON does not.
func MapJSON(f MapFunc, input []byte) ([]byte, error) {
	if f == nil {
		return nil, ErrNilMapFunc
	}
	n := nativeRunners.Get().(*nativeRunner)
	defer nativeRunners.Put(n)
	doc := n.run(f, input)
	out := append([]byte(nil), doc...)
	if n.budget.Exhausted {
		return out, fmt.Errorf("%w: more than %d lookups", ErrLookupBudget, MaxNativeLookups)
	}
	if n.r.panicked {
		return out, fmt.Errorf("%w: %s", ErrPanic, n.r.out.errMsg)
	}
	return out, nil
}
