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
log() { printf 'chart-tools: %s\n' "$*" >&2; }

# helm: installed (once) by the one script that knows its version.
bash deploy/helm/helm.sh >/dev/null

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
