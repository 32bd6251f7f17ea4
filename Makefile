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

# Stamped into the binary (tally-openstack-collector version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: all build wasm test bench bench-e2e run clean
all: build

# Each component adds its own targets and prerequisites of `wasm` in its .mk file.
include $(wildcard runtime/*.mk runtime/*/*.mk wasm-sdk/*.mk mappers/*.mk examples/*.mk examples/*/*.mk)

build: wasm
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/tally-openstack-collector ./cmd/tally-openstack-collector

# The whole product on this machine: reference Reporting API, notifications
# published into the local RabbitMQ, the collector between them.
run: build
	examples/run/run.sh

test: wasm
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 14m ./...

# Package benchmarks, then the end-to-end one (a bare AMQP drain against the
# collector on the same queue; see docs/performance.md).
bench: wasm
	$(GO) test -run '^$$' -bench . -benchmem $$($(GO) list ./... | grep -v '/cmd/tally-openstack-collector$$')
	$(MAKE) bench-e2e

bench-e2e: wasm
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkEndToEnd$$' -benchtime 1x -timeout 20m ./cmd/tally-openstack-collector

clean:
	rm -rf bin .cache mappers/dist/*.wasm
