# Build rules of the catalogue's tests: WAT variants of small mapper modules
# under runtime/catalog/testdata (part of `make test-wasm`, needs wabt).
# Included by the top-level Makefile.

CATALOG_WAT := $(wildcard runtime/catalog/testdata/*.wat)
CATALOG_WASM := $(CATALOG_WAT:.wat=.wasm)

test-wasm: $(CATALOG_WASM)

runtime/catalog/testdata/%.wasm: runtime/catalog/testdata/%.wat
	$(WAT2WASM) -o $@ $<
