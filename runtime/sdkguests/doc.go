// Package sdkguests holds the tests that run the Go SDK's test guests
// (wasm-sdk/testdata, built by `make test-wasm`) in wazero: behind a minimal
// host written against docs/abi.md, and through the collector's own runtime
// (the conformance suite and the per-call benchmarks). They live in the
// collector's module because they need wazero, and the SDK's module
// (wasm-sdk/go.mod) requires nothing outside the standard library. The
// package has no code of its own.
package sdkguests
