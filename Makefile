# rolter — the two commands a newcomer needs are `make demo` and `make test`.
# Both run `make deps` first, which installs what is missing.

GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT      ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS     := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN         := bin/rolter
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build deps test vet staticcheck nocgo unit deploy-test demo bench e2e fuzz soak clean

all: build

build: deps
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rolter

# deps installs the C library for the ZMQ subscriber (libzmq3-dev, pkg-config)
# and chromium for the dashboard browser tests, when missing.
deps:
	@sh scripts/deps.sh

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/
	$(GO) vet -tags soak ./e2e/

staticcheck:
	$(GO) run $(STATICCHECK) ./...

# nocgo: everything builds without cgo; internal/zmqsock (the only cgo
# code) then compiles its stub, and the packages using it, tests included,
# vet clean.
nocgo:
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) vet ./internal/zmqsock/ ./sidecar/... ./sim/...

unit:
	$(GO) test -race -timeout 30m ./...

# deploy/ is a nested module (Kubernetes API types stay out of the main
# go.mod); its tests decode every manifest and run every rolter command line
# in it through the real binary's flags.
deploy-test:
	cd deploy && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./... && $(GO) test -count=1 ./...

test: deps vet staticcheck nocgo unit deploy-test

demo: build
	$(BIN) demo

# make bench: a short reproduction of BENCHMARKS.md (< 10 min on 2 cores);
# make bench BENCH_FULL=1: the full tables and plots.
BENCH_FULL ?=
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 200ms ./strategies/ ./kvblock/ ./router/ ./cluster/mesh/
	$(GO) test -run '^$$' -bench RealTime -benchtime 3x ./sim/
ifeq ($(BENCH_FULL),)
	$(BIN) bench routing --limit 800 --routers 1,8 --json docs/bench/routing-short.json
	$(BIN) bench overhead --duration 1s --search-duration 1s --search-factor 2 --search-start 1000
	$(BIN) bench gossip --sidecars 16 --routers 3 --blocks 20000 --duration 10s
else
	$(BIN) bench routing --json docs/bench/routing.json --plots docs/bench
	for w in chat rag lora mixed; do $(BIN) bench routing --workload $$w --json docs/bench/routing-$$w.json; done
	$(BIN) bench overhead
	$(BIN) bench gossip
endif

# The multi-process reliability and security suite (RELIABILITY.md).
e2e: deps
	$(GO) test -tags e2e -count=1 -timeout 15m ./e2e/

# 10 minutes at moderate load under -race: leaks, heap growth, cancellation.
soak: deps
	ROLTER_SOAK_DURATION=10m $(GO) test -race -tags soak -count=1 -run TestSoak -timeout 30m ./e2e/

# Each fuzz target for FUZZTIME (go test -fuzz takes one target per run).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseRequest$$'  -fuzztime $(FUZZTIME) ./router/
	$(GO) test -run '^$$' -fuzz '^FuzzExtractPrompt$$' -fuzztime $(FUZZTIME) ./router/
	$(GO) test -run '^$$' -fuzz '^FuzzSpliceEvent$$'   -fuzztime $(FUZZTIME) ./router/
	$(GO) test -run '^$$' -fuzz '^FuzzFSMApply$$'      -fuzztime $(FUZZTIME) ./cluster/
	$(GO) test -run '^$$' -fuzz '^FuzzFSMRestore$$'    -fuzztime $(FUZZTIME) ./cluster/
	$(GO) test -run '^$$' -fuzz '^FuzzReadFrame$$'     -fuzztime $(FUZZTIME) ./cluster/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBatch$$'   -fuzztime $(FUZZTIME) ./sidecar/kvevents/
	$(GO) test -run '^$$' -fuzz '^FuzzStreamApply$$'   -fuzztime $(FUZZTIME) ./sidecar/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$'        -fuzztime $(FUZZTIME) ./cluster/mesh/
	$(GO) test -run '^$$' -fuzz '^FuzzRouterReceive$$' -fuzztime $(FUZZTIME) ./cluster/mesh/

clean:
	rm -rf bin
