// Package cmapper holds a tally mapper written in C (src/mapper.c, with the
// ABI header src/tally.h), which shows that ABI v1 (docs/abi.md) does not
// depend on the Go SDK. It maps nova's compute.instance.exists notification
// to an instance event, the same bytes the Go SDK's sample mapping writes.
// Like the SDK in a guest, it does not write JSON: it describes the event to
// the host as a table of tally_emit operations (docs/abi.md, "emit"), the
// values it read by their offsets in the input, and the host writes the
// event, converting the timestamps.
//
// Build (examples/c-mapper/c-mapper.mk, part of `make test-wasm`):
//
//	clang-14 --target=wasm32-wasi -mexec-model=reactor -O2 -fuse-ld=lld \
//	    -Wl,--strip-all -o examples/c-mapper/c-mapper.wasm examples/c-mapper/src/mapper.c
//
// Debian's clang-14 finds wasi-libc (/usr/lib/wasm32-wasi) and lld-14 by
// itself; -mexec-model=reactor links crt1-reactor.o, which exports
// _initialize instead of _start. Exports are marked with export_name
// attributes, imports with import_module("tally"). Memory comes from
// wasi-libc's malloc; the input buffer is grown with realloc and reused
// across calls, and the table of operations is a static array. The module is
// about 24 KB, against about 1.9 MB for a Go module.
//
// The C sources live in src/ because the go tool refuses .c files beside Go
// files that do not use cgo. The tests load the module into the collector's
// runtime and run it through the ABI conformance suite.
package cmapper
