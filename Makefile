# cdcd — make targets. `make test` is the command CI runs (.ci/run).
GO      ?= go
PKGS    ?= ./...
TIMEOUT ?= 20m

.PHONY: all build test race lint bench bench-log bench-e2e demo clean

all: build

build: ## the cdcd binary, static
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/cdcd ./cmd/cdcd

test: lint ## vet, format check, then every test (they start real PostgreSQL and MariaDB)
	$(GO) test -count=1 -timeout $(TIMEOUT) $(PKGS)

race: ## every test under the race detector
	$(GO) test -race -count=1 -timeout $(TIMEOUT) $(PKGS)

lint: ## gofmt and go vet must be clean
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# BENCH_FLAGS for `cdcd bench`, e.g. BENCH_FLAGS='-rows 500000 -scale 0.1 -latency-duration 15s' (a quick run).
BENCH_FLAGS ?=

bench: bench-log bench-e2e ## benchmarks that print ratios against the raw limits measured in the same run

bench-log: ## the log's benchmarks
	$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./log/

bench-e2e: build ## cdcd bench: PostgreSQL -> log -> Iceberg against COPY binary and a plain decode loop (BENCHMARKS.md)
	./bin/cdcd bench $(BENCH_FLAGS)

demo: ## README's first command
	$(GO) run ./cmd/cdcd demo

clean:
	rm -rf bin cdcd-demo
