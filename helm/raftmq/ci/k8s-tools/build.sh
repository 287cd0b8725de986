#!/usr/bin/env bash
# Build the Kubernetes test tools (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) as one
# multi-call binary into a versioned cache outside the work tree, only when it is missing. Everything comes from
# the Go module proxy: a throw-away Go module requires k8s.io/kubernetes and replaces each of its staging modules
# (which its own go.mod points at ./staging) by the published twin. Prints the bin directory on stdout.
#
#   helm/raftmq/ci/k8s-tools/build.sh            # -> $RAFTMQ_K8S_TOOLS_CACHE/<versions>/bin
#   RAFTMQ_K8S_TOOLS_CACHE=/var/cache/rk8s ...   # default: ${XDG_CACHE_HOME:-~/.cache}/raftmq/k8s-tools
#   helm/raftmq/ci/k8s-tools/build.sh --path     # print the bin directory if built (exit 0), else exit 1
#
# Cold: ~23 CPU-minutes (13 min on an idle 2-core box), 3 GB of modules, 7 GB of Go build cache. Warm: none.
set -euo pipefail

K8S_VERSION=1.37.2         # kube-apiserver, controller-manager, scheduler (staging modules: v0.37.2)
ETCD_VERSION=3.7.0         # the etcd server k8s 1.37 pins
KWOK_VERSION=0.8.0

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=module.sh
source "$here/module.sh"
cache="${RAFTMQ_K8S_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/raftmq/k8s-tools}"
key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_$(sha256sum "$here/main.go" | cut -c1-12)"
out="$cache/$key"
bin="$out/bin"
programs=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

if [[ -x "$bin/k8s-tools" ]]; then
    echo "$bin"
    exit 0
fi
if [[ "${1:-}" == "--path" ]]; then
    exit 1
fi
command -v go >/dev/null || { echo "k8s-tools: Go is needed (https://go.dev); none on PATH" >&2; exit 1; }

work="$out/module"
rm -rf "$work" && mkdir -p "$work" "$bin"
cp "$here/main.go" "$work/main.go"
cd "$work"
log() { echo "k8s-tools: $*" >&2; }

log "building Kubernetes ${K8S_VERSION}, etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION} into $bin (cold: ~15-40 min)"
k8s_module_init "$K8S_VERSION"
go get "k8s.io/kubernetes@v${K8S_VERSION}" "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}" \
    "sigs.k8s.io/kwok@v${KWOK_VERSION}" >&2
go mod tidy >&2

ldflags="$(k8s_ldflags "$K8S_VERSION")"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/k8s-tools.tmp" . >&2
mv "$bin/k8s-tools.tmp" "$bin/k8s-tools"
for p in "${programs[@]}"; do ln -sf k8s-tools "$bin/$p"; done

# kwok's own stage documents (pod ready, node heartbeat, ...): standalone kwok has no built-in stages.
kwok_dir="$(go list -m -f '{{.Dir}}' "sigs.k8s.io/kwok")"
mkdir -p "$out/kwok-stages"
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    if [[ -f "$kwok_dir/kustomize/stage/$f" ]]; then cp "$kwok_dir/kustomize/stage/$f" "$out/kwok-stages/"; fi
done
rm -rf "$work"
log "done: $("$bin/kube-apiserver" --version 2>&1 | head -1)"
echo "$bin"
