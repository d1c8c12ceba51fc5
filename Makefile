# Tandem — build, run, test, lint, benchmark.
# `make test` is what CI runs (.ci/run); it must stay well under 45 minutes on 2 cores.

CARGO   ?= cargo
PYTHON  ?= python3
BINARY  ?= target/release/tandem
# Unit tests of the database adaptor also run against PostgreSQL when a server answers here.
TANDEM_TEST_POSTGRES_URL ?= $(shell $(PYTHON) -c "import socket; socket.create_connection(('127.0.0.1', 5432), 1); print('postgres://postgres@127.0.0.1:5432/test')" 2>/dev/null)
export TANDEM_TEST_POSTGRES_URL

.PHONY: all build run test unit-test system-test deps lint bench bench-quick fuzz clean

all: build

build:
	$(CARGO) build --release --workspace

run:
	$(CARGO) run --release -p tandem -- run

deps:
	bash scripts/install-test-deps.sh

unit-test:
	$(CARGO) test --workspace --release

system-test:
	$(PYTHON) tests/system/run_all.py --binary $(BINARY)

# 1. test tools  2. release build  3. unit + integration tests  4. system tests
test:
	bash scripts/install-test-deps.sh
	$(CARGO) build --release --workspace
	$(CARGO) test --workspace --release
	$(PYTHON) tests/system/run_all.py --binary $(BINARY)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

bench: build
	$(PYTHON) bench/find_max_rate.py --binary $(BINARY)

bench-quick: build
	$(PYTHON) bench/find_max_rate.py --binary $(BINARY) --quick

fuzz:
	bash scripts/fuzz.sh

clean:
	$(CARGO) clean
