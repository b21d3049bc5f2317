# cdcd — make targets. `make test` is the command CI runs (.ci/run).
GO      ?= go
PKGS    ?= ./...
TIMEOUT ?= 20m
# Tests are built with failpoints (internal/failpoint): the crash tests arm
# them. The cdcd binary (build, cross, the Dockerfile) never has them.
TEST_TAGS ?= cdcd_failpoints
# The platforms `cross` builds cdcd for (CI checks each).
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

.PHONY: all build cross test race lint bench bench-log bench-e2e bench-once soak demo clean

all: build

build: ## the cdcd binary, static
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/cdcd ./cmd/cdcd

cross: ## build cdcd for every platform in PLATFORMS (static, no failpoints), to check it compiles there
	@set -e; for p in $(PLATFORMS); do \
		echo "build ./cmd/cdcd for $$p"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -o /dev/null ./cmd/cdcd; \
	done

test: lint ## vet, format check, then every test (they start real PostgreSQL and MariaDB), then every benchmark once
	$(GO) test -tags $(TEST_TAGS) -count=1 -timeout $(TIMEOUT) $(PKGS)
	$(MAKE) bench-once

race: ## every test under the race detector
	$(GO) test -tags $(TEST_TAGS) -race -count=1 -timeout $(TIMEOUT) $(PKGS)

lint: ## gofmt and go vet must be clean (with and without failpoints)
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags $(TEST_TAGS) ./internal/failpoint/...

# BENCH_FLAGS for `cdcd bench`, e.g. BENCH_FLAGS='-rows 500000 -scale 0.1 -latency-duration 15s' (a quick run).
BENCH_FLAGS ?=

bench: bench-log bench-e2e ## benchmarks that print ratios against the raw limits measured in the same run

bench-log: ## the log's benchmarks
	$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./log/

# Every benchmark once at a small size, so none rots unseen (`make test`
# runs it): the Go benchmarks at 1x with 5,000-row tables, the sink's
# throughput test at 20,000 rows and its commit curve at 250 commits.
# Figures at these sizes mean nothing; that each one runs does.
bench-once: ## every benchmark once at a small size (CI)
	CDCD_BENCH_ROWS=5000 $(GO) test -tags $(TEST_TAGS) -run '^$$' -bench . -benchtime 1x -count=1 -timeout $(TIMEOUT) $(PKGS)
	CDCD_SINK_BENCH=20000 CDCD_COMMIT_CURVE=250 $(GO) test -tags $(TEST_TAGS) -run '^(TestSinkThroughput|TestCommitCurve)$$' -count=1 -timeout $(TIMEOUT) ./sink/iceberg/

bench-e2e: build ## cdcd bench: PostgreSQL -> log -> Iceberg against COPY binary and a plain decode loop (BENCHMARKS.md)
	./bin/cdcd bench $(BENCH_FLAGS)

# The crash suite's soak: KILLS kills per configuration (PostgreSQL's
# upsert-v3, upsert-v2, changelog, snapshots and MariaDB's mariadb-upsert,
# mariadb-changelog, mariadb-snapshots; pick with CONFIGS=upsert-v3,mariadb-upsert), in rounds of ROUND
# kills, each round on a fresh database and checked on its own. SEED=N
# replays a printed seed; BIG_TX sizes the large transactions.
KILLS   ?= 500
ROUND   ?= 50
BIG_TX  ?= 50000
soak: ## the crash suite with KILLS kills per configuration (see internal/crashsuite)
	CDCD_CRASH_KILLS=$(KILLS) CDCD_CRASH_ROUND=$(ROUND) CDCD_CRASH_CONFIGS=$(CONFIGS) CDCD_CRASH_SEED=$(SEED) CDCD_CRASH_BIG_TX=$(BIG_TX) \
		$(GO) test -count=1 -v -timeout 0 -run '^TestCrash(MariaDB)?$$' ./internal/crashsuite/

demo: ## README's first command
	$(GO) run ./cmd/cdcd demo

clean:
	rm -rf bin cdcd-demo
