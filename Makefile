# tally-openstack-collector
#
#   make build   the binary at bin/tally-openstack-collector, built-in mappers inside
#   make test    every test (starts nothing itself: see .ci/run for the services)
#   make run     the whole product on this machine (see README.md)
#   make bench   the benchmarks

SHELL := /bin/bash
GO ?= go
export GOFLAGS ?= -buildvcs=false

# Tools for the Wasm builds (Debian packages: wabt, clang-14, lld-14, wasi-libc).
WAT2WASM ?= wat2wasm
CLANG ?= clang-14

# Compiled-module cache shared by the tests, so each package does not recompile.
export TALLY_OSC_TEST_CACHE ?= $(CURDIR)/.cache/wazero

.PHONY: all build wasm test bench run clean
all: build

# Each component adds its own targets and prerequisites of `wasm` in its .mk file.
include $(wildcard runtime/*.mk wasm-sdk/*.mk mappers/*.mk examples/*.mk examples/*/*.mk)

build: wasm
	$(GO) build -o bin/tally-openstack-collector ./cmd/tally-openstack-collector

test: wasm
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 14m ./...

bench: wasm
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin .cache mappers/dist/*.wasm
