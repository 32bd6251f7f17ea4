//go:build wasip1

package abi

// The raw imports. A Go string parameter is passed as two i32 (pointer,
// length), which is exactly the (ptr, len) pair of the ABI.

//go:wasmimport tally field
//go:noescape
func field(path string) uint64

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

// Log writes msg to the collector's log at level (0 debug .. 3 error).
func Log(level int32, msg string) { log(level, msg) }
