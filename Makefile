# Pacer. `make test` needs no setup beyond Go, Java 17 and apt-get (as root):
# scripts/test-env.sh installs redis-server and kcat, fetches and starts a
# real Kafka broker and a private redis-server, and the servers are stopped
# afterwards whatever the outcome.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c

GO ?= go
GO_TEST_TIMEOUT ?= 20m
PKGS ?= ./...
STOP_SERVERS := scripts/kafka.sh stop; scripts/redis.sh stop; scripts/redis-cluster.sh stop

.PHONY: build demo test test-short bench bench-ingest bench-queue soak lint servers stop-servers

VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo unknown)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/pacer ./cmd/pacer

demo:
	$(GO) run ./cmd/pacer demo

test:
	@trap '$(STOP_SERVERS)' EXIT; \
	env_out=$$(scripts/test-env.sh); eval "$$env_out"; \
	echo "PACER_TEST_KAFKA_BROKERS=$$PACER_TEST_KAFKA_BROKERS PACER_TEST_REDIS_ADDR=$$PACER_TEST_REDIS_ADDR"; \
	$(GO) test -race -count=1 -timeout $(GO_TEST_TIMEOUT) $(PKGS)

test-short:
	$(GO) test -short ./...

# bench: every benchmark, then the accuracy soak of package bucket (4
# processes x 8 goroutines on one key for 30 s; see bucket/soak_test.go).
# Figures: BENCHMARKS.md.
bench:
	@trap '$(STOP_SERVERS)' EXIT; \
	env_out=$$(scripts/test-env.sh); eval "$$env_out"; \
	$(GO) test -bench=. -benchmem -run='^$$' $(PKGS); \
	$(GO) test -tags soak -run '^TestAccuracySoak$$' -count=1 -v -timeout 10m ./bucket/

# bench-queue: queues per pacing key through `pacer run` (real Kafka and
# Redis, the strict fake WhatsApp API): head-of-line figures with 400 and
# 100,000 messages on one number, 50 numbers with spread backlogs, a
# SIGKILL of one of 2 replicas with parked records, and strict order
# (PACER_INFLIGHT=1) with parking. About 6 minutes.
# PACER_BENCH_SPREAD=numbers,lo,hi,rate scales the spread run (=full: the
# issue's 50 numbers, 10..50,000 messages at 80/s, over 10 minutes more;
# PACER_BENCH_SPREAD_MAX=20m caps its wait);
# PACER_BENCH_ENV=K=V,... adds pacer settings. Figures: BENCHMARKS.md.
bench-queue:
	@trap '$(STOP_SERVERS)' EXIT; \
	env_out=$$(scripts/test-env.sh); eval "$$env_out"; \
	PACER_BENCH_QUEUE=1 $(GO) test -count=1 -timeout 30m -v -run '^TestQueueBench$$' ./cmd/pacer/

# Long runs kept out of `make test`: the 5-minute cooldown of the delivery
# guarantees (issue: none dead-lettered as attempts-exhausted).
soak:
	@trap '$(STOP_SERVERS)' EXIT; \
	env_out=$$(scripts/test-env.sh); eval "$$env_out"; \
	PACER_TEST_COOLDOWN=5m $(GO) test -count=1 -timeout 30m -v -run 'TestLongCooldown' ./cmd/pacer/

lint:
	$(GO) vet ./...

# Start the servers and leave them running (for repeated `go test` runs):
#   eval "$(make -s servers)"
servers:
	@scripts/test-env.sh

stop-servers:
	@$(STOP_SERVERS)

# bench-ingest: `pacer ingest` under load (vegeta) on the real Kafka broker and
# redis-server, against a plain produce-only handler, and the quota accuracy
# of a tenant at 100 req/s under 64 connections. PACER_BENCH_DURATION sets
# each run's length (default 10s). Figures: BENCHMARKS.md.
bench-ingest:
	@trap '$(STOP_SERVERS)' EXIT; \
	env_out=$$(scripts/test-env.sh); eval "$$env_out"; \
	$(GO) test -tags benchingest -run '^TestLoad' -count=1 -v -timeout 20m ./pacer/ingest/
