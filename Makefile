# hookline: the two commands a newcomer needs are `make demo` and `make test`.
# Prerequisites not installed here: Rust (rustup, with rustfmt and clippy),
# Java 17, Maven, Python 3. Everything else the Makefile fetches itself.

SHELL := /bin/bash
CARGO ?= cargo
PYTHON ?= python3
VENV := .venv
KAFKA := deploy/dev/kafka.sh
WITH_KAFKA := deploy/dev/with-kafka.sh
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
# One feature set for every cargo command below, so that no crate is built twice
# with different features: hookline-dlq-sink's S3 archive (off by default in the
# crate, on in the container image) is on, and its S3 test runs.
FEATURES ?= --features hookline-dlq-sink/s3

.PHONY: build test test-rust test-python test-faults faults chart-test lint fmt demo bench kafka-up kafka-down kafka-fetch venv clean

build:
	$(CARGO) build --workspace --all-targets $(FEATURES)

## test: starts a real Kafka broker if none is given, runs every test, stops it.
test: venv kafka-fetch
	$(WITH_KAFKA) $(MAKE) --no-print-directory test-rust test-python test-faults
	$(MAKE) --no-print-directory chart-test

# Benches print figures and are not tests: `make bench` runs them. Clippy
# (--all-targets) keeps them compiling.
test-rust:
	$(CARGO) test --workspace --lib --bins --tests $(FEATURES)
	$(CARGO) test --workspace --doc $(FEATURES)

# Examples are built for the whole workspace at once: building one package
# alone would recompile its dependencies with other features.
test-python: venv
	$(CARGO) build -q --workspace --examples $(FEATURES)
	HOOKLINE_CONTRACT_TOOL=$(TARGET_DIR)/debug/examples/contract_tool \
	HOOKLINE_SIGN_TOOL=$(TARGET_DIR)/debug/examples/sign_webhook \
	$(VENV)/bin/python -m pytest -q tests/contract

## faults: the fault suite (tests/faults): crashes, broker restarts, rolling
## restarts, hostile endpoints and bad input against the real binaries on real
## Kafka; `make faults SCENARIOS=kill_stages` runs one, HOOKLINE_FAULTS_SEED=N
## repeats a run's random choices, HOOKLINE_KEEP_DIRS=1 keeps the stage logs.
faults: kafka-fetch
	$(WITH_KAFKA) $(MAKE) --no-print-directory test-faults

# The debug binaries: `make test` has built them already for the crates' tests.
test-faults:
	$(CARGO) build -q -p hookline-fanout -p hookline-dispatcher -p hookline-dlq-sink -p hookline-faults $(FEATURES)
	$(TARGET_DIR)/debug/hookline-faults $(SCENARIOS)

## chart-test: the Helm chart offline; installs helm, promtool and kubernetes-validate itself.
chart-test: venv
	bash deploy/helm/chart-test.sh

## lint: rustfmt and clippy (also on dlq-sink without S3, the crate's default).
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets $(FEATURES) -- -D warnings
	$(CARGO) clippy -q -p hookline-dlq-sink --lib -- -D warnings

fmt:
	$(CARGO) fmt --all

## demo: the whole pipeline in one process on librdkafka's mock cluster (about a minute).
demo:
	$(CARGO) run -q -p hookline-demo --

## bench: named scenarios on real Kafka with the release binaries (about 5 minutes);
## `make bench SCENARIOS=latency` runs one; BENCH_* variables are in the README.
SCENARIOS ?=
bench: kafka-fetch
	$(CARGO) build --release -p hookline-fanout -p hookline-dispatcher -p hookline-dlq-sink -p hookline-bench
	$(WITH_KAFKA) $(CARGO) run -q --release -p hookline-bench -- $(SCENARIOS)

kafka-fetch:
	bash $(KAFKA) fetch

kafka-up:
	@bash $(KAFKA) up

kafka-down:
	@bash $(KAFKA) down

venv: $(VENV)/.installed

$(VENV)/.installed: tests/contract/requirements.txt deploy/helm/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r tests/contract/requirements.txt -r deploy/helm/requirements.txt
	touch $@

clean:
	$(CARGO) clean
	rm -rf $(VENV)
