# Built-in mappers: one WebAssembly module per OpenStack service, and one for
# the local message channel, embedded into the binary by package mappers
# (mappers/dist). Go alone builds them: they are all of `make wasm`, the part
# of `make build` that is WebAssembly.

MAPPER_NAMES := nova cinder neutron glance octavia manila designate swift trove ironic channel
MAPPER_WASM := $(MAPPER_NAMES:%=mappers/dist/%.wasm)
# Each module's manifest, recorded beside it by the same build and embedded
# with it: a start knows what every built-in claims without compiling it.
MAPPER_MANIFESTS := $(MAPPER_NAMES:%=mappers/dist/%.manifest.json)
MAPPER_RECORD_SRC := mappers/internal/recordmanifest/main.go $(filter-out %_test.go,$(wildcard runtime/*.go runtime/internal/*/*.go))
MAPPER_SDK_SRC := $(filter-out %_test.go,$(wildcard wasm-sdk/*.go wasm-sdk/*/*.go wasm-sdk/*/*/*.go))

.PHONY: mappers
mappers: $(MAPPER_WASM) $(MAPPER_MANIFESTS)
wasm: $(MAPPER_WASM) $(MAPPER_MANIFESTS)

mappers/dist/%.manifest.json: mappers/dist/%.wasm $(MAPPER_RECORD_SRC)
	$(GO) run ./mappers/internal/recordmanifest $<

define mapper_rule
mappers/dist/$(1).wasm: $$(filter-out %_test.go,$$(wildcard mappers/$(1)/*.go)) $$(MAPPER_SDK_SRC) go.mod
	GOOS=wasip1 GOARCH=wasm $$(GO) build -buildmode=c-shared -trimpath -o $$@ ./mappers/$(1)
endef
$(foreach m,$(MAPPER_NAMES),$(eval $(call mapper_rule,$(m))))
