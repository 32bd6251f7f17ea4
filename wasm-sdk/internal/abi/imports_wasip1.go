//go:build wasip1

package abi

import "unsafe"

// The raw imports. A Go string parameter is passed as two i32 (pointer,
// length), which is exactly the (ptr, len) pair of the ABI.

//go:wasmimport tally field
//go:noescape
func field(path string) uint64

//go:wasmimport tally fields
//go:noescape
func fields(table unsafe.Pointer, count int32, out unsafe.Pointer) int32

//go:wasmimport tally log
//go:noescape
func log(level int32, msg string)

// Host answers field lookups for the current tally_map call. In a guest it is
// empty: the host keeps the parsed input on its side.
type Host struct{}

// Field looks path up in the current input (ABI path syntax) and returns the
// packed result of the field import. Offsets are relative to the input
// pointer passed to tally_map.
func (Host) Field(path string) uint64 { return field(path) }

// table holds the (ptr, len) pairs of one Fields call, reused.
var table []uint32

// Fields looks every path up with one tally.fields call and stores the
// packed results in out, which must be at least as long as paths.
func (Host) Fields(paths []string, out []uint64) {
	n := len(paths)
	if n == 0 {
		return
	}
	if cap(table) < 2*n {
		table = make([]uint32, 2*n)
	}
	t := table[:2*n]
	for i, p := range paths {
		t[2*i] = uint32(uintptr(unsafe.Pointer(unsafe.StringData(p))))
		t[2*i+1] = uint32(len(p))
	}
	if fields(unsafe.Pointer(unsafe.SliceData(t)), int32(n), unsafe.Pointer(unsafe.SliceData(out[:n]))) != int32(n) {
		clear(out[:n]) // the host refused the call: everything missing
	}
}

// Log writes msg to the collector's log at level (0 debug .. 3 error).
func Log(level int32, msg string) { log(level, msg) }

//go:wasmimport tally emit
//go:noescape
func emit(ops unsafe.Pointer, count int32) int32

// Emit hands the operations of one tally_map call to the host, which writes
// the events; it reports whether the host took them. The memory the
// operations point to must stay unchanged until Emit returns.
func Emit(ops []Op) bool {
	return emit(unsafe.Pointer(unsafe.SliceData(ops)), int32(len(ops))) == 0
}
