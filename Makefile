# rolter — the two commands a newcomer needs are `make demo` and `make test`.
# Both run `make deps` first, which installs what is missing.

GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT      ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS     := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN         := bin/rolter
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build deps test vet staticcheck unit demo bench e2e fuzz soak clean

all: build

build: deps
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rolter

# deps installs the C library for the ZMQ subscriber (libzmq3-dev, pkg-config)
# and chromium for the dashboard browser tests, when missing.
deps:
	@sh scripts/deps.sh

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run $(STATICCHECK) ./...

unit:
	$(GO) test -race -timeout 30m ./...

test: deps vet staticcheck unit

demo: build
	$(BIN) demo

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 200ms ./strategies/ ./kvblock/ ./router/

clean:
	rm -rf bin
