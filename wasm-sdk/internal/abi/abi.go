// Package abi holds the raw host imports of ABI v1 (module "tally") and the
// packing of their results. It is the only place in the SDK that declares a
// //go:wasmimport; imports_other.go is its native twin, which answers the same
// calls from a jsonindex.Index so mapper code runs under plain go test.
package abi

import "github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi/kind"

const (
	offsetBits = 28
	lengthBits = 28
	lengthMask = 1<<lengthBits - 1
	offsetMask = 1<<offsetBits - 1
)

// Pack builds a field result: kind in bits 63..56, start in 55..28, length in
// 27..0. Spans that do not fit (inputs over 256 MiB) pack as missing.
func Pack(k uint8, start, length int) uint64 {
	if k == kind.Missing || start < 0 || length < 0 || start > offsetMask || length > lengthMask {
		return 0
	}
	return uint64(k)<<56 | uint64(start)<<lengthBits | uint64(length)
}

// Unpack splits a field result into its kind, start offset and length.
func Unpack(p uint64) (kind uint8, start, length int) {
	return uint8(p >> 56), int(p >> lengthBits & offsetMask), int(p & lengthMask)
}
