# Build rules of the runtime package: the WAT test modules under runtime/testdata
# (part of `make test-wasm`, needs wabt).
# Included by the top-level Makefile.

RUNTIME_WAT := $(wildcard runtime/testdata/*.wat)
RUNTIME_WASM := $(RUNTIME_WAT:.wat=.wasm)

test-wasm: $(RUNTIME_WASM)

runtime/testdata/%.wasm: runtime/testdata/%.wat
	$(WAT2WASM) -o $@ $<

# The metering pass's test modules.
METERING_WAT := $(wildcard runtime/internal/metering/testdata/*.wat)
METERING_WASM := $(METERING_WAT:.wat=.wasm)

test-wasm: $(METERING_WASM)

runtime/internal/metering/testdata/%.wasm: runtime/internal/metering/testdata/%.wat
	$(WAT2WASM) -o $@ $<
