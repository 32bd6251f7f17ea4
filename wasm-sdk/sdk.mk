# Go guest SDK, a module of its own (wasm-sdk/go.mod): the test guests under
# wasm-sdk/testdata/ (part of `make test-wasm`; Go alone builds them, inside the
# SDK's module). The tests that run them in wazero are runtime/sdkguests'.
#   noop.wasm      answers {"events":[]}: the bare ABI round trip of a Go guest
#   sample.wasm    a small nova mapping: conformance tests and benchmarks
#   memstats.wasm  the sample plus the guest's own allocation counter (SDK tests)
#   clockrand.wasm reads the clocks and crypto/rand, and sleeps (runtime sandbox tests)

SDK_GUESTS := noop sample memstats clockrand
SDK_SRC := wasm-sdk/go.mod $(shell find wasm-sdk -name '*.go' -not -name '*_test.go')

wasm-sdk/testdata/%.wasm: $(SDK_SRC)
	cd wasm-sdk && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o testdata/$*.wasm ./testdata/$*

test-wasm: $(SDK_GUESTS:%=wasm-sdk/testdata/%.wasm)

.PHONY: clean-wasm-sdk
clean-wasm-sdk:
	rm -f $(SDK_GUESTS:%=wasm-sdk/testdata/%.wasm)
clean: clean-wasm-sdk
