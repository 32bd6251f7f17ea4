//go:build !wasip1

package abi

import (
	"os"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// Host answers field lookups natively from an index of the input, the same
// index the collector builds before calling a guest, so a lookup gives the
// same answer under go test as inside the runtime.
type Host struct {
	idx    *jsonindex.Index
	budget *Budget
}

// Budget bounds the lookups of one native call: the stand-in, under go test,
// for the deadline the collector gives a call. A lookup past it panics with
// ErrBudget, which unwinds the map function wherever it loops.
type Budget struct {
	Left      int  // lookups still allowed
	Exhausted bool // a lookup was refused
}

// NewHost returns a Host answering from idx, within budget when it is not
// nil. Offsets are into idx.Bytes().
func NewHost(idx *jsonindex.Index, budget *Budget) Host { return Host{idx: idx, budget: budget} }

// Field looks path up and returns the packed result the field import would.
func (h Host) Field(path string) uint64 {
	if b := h.budget; b != nil {
		if b.Left <= 0 {
			b.Exhausted = true
			panic(ErrBudget)
		}
		b.Left--
	}
	if h.idx == nil {
		return 0
	}
	k, start, end := h.idx.Lookup(path)
	return Pack(uint8(k), start, end-start)
}

// Fields looks every path up and stores the packed results in out, which
// must be at least as long as paths: what the fields import answers.
func (h Host) Fields(paths []string, out []uint64) {
	for i, p := range paths {
		out[i] = h.Field(p)
	}
}

var levelNames = [...]string{"debug", "info", "warn", "error"}

// Log writes msg to standard error, prefixed with its level.
func Log(level int32, msg string) {
	name := "info"
	if level >= 0 && int(level) < len(levelNames) {
		name = levelNames[level]
	}
	b := make([]byte, 0, len(msg)+len(name)+16)
	b = append(b, "tally "...)
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, msg...)
	b = append(b, '\n')
	_, _ = os.Stderr.Write(b) // a log line that standard error refuses has nowhere else to go
}
