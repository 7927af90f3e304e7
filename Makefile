# callerauth — every target installs or builds what it needs by itself.
#
#   make test    every test, with -race (the CI entry point)
#   make lint    go vet, gofmt and golangci-lint (pinned in tools/go.mod)
#   make bench   the benchmarks, with allocations
#   make demo    go run ./cmd/callerauth demo
#   make fuzz    a short run of every fuzz test

GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 15s
BENCHTIME ?= 1s
# Caches that make test may fill live here; the folder is ignored by git.
CACHE     := $(CURDIR)/.cache
LINT      := $(GO) tool -modfile=tools/go.mod golangci-lint

.PHONY: all test lint bench demo fuzz tidy clean

all: lint test

test:
	$(GO) test -race -count=1 $(PKGS)

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(LINT) run $(PKGS)

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) $(PKGS)

demo:
	$(GO) run ./cmd/callerauth demo

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzExpiry -fuzztime=$(FUZZTIME) ./token
	$(GO) test -run='^$$' -fuzz=FuzzLoad -fuzztime=$(FUZZTIME) ./credentials

tidy:
	$(GO) mod tidy
	cd tools && $(GO) mod tidy

clean:
	rm -rf $(CACHE)
