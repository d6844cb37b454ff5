# axe — run `make help` for the targets.
.DEFAULT_GOAL := help
GO ?= go
BENCHTIME ?= 1x

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run: ## run the daemon on the embedded store (sqlite:axe.db in this directory)
	$(GO) run ./cmd/axe serve

build: ## build bin/axe
	$(GO) build -o bin/axe ./cmd/axe

test: ## the whole suite with -race, against SQLite and MySQL (starts MariaDB if needed)
	./scripts/test.sh

test-race: test ## same as test: the suite always runs with -race

test-long: ## the long form: failover suite at full size, a 10-minute soak, six release builds, a minute per fuzz target
	./scripts/test.sh --long

bench: ## the benchmark suites (BENCHTIME=1x for a smoke run)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -timeout 0 ./wheel/ ./ratelimit/ ./persist/ ./bench/...

failover: ## the HA failover suite at full size (≥ 5 kills) on MariaDB, primary/backup and three nodes scheduling by shard; prints the audit figures and takeover times
	@log=$$(mktemp); logs=$$(mktemp -d); AXE_FAILOVER_SIZE=large AXE_FAILOVER_LOG_DIR=$$logs ./scripts/test.sh -v -timeout 30m -run '^Test(Failover|SingleNode|Shards)' ./internal/test/failover/ >$$log 2>&1; \
	status=$$?; grep -E '^(--- |PASS|FAIL|ok )|^ +[a-z_]+_test.go:[0-9]+: |^ +(duplicate|gap|unrecorded|phantom|unresolved):' $$log; \
	echo "full log: $$log; the nodes' logs of failed tests: $$logs"; exit $$status

soak: ## the soak on two --ha nodes on MariaDB (DURATION=30m, default 90s); prints each node's RSS/goroutine/open-file trend and the audit
	@log=$$(mktemp); AXE_SOAK_DURATION=$(or $(DURATION),90s) ./scripts/test.sh -v -timeout 0 -run '^TestSoak$$' ./internal/test/failover/ >$$log 2>&1; \
	status=$$?; grep -E '^(--- |PASS|FAIL|ok )|soak_test.go:[0-9]+: ' $$log; \
	echo "full log: $$log"; exit $$status

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

.PHONY: help run build test test-race test-long bench lint failover soak
