#!/usr/bin/env bash
# Builds the Kubernetes binaries of the dev cluster (deploy/dev/k8s.sh) from
# the k8s.io/kubernetes Go module, at K8S_VERSION, into the cache directory
# $K8S_CACHE/bin (default ~/.cache/hookline/k8s-$K8S_VERSION/bin).
#
# `go install k8s.io/kubernetes/cmd/...@v1.x` refuses the module because its
# go.mod replaces the k8s.io/* staging modules with ./staging/src/k8s.io/*
# directories. So a throwaway module in the cache directory requires
# k8s.io/kubernetes and replaces each staging module with its published
# v0.x version (the same code, tagged from the same commit), then builds.
#
# Building Kubernetes is heavy (about a CPU-hour for the five binaries): it
# runs under `nice -n 10` with one package at a time (GOFLAGS=-p=1) unless
# K8S_BUILD_JOBS says otherwise. Binaries already built are kept.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
K8S_CACHE=${K8S_CACHE:-$HOME/.cache/hookline/k8s-$K8S_VERSION}
K8S_BUILD_JOBS=${K8S_BUILD_JOBS:-1}
BINARIES=${K8S_BINARIES:-kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet}
STAGING_VERSION=v0.${K8S_VERSION#v1.}

mod=$K8S_CACHE/module
bin=$K8S_CACHE/bin
mkdir -p "$mod" "$bin"

missing=()
for b in $BINARIES; do [ -x "$bin/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "k8s-build: $K8S_VERSION binaries present in $bin"
  exit 0
fi

if [ ! -s "$mod/go.sum" ] || ! grep -q "^tool" "$mod/go.mod"; then
  echo "k8s-build: preparing the module in $mod" >&2
  upstream=$(curl -fsS "${GOPROXY_URL:-https://proxy.golang.org}/k8s.io/kubernetes/@v/$K8S_VERSION.mod")
  {
    echo "module hookline.local/k8s-build"
    echo
    echo "$upstream" | sed -n 's/^go \(.*\)$/go \1/p'
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    # Every staging replacement of the upstream go.mod, on the published
    # version. The sample-* modules are not published; nothing built needs them.
    echo "$upstream" | sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' |
      grep -v '^k8s.io/sample-' |
      while read -r m; do echo "	$m => $m $STAGING_VERSION"; done
    echo ")"
  } > "$mod/go.mod"
  # The binaries as `tool` directives, so that `go mod tidy` resolves and
  # records everything they need.
  {
    echo
    echo "tool ("
    for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
      echo "	k8s.io/kubernetes/cmd/$b"
    done
    echo ")"
  } >> "$mod/go.mod"
  (cd "$mod" && go mod tidy >&2)
fi

for b in "${missing[@]}"; do
  echo "k8s-build: building $b $K8S_VERSION (this takes a while)" >&2
  start=$(date +%s)
  (cd "$mod" && CGO_ENABLED=0 GOFLAGS="-mod=mod -p=$K8S_BUILD_JOBS" nice -n 10 \
     go build -trimpath -ldflags "-s -w \
       -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
       -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION" \
     -o "$bin/$b.tmp" "k8s.io/kubernetes/cmd/$b")
  mv "$bin/$b.tmp" "$bin/$b"
  echo "k8s-build: $b built in $(( $(date +%s) - start )) s" >&2
done
