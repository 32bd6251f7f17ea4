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
MAPPER_SDK_SRC := wasm-sdk/go.mod $(filter-out %_test.go,$(wildcard wasm-sdk/*.go wasm-sdk/*/*.go wasm-sdk/*/*/*.go))

.PHONY: mappers
mappers: $(MAPPER_WASM) $(MAPPER_MANIFESTS)
wasm: $(MAPPER_WASM) $(MAPPER_MANIFESTS)

mappers/dist/%.manifest.json: mappers/dist/%.wasm $(MAPPER_RECORD_SRC)
	$(GO) run ./mappers/internal/recordmanifest $<

define mapper_rule
mappers/dist/$(1).wasm: $$(filter-out %_test.go,$$(wildcard mappers/$(1)/*.go)) $$(MAPPER_SDK_SRC) go.mod go.sum
	GOOS=wasip1 GOARCH=wasm $$(GO) build -buildmode=c-shared -trimpath -o $$@ ./mappers/$(1)
endef
$(foreach m,$(MAPPER_NAMES),$(eval $(call mapper_rule,$(m))))

# make mapper NAME=x builds the mapper of directory mappers/x (MAPPER_DIR=DIR
# for one elsewhere, inside this module or in a module of its own) into
# bin/mappers/x.wasm: a drop-in, to copy into TALLY_OSC_MAPPERS_DIR or to run
# with --mappers bin/mappers. Never into mappers/dist, whose modules the next
# make build embeds as built-ins. `tally-openstack-collector mapper new x`
# writes such a directory (docs/writing-mappers.md).
MAPPER_DIR ?= mappers/$(NAME)
.PHONY: mapper
mapper:
	@test -n "$(NAME)" || { echo 'usage: make mapper NAME=x [MAPPER_DIR=DIR]: builds DIR (mappers/x) into bin/mappers/x.wasm' >&2; exit 2; }
	@test -d "$(MAPPER_DIR)" || { echo 'make mapper: no directory $(MAPPER_DIR) (tally-openstack-collector mapper new $(NAME) writes one)' >&2; exit 2; }
	mkdir -p bin/mappers
	cd $(MAPPER_DIR) && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $(CURDIR)/bin/mappers/$(NAME).wasm .
