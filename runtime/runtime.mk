# Build rules of the runtime package: the WAT test modules under runtime/testdata.
# Included by the top-level Makefile.

RUNTIME_WAT := $(wildcard runtime/testdata/*.wat)
RUNTIME_WASM := $(RUNTIME_WAT:.wat=.wasm)

wasm: $(RUNTIME_WASM)

runtime/testdata/%.wasm: runtime/testdata/%.wat
	$(WAT2WASM) -o $@ $<
