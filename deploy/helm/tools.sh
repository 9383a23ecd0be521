#!/usr/bin/env bash
# `make chart-tools`: installs the tools the alert rules are tested with, kept
# between runs: helm from the Go module proxy into .cache/tools (git-ignored),
# promtool from Debian's `prometheus` package. `make chart-test` renders and
# tests the chart with them, and the dispatcher's real-Kafka test
# (crates/dispatcher/tests/alerts_scraped.rs) runs `promtool test rules` on the
# series the real binary exports; neither skips when a tool is missing.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
tools="$repo/.cache/tools"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
log() { printf 'chart-tools: %s\n' "$*" >&2; }

mkdir -p "$tools"
if [[ ! -x "$tools/helm" || "$(cat "$tools/.helm-version" 2>/dev/null)" != "$HELM_VERSION" ]]; then
  command -v go >/dev/null || { log "go is needed once to install helm $HELM_VERSION"; exit 1; }
  log "installing helm $HELM_VERSION into $tools (go install; a few minutes the first time)"
  GOBIN="$tools" GOFLAGS=-buildvcs=false go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  echo "$HELM_VERSION" > "$tools/.helm-version"
fi

if ! command -v promtool >/dev/null; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    log "installing promtool (Debian package prometheus)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    log "promtool not found: install Debian's 'prometheus' package (apt-get install prometheus)"
    exit 1
  fi
fi
