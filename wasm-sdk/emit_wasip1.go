//go:build wasip1

package sdk

import (
	"unsafe"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/timestamp"
)

// In a guest the Event builder does not write JSON: it records each call as
// an operation of the tally.emit import, and finish hands the table to the
// host, which writes the events (docs/abi.md, "emit"). The host writes
// exactly what the builder writes natively (output.go), so a mapper's
// events are the same either way.
const emitOps = true

// opTable is the operations of one call, and the bytes they point to that
// are not in the input: keys and text are copied into arena, since the
// table holds addresses as integers, which the garbage collector does not
// follow (and a pointer kept to the caller's string would move every
// string a mapper builds to the heap). Offsets into arena are marked in the
// code and turned into addresses by emitFinish, once arena has stopped
// growing.
type opTable struct {
	ops   []abi.Op
	arena []byte
}

// Marks of an operation whose key or value is an offset into arena (never
// sent: emitFinish clears them).
const (
	keyInArena = 1 << 30
	valInArena = 1 << 29
)

func (t *opTable) reset() {
	t.ops = t.ops[:0]
	t.arena = t.arena[:0]
}

// op appends an operation with key and the value (a, b). It is kept small,
// with the growth of the table and the arena out of line: a guest charges
// its budget by the size of a function's body at every call.
func (o *Output) op(code uint32, key string, a, b uint32) {
	t := &o.ops
	n := len(t.ops)
	if n == cap(t.ops) {
		t.growOps()
	}
	t.ops = t.ops[:n+1]
	op := &t.ops[n]
	op.Code, op.KeyPtr, op.KeyLen, op.A, op.B = code, 0, uint32(len(key)), a, b
	if len(key) > 0 {
		op.Code |= keyInArena
		op.KeyPtr = t.put(key)
	}
}

// put copies s into the arena and returns its offset there.
func (t *opTable) put(s string) uint32 {
	at := len(t.arena)
	if cap(t.arena)-at < len(s) {
		t.growArena(len(s))
	}
	t.arena = t.arena[:at+len(s)]
	copy(t.arena[at:], s)
	return uint32(at)
}

//go:noinline
func (t *opTable) growOps() {
	t.ops = append(t.ops[:cap(t.ops)], abi.Op{})[:len(t.ops)]
}

//go:noinline
func (t *opTable) growArena(n int) {
	b := make([]byte, len(t.arena), max(2*cap(t.arena), len(t.arena)+n, 1024))
	copy(b, t.arena)
	t.arena = b
}

// opBytes appends an operation whose value is b: an offset into the input
// when b lies in it, else a copy.
func (o *Output) opBytes(code uint32, key string, b []byte) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	in := guest.msg.raw
	if base := uintptr(unsafe.Pointer(unsafe.SliceData(in))); p >= base && p+uintptr(len(b)) <= base+uintptr(len(in)) {
		o.op(code|abi.OpFromInput, key, uint32(p-base), uint32(len(b)))
		return
	}
	o.op(code|valInArena, key, o.ops.put(unsafe.String(unsafe.SliceData(b), len(b))), uint32(len(b)))
}

func (o *Output) emitText(key, val string) {
	o.op(abi.OpText|valInArena, key, o.ops.put(val), uint32(len(val)))
}

func (o *Output) emitInt(key string, n int64) {
	o.op(abi.OpInt, key, uint32(uint64(n)), uint32(uint64(n)>>32))
}

func (o *Output) emitBool(key string, b bool) {
	var v uint32
	if b {
		v = 1
	}
	o.op(abi.OpBool, key, v, 0)
}

// emitTimestamp records v for the host to convert, when it is a timestamp
// (checked here: the caller is told whether it was written).
func (o *Output) emitTimestamp(key string, v Value) bool {
	var ts [40]byte
	if _, ok := timestamp.Append(ts[:0], v.raw); !ok {
		return false
	}
	o.opBytes(abi.OpTime, key, v.raw)
	return true
}

// emitFinish hands the operations to the host; the call then answers 0
// (no document: the host has the events).
func (o *Output) emitFinish() []byte {
	for ; o.depth > 0; o.depth-- {
		o.op(abi.OpEnd, "", 0, 0)
	}
	base := uint32(uintptr(unsafe.Pointer(unsafe.SliceData(o.ops.arena))))
	for i := range o.ops.ops {
		op := &o.ops.ops[i]
		if op.Code&keyInArena != 0 {
			op.KeyPtr += base
		}
		if op.Code&valInArena != 0 {
			op.A += base
		}
		op.Code &^= keyInArena | valInArena
	}
	abi.Emit(o.ops.ops) // a refusal fails the call on the host's side
	o.ops.reset()
	return nil
}
