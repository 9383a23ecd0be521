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
# Tools the Makefile installs itself, outside the tree and kept between runs.
TOOLS ?= $(HOME)/.cache/hookline
CARGO_DENY_VERSION := 0.20.2
CARGO_DENY := $(TOOLS)/cargo-deny-$(CARGO_DENY_VERSION)/bin/cargo-deny
ADVISORY_DB_URL := https://github.com/RustSec/advisory-db

.PHONY: dev build test test-rust test-python test-faults faults chart-test chart-tools image k8s-test lint deny fmt demo bench kafka-up kafka-down kafka-fetch venv clean

build:
	$(CARGO) build --workspace --all-targets $(FEATURES)

## test: starts a real Kafka broker if none is given, runs every test, stops it.
## chart-tools first: a dispatcher test runs promtool on the series it scrapes.
test: venv kafka-fetch chart-tools
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
	FEATURES="$(FEATURES)" bash deploy/helm/chart-test.sh

## chart-tools: helm (into .cache/tools) and promtool, for the chart's and the alerts' tests.
chart-tools:
	bash deploy/helm/tools.sh

## image: the container image without a Docker engine: buildah (Debian's
## package) builds deploy/dev/k8s-image.Containerfile over a root filesystem of
## the release binaries and exactly the shared libraries they load; the image
## docker.io/library/hookline:dev, also written to target/image/hookline.tar.
## The Dockerfile stays the way to build it with Docker elsewhere.
image:
	bash deploy/dev/k8s-image.sh

## k8s-test: the chart on a real single-node Kubernetes (deploy/dev/k8s.sh:
## etcd, containerd, and the Kubernetes binaries built once from the Go module
## into ~/.cache/hookline) with `make image` and the dev broker; as root.
## Install, a verified webhook, an upgrade rolling the dispatcher without losing
## a delivery, uninstall. See deploy/k8s-test/run.sh.
k8s-test: venv kafka-fetch
	bash deploy/k8s-test/run.sh

## lint: rustfmt, clippy (also dlq-sink without S3), no import circles, and `make deny`.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets $(FEATURES) -- -D warnings
	$(CARGO) clippy -q -p hookline-dlq-sink --lib -- -D warnings
	$(PYTHON) .ci/import-circles.py --top crates/*/src tests/faults/src
	$(PYTHON) .ci/import-circles.py crates/*/src tests/faults/src
	$(PYTHON) .ci/check-links.py --self-test && $(PYTHON) .ci/check-links.py
	$(MAKE) --no-print-directory deny

## deny: cargo-deny with deny.toml (licences, bans, sources; advisories when the
## advisory database can be had, see below). Installs cargo-deny the first time.
# Advisories need the RustSec advisory database, a git repository that cargo-deny
# clones from $(ADVISORY_DB_URL) into $CARGO_HOME/advisory-dbs. This project's
# machines, CI's included, reach the package registries only, so: when that
# repository answers, advisories are checked against it; else, when a copy was
# cloned before, against that copy; else the check is skipped and says so, since
# a lint must not fail for want of network. ADVISORIES=1 fails instead of skipping.
ADVISORIES ?=
ADVISORY_DBS = $(or $(CARGO_HOME),$(HOME)/.cargo)/advisory-dbs
deny: $(CARGO_DENY)
	$(CARGO_DENY) --locked check --hide-inclusion-graph licenses bans sources
	@if GIT_TERMINAL_PROMPT=0 timeout 30 git ls-remote --exit-code $(ADVISORY_DB_URL) HEAD >/dev/null 2>&1; then \
	  echo "$(CARGO_DENY) --locked check --hide-inclusion-graph advisories"; \
	  $(CARGO_DENY) --locked check --hide-inclusion-graph advisories; \
	elif db=$$(ls -d $(ADVISORY_DBS)/advisory-db-*/.git 2>/dev/null | head -n 1) && [ -n "$$db" ]; then \
	  echo "cargo deny: $(ADVISORY_DB_URL) cannot be fetched; advisories from the copy of $$(git -C "$$db/.." log -1 --format=%cs)"; \
	  $(CARGO_DENY) --locked --offline check --hide-inclusion-graph advisories; \
	elif [ -n "$(ADVISORIES)" ]; then \
	  echo "cargo deny: the advisory database $(ADVISORY_DB_URL) cannot be fetched" >&2; exit 1; \
	else \
	  echo "cargo deny: advisories SKIPPED: the advisory database $(ADVISORY_DB_URL) cannot be fetched from this machine"; \
	fi

# Installed only when missing; another version goes to a directory of its own.
$(CARGO_DENY):
	$(CARGO) install --locked --quiet --root $(TOOLS)/cargo-deny-$(CARGO_DENY_VERSION) cargo-deny@$(CARGO_DENY_VERSION)

fmt:
	$(CARGO) fmt --all

## demo: the whole pipeline in one process on librdkafka's mock cluster (about a minute).
demo:
	$(CARGO) run -q -p hookline-demo --

## bench: named scenarios on real Kafka with the release binaries (about 15 minutes);
## `make bench SCENARIOS=latency` runs one; BENCH_* variables are in docs/benchmarks.md.
SCENARIOS ?=
bench: kafka-fetch
	$(CARGO) build --release -p hookline-fanout -p hookline-dispatcher -p hookline-dlq-sink -p hookline-bench
	$(WITH_KAFKA) $(CARGO) run -q --release -p hookline-bench -- $(SCENARIOS)

## dev: for the README's quick start, on the broker HOOKLINE_BROKERS names
## (`export HOOKLINE_BROKERS=$$(make -s kafka-up)`): builds the binaries,
## creates the topics with --dev (replication 1), writes a signing secret to
## .cache/dev-secrets/dev (once) and puts the subscription `dev-orders` of
## tenant `dev` to order.* events at http://$(DEV_RECEIVER)/hook.
DEV_RECEIVER ?= 127.0.0.1:8765
DEV_SECRETS := .cache/dev-secrets
dev:
	$(CARGO) build -q --workspace --bins $(FEATURES)
	$(TARGET_DIR)/debug/hookline-fanout topics --execute --dev
	mkdir -p $(DEV_SECRETS)
	[ -s $(DEV_SECRETS)/dev ] || echo "whsec_$$(head -c 32 /dev/urandom | base64 -w0)" > $(DEV_SECRETS)/dev
	$(TARGET_DIR)/debug/hookline-fanout subscriptions put --id dev-orders --tenant dev \
	  --url http://$(DEV_RECEIVER)/hook --event-type 'order.*' --secret-ref dev --allow-http

kafka-fetch:
	bash $(KAFKA) fetch

## kafka-up / kafka-down: the development broker (BROKERS_N=1), or with
## BROKERS_N=3 three brokers and a KRaft controller (`kafka.sh cluster`:
## replication factor 3, min.insync.replicas 2) on ports of their own.
BROKERS_N ?= 1
KAFKA_VERBS = $(if $(filter 3,$(BROKERS_N)),cluster ,$(if $(filter 1,$(BROKERS_N)),,$(error BROKERS_N must be 1 or 3, not $(BROKERS_N))))

kafka-up:
	@bash $(KAFKA) $(KAFKA_VERBS)up

kafka-down:
	@bash $(KAFKA) $(KAFKA_VERBS)down

venv: $(VENV)/.installed

$(VENV)/.installed: tests/contract/requirements.txt deploy/helm/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r tests/contract/requirements.txt -r deploy/helm/requirements.txt
	touch $@

clean:
	$(CARGO) clean
	rm -rf $(VENV)
