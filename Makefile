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

bench: ## the benchmark suites (BENCHTIME=1x for a smoke run)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -timeout 0 ./wheel/ ./ratelimit/ ./persist/ ./bench/...

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

.PHONY: help run build test test-race bench lint
