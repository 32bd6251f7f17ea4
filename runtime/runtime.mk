# Build rules of the runtime package: the WAT test modules under runtime/testdata
# (part of `make test-wasm`, needs wabt).
# Included by the top-level Makefile.

RUNTIME_WAT := $(wildcard runtime/testdata/*.wat)
RUNTIME_WASM := $(RUNTIME_WAT:.wat=.wasm)

test-wasm: $(RUNTIME_WASM)

runtime/testdata/%.wasm: runtime/testdata/%.wat
	$(WAT2WASM) -o $@ $<
