#!/usr/bin/env bash
# Build what a real local Kubernetes node and the chart's e2e script need beyond `make k8s-tools`: kubelet,
# kube-proxy and kubectl (the same Kubernetes version, from the Go module proxy, see ../k8s-tools/module.sh),
# CoreDNS and the helm CLI, into a versioned cache outside the work tree, only when missing. Prints the bin dir.
#
#   helm/raftmq/ci/k8s-local/build-node-tools.sh          # -> $RAFTMQ_K8S_TOOLS_CACHE/node-<versions>/bin
#   helm/raftmq/ci/k8s-local/build-node-tools.sh --path   # print the bin directory if built (exit 0), else exit 1
#
# Cold: ~15-30 CPU-minutes more on top of `make k8s-tools` (whose module and build caches it reuses).
set -euo pipefail

K8S_VERSION=1.37.2      # keep equal to ../k8s-tools/build.sh
COREDNS_VERSION=1.15.0
HELM_VERSION=4.3.1

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../k8s-tools/module.sh
source "$here/../k8s-tools/module.sh"
cache="${RAFTMQ_K8S_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/raftmq/k8s-tools}"
out="$cache/node-k8s-${K8S_VERSION}_coredns-${COREDNS_VERSION}_helm-${HELM_VERSION}"
bin="$out/bin"
programs=(kubelet kube-proxy kubectl coredns helm)

built() { for p in "${programs[@]}"; do [[ -x "$bin/$p" ]] || return 1; done; }
if built; then
    echo "$bin"
    exit 0
fi
if [[ "${1:-}" == "--path" ]]; then
    exit 1
fi
command -v go >/dev/null || { echo "node-tools: Go is needed; none on PATH" >&2; exit 1; }
log() { echo "node-tools: $*" >&2; }
mkdir -p "$bin"
export CGO_ENABLED=0

if [[ ! -x "$bin/kubelet" || ! -x "$bin/kube-proxy" || ! -x "$bin/kubectl" ]]; then
    log "building kubelet, kube-proxy, kubectl ${K8S_VERSION} into $bin"
    work="$out/module"
    rm -rf "$work" && mkdir -p "$work"
    cd "$work"
    k8s_module_init "$K8S_VERSION"
    # a module needs one package of its own before `go mod tidy` keeps the requirements
    printf 'package main\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kubelet/app"\n\t_ "k8s.io/kubernetes/cmd/kube-proxy/app"\n\t_ "k8s.io/kubectl/pkg/cmd"\n)\n\nfunc main() {}\n' > deps.go
    go get "k8s.io/kubernetes@v${K8S_VERSION}" >&2
    go mod tidy >&2
    ldflags="$(k8s_ldflags "$K8S_VERSION")"
    for p in kubelet kube-proxy kubectl; do
        go build -trimpath -ldflags "$ldflags" -o "$bin/$p.tmp" "k8s.io/kubernetes/cmd/$p" >&2
        mv "$bin/$p.tmp" "$bin/$p"
    done
    cd / && rm -rf "$work"
fi
if [[ ! -x "$bin/coredns" ]]; then
    log "building CoreDNS ${COREDNS_VERSION}"
    GOBIN="$bin" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@v${COREDNS_VERSION}" >&2
fi
if [[ ! -x "$bin/helm" ]]; then
    log "building helm ${HELM_VERSION}"
    GOBIN="$bin" go install -trimpath -ldflags "-s -w" "helm.sh/helm/v4/cmd/helm@v${HELM_VERSION}" >&2
fi
built || { echo "node-tools: build incomplete in $bin" >&2; exit 1; }
log "done: $("$bin/kubelet" --version 2>&1 | head -1), $("$bin/helm" version --short 2>&1 | head -1)"
echo "$bin"
