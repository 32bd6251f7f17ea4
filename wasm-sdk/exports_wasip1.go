//go:build wasip1

package sdk

import (
	"unsafe"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi"
)

// The ABI v1 exports. The SDK owns them; a mapper only calls Register.

// maxInput is the largest input tally_alloc accepts: tally.field spans address
// at most 2^28 bytes. Anything larger answers 0 rather than risk the Go
// runtime's fatal out-of-memory error.
const maxInput = 1<<28 - 1

var (
	input []byte // the input buffer handed out by tally_alloc, reused and grown
	guest runner
)

//go:wasmexport tally_abi_version_1
func tallyABIVersion1() {}

// tallyAlloc returns the input buffer, grown to hold size bytes. Growth
// doubles so a stream of slightly larger inputs does not reallocate each time.
//
//go:wasmexport tally_alloc
func tallyAlloc(size int32) uint32 {
	if size < 0 || size > maxInput {
		return 0
	}
	if int(size) > cap(input) || cap(input) == 0 {
		n := max(2*cap(input), int(size), 4096)
		input = make([]byte, n)
	}
	input = input[:cap(input)]
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(input))))
}

//go:wasmexport tally_manifest
func tallyManifest() uint64 {
	return pack(registered.manifest)
}

//go:wasmexport tally_map
func tallyMap(ptr, n uint32) uint64 {
	base := uint32(uintptr(unsafe.Pointer(unsafe.SliceData(input))))
	switch {
	case registered.f == nil:
		return pack(guest.fail("sdk: no mapper registered (call sdk.Register from init)"))
	case n == 0:
		// An empty input: the host passes tally_map(0, 0) without calling
		// tally_alloc. Map it like any other input (every lookup is missing).
		return pack(guest.run(registered.f, nil, abi.Host{}))
	case ptr != base || int(n) > len(input):
		return pack(guest.fail("sdk: tally_map input is not the region tally_alloc returned"))
	}
	return pack(guest.run(registered.f, input[:n:n], abi.Host{}))
}

// fail answers the call with {"error": reason} without running a mapper.
func (r *runner) fail(reason string) []byte {
	r.out.reset()
	r.out.Error(reason)
	return r.out.finish()
}

// pack returns (ptr << 32) | len for b.
func pack(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))<<32 | uint64(len(b))
}
