#!/usr/bin/env bash
# Prints the path of helm $HELM_VERSION, installing it the first time from the
# Go module proxy into <repo>/.cache/tools (git-ignored). Used by
# deploy/helm/chart-test.sh and deploy/k8s-test/run.sh.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
tools="$repo/.cache/tools"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
mkdir -p "$tools"
if [[ ! -x "$tools/helm" || "$(cat "$tools/.helm-version" 2>/dev/null)" != "$HELM_VERSION" ]]; then
  command -v go >/dev/null || { echo "helm.sh: go is needed once to install helm $HELM_VERSION" >&2; exit 1; }
  echo "helm.sh: installing helm $HELM_VERSION into $tools (go install; a few minutes the first time)" >&2
  GOBIN="$tools" GOFLAGS=-buildvcs=false go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
  echo "$HELM_VERSION" > "$tools/.helm-version"
fi
echo "$tools/helm"
