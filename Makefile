# tally-openstack-collector
#
#   make build   the binary at bin/tally-openstack-collector, built-in mappers inside
#                (Go alone: no other tool is needed)
#   make run     the whole product on this machine (see README.md): Go and a RabbitMQ
#   make test    every test: prepares the machine first (.ci/prepare installs the
#                Debian packages the tests need and starts RabbitMQ), builds the
#                test modules, runs the linters and the tests, every package
#                but the end-to-end one under the race detector
#   make lint    go vet and golangci-lint (.golangci.yml: staticcheck and more), both modules
#   make check   the quick loop: lint, then go test -short over every package
#                whose tests need no broker, skips allowed (no .ci/prepare)
#   make fuzz    every fuzz target for FUZZTIME (default 30s) each, then the
#                hostile-publisher suite's long run (HOSTILE_N, HOSTILE_DISTINCT)
#   make bench   the benchmarks

SHELL := /bin/bash
# Go under /usr/local/go (https://go.dev/doc/install), on PATH or not.
ifeq ($(shell command -v go),)
export PATH := /usr/local/go/bin:$(PATH)
endif
GO ?= go
export GOFLAGS ?= -buildvcs=false

# Tools for the test modules only (make test-wasm; Debian packages wabt,
# clang-14, lld-14, wasi-libc). make build does not use them.
WAT2WASM ?= wat2wasm
CLANG ?= clang-14

# golangci-lint, installed by the Go toolchain into .cache/bin on first use.
# It runs staticcheck too, with the checks the staticcheck command runs by
# default (.golangci.yml says which linters run and why).
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(CURDIR)/.cache/bin/golangci-lint-$(GOLANGCI_LINT_VERSION)

# Compiled-module cache shared by the tests, so each package does not recompile.
export TALLY_OSC_TEST_CACHE ?= $(CURDIR)/.cache/wazero

# Stamped into the binary (tally-openstack-collector version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: all build wasm test-wasm prepare test test-go test-race lint check bench bench-e2e run clean
all: build

# Two Go modules: the collector's (go.mod) and the guest SDK's (wasm-sdk/go.mod,
# which requires nothing outside the standard library, so a mapper's author
# needs no module of the collector's). The collector's requires the SDK's, with
# a replace to ./wasm-sdk. `go test ./...` at the root does not reach into
# wasm-sdk: every target that tests, vets or benchmarks runs in both. No
# go.work: each module builds on its own, as its users build it.
SDK_MODULE := wasm-sdk

# Each component adds its own targets in its .mk file: the built-in mappers
# are prerequisites of `wasm` (part of make build, Go alone), the test modules
# (WAT, C, the SDK's test guests) of `test-wasm` (part of make test).
include $(wildcard runtime/*.mk runtime/*/*.mk wasm-sdk/*.mk mappers/*.mk examples/*.mk examples/*/*.mk)

test-wasm: wasm

build: wasm
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/tally-openstack-collector ./cmd/tally-openstack-collector

# The whole product on this machine: reference Reporting API, notifications
# published into the local RabbitMQ, the collector between them.
run: build
	examples/run/run.sh

# make test on a new machine: .ci/prepare first (packages, RabbitMQ), then the
# test modules, which need what it installed. A test whose tool or service is
# missing fails, naming the Debian package; TALLY_OSC_ALLOW_SKIP=1 makes it
# skip instead (a developer's laptop; see README.md). Every package runs under
# the race detector (test-race) but those of NORACE_PKGS, which run without it
# (test-go), with the few tests that cannot run under it: each test once.
test: prepare
	$(MAKE) -k test-wasm || [[ "$(TALLY_OSC_ALLOW_SKIP)" == 1 ]]
	$(MAKE) lint test-go test-race fuzz-short

# With TALLY_OSC_ALLOW_SKIP=1 a test module that could not be built (no wabt,
# no clang-14) does not stop the run: the tests that need it skip, naming it.
TEST_WASM := $(if $(filter 1,$(TALLY_OSC_ALLOW_SKIP)),wasm,test-wasm)

prepare:
	.ci/prepare

# The race detector chooses itself: every package runs under it, a new one
# included, but those named here, each with its reason.
#
#   ./cmd/tally-openstack-collector/e2e  the end-to-end tests: they start the
#       daemon as a process of its own (built without -race, so the detector
#       would watch only the harness) and take about 8 minutes without it.
#       The daemon itself runs under it in-process, in the tests of
#       ./cmd/tally-openstack-collector/internal/daemon.
#
# A package named here that no longer exists fails test-race and test-go.
NORACE_PKGS := ./cmd/tally-openstack-collector/e2e

# A test that cannot run under the race detector lives in a file
# *_norace_test.go with the constraint //go:build !race, the reason in the
# file: allocation counts (the detector's instrumentation allocates where the
# code does not), a reference implementation that fails its pointer checks.
# test-go runs these tests, found by their files, without it.
NORACE_FILES := $(shell find . -name '*_norace_test.go' -not -path './.cache/*' -not -path './.git/*' -not -path './$(SDK_MODULE)/*')
NORACE_TESTS := $(shell sed -n 's/^func \(Test[A-Za-z0-9_]*\).*/\1/p' $(NORACE_FILES) /dev/null | paste -sd'|')
NORACE_TEST_PKGS := $(sort $(patsubst %/,./%,$(dir $(patsubst ./%,%,$(NORACE_FILES)))))
# The same in the SDK's module, its paths relative to it.
SDK_NORACE_FILES := $(shell cd $(SDK_MODULE) && find . -name '*_norace_test.go')
SDK_NORACE_TESTS := $(shell cd $(SDK_MODULE) && sed -n 's/^func \(Test[A-Za-z0-9_]*\).*/\1/p' $(SDK_NORACE_FILES) /dev/null | paste -sd'|')
SDK_NORACE_TEST_PKGS := $(sort $(patsubst %/,./%,$(dir $(patsubst ./%,%,$(SDK_NORACE_FILES)))))

test-go: $(TEST_WASM)
	$(GO) list $(NORACE_PKGS) >/dev/null
	$(GO) test -count=1 -timeout 25m $(NORACE_PKGS)
	$(if $(NORACE_TESTS),$(GO) test -count=1 -timeout 10m -run '^($(NORACE_TESTS))$$' $(NORACE_TEST_PKGS))
	$(if $(SDK_NORACE_TESTS),cd $(SDK_MODULE) && $(GO) test -count=1 -timeout 10m -run '^($(SDK_NORACE_TESTS))$$' $(SDK_NORACE_TEST_PKGS))

test-race: $(TEST_WASM)
	norace=$$($(GO) list $(NORACE_PKGS)) && \
	$(GO) test -race -count=1 -timeout 14m $$($(GO) list ./... | grep -v -x -F "$$norace")
	cd $(SDK_MODULE) && $(GO) test -race -count=1 -timeout 14m ./...

# Fuzz targets: every func FuzzX of a _test.go file, each run on its own for
# FUZZTIME (go test -fuzz takes one target of one package at a time). The
# committed corpus (testdata/fuzz/FuzzX/ beside the test) runs first; an input
# that fails is written there, to be kept once fixed. fuzz-short is the part of
# make test: a few seconds each (a fixed number of executions), without the
# hostile-publisher suite's long run (its short run is part of test-go).
#
# fuzz-hostile is that long run: TestEndToEndHostilePublisherSuite with
# HOSTILE_N notifications along the generator's dimensions and HOSTILE_DISTINCT
# distinct event types and projects (as TALLY_HOSTILE_N, TALLY_HOSTILE_DISTINCT).
# Its seed is printed; TALLY_HOSTILE_SEED=<seed> replays a run.
FUZZTIME ?= 30s
FUZZMINIMIZETIME ?= 10s
HOSTILE_N ?= 3000
HOSTILE_DISTINCT ?= 5000
.PHONY: fuzz fuzz-targets fuzz-short fuzz-hostile
fuzz: fuzz-targets fuzz-hostile

fuzz-targets:
	@set -eo pipefail; for f in $$(grep -rl --include='*_test.go' --exclude-dir=.cache --exclude-dir=.git '^func Fuzz' . | sort); do \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "fuzz: $$(dirname $$f) $$t for $(FUZZTIME)"; \
			m=.; d=$$(dirname $$f); case $$d in ./$(SDK_MODULE)|./$(SDK_MODULE)/*) m=$(SDK_MODULE); d=.$${d#./$(SDK_MODULE)};; esac; \
			(cd $$m && $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./$$d) | grep -v '^fuzz: elapsed'; \
		done; \
	done

fuzz-hostile: $(TEST_WASM)
	TALLY_HOSTILE_N=$(HOSTILE_N) TALLY_HOSTILE_DISTINCT=$(HOSTILE_DISTINCT) \
		$(GO) test -count=1 -v -run '^TestEndToEndHostilePublisherSuite$$' -timeout 60m ./cmd/tally-openstack-collector/e2e

# fuzz-short counts executions instead of seconds: with a duration, Go 1.26's
# fuzz coordinator can fail a target at the deadline with "context deadline
# exceeded" and no input (go.dev/issue/75804, fixed in Go 1.27), which a
# loaded machine makes likely. A count has no deadline to race.
fuzz-short:
	$(MAKE) fuzz-targets FUZZTIME=3000x FUZZMINIMIZETIME=200x

lint: $(GOLANGCI_LINT)
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...
	cd $(SDK_MODULE) && $(GO) vet ./... && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...

$(GOLANGCI_LINT):
	mkdir -p $(@D)
	GOBIN=$(@D) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(@D)/golangci-lint $@

# The quick loop: lint, then go test -short over every package whose tests
# need no broker, in both modules, without .ci/prepare and with skips allowed
# (TALLY_OSC_ALLOW_SKIP=1: a test whose tool is missing skips, naming it).
# .ci/broker-packages says which packages need one, from what their tests
# call: a new package falls on its side by itself. The test modules are built
# when their tools are there; the tests that need a missing one skip.
check: lint
	-$(MAKE) -k test-wasm
	broker=$$(GO=$(GO) .ci/broker-packages) && \
	TALLY_OSC_ALLOW_SKIP=1 $(GO) test -short -count=1 -timeout 10m $$($(GO) list ./... | grep -v -x -F "$$broker")
	cd $(SDK_MODULE) && TALLY_OSC_ALLOW_SKIP=1 $(GO) test -short -count=1 -timeout 10m ./...

# Package benchmarks, then the end-to-end one (a bare AMQP drain against the
# collector on the same queue; see docs/performance.md).
bench: test-wasm
	$(GO) test -run '^$$' -bench . -benchmem $$($(GO) list ./... | grep -v '/cmd/tally-openstack-collector/e2e$$')
	cd $(SDK_MODULE) && $(GO) test -run '^$$' -bench . -benchmem ./...
	$(MAKE) bench-e2e

# The end-to-end drain: a bare amqp091-go consumer against the collector, both
# at PREFETCH=100, on a classic queue of the machine's RabbitMQ and on a quorum
# queue of the RabbitMQ 4 test cluster (.ci/rabbitmq4-cluster); a table of
# rate, CPU and memory for each. TALLY_BENCH_QUEUES=classic|quorum picks one,
# TALLY_BENCH_RUNS=3 gives medians and ranges, TALLY_BENCH_N the notifications.
bench-e2e: test-wasm
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkEndToEnd$$' -benchtime 1x -timeout 40m ./cmd/tally-openstack-collector/e2e

clean:
	rm -rf bin .cache mappers/dist/*.wasm
