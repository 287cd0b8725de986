#!/usr/bin/env bash
# Everything the Kubernetes test tier (tests/k8s) needs, each part only when its cache misses: the control-plane
# tools (k8s-tools/build.sh), Debian's node packages, the node tools (k8s-local/build-node-tools.sh) and the
# image (k8s-local/build-image.sh). `make test` starts it in the background on a machine where the tools are not
# built yet (a fresh CI machine: ~40 CPU-minutes of Go), runs the rest of the suite meanwhile, then waits for it
# and runs tests/k8s.
#
#   helm/raftmq/ci/k8s-tier-build.sh               # build in the foreground (what `make k8s-local` does)
#   helm/raftmq/ci/k8s-tier-build.sh --built       # exit 0 when the Go tools are built (the image takes seconds)
#   helm/raftmq/ci/k8s-tier-build.sh --background  # start the build, return once it holds its lock
#   helm/raftmq/ci/k8s-tier-build.sh --wait        # wait for a background build; its exit status and log tail
#
# The log of a background build is $cache/k8s-tier-build.log; the lock (held while it builds) k8s-tier-build.lock.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/raftmq"
lock="$cache/k8s-tier-build.lock"
log="$cache/k8s-tier-build.log"
status="$cache/k8s-tier-build.status"
mkdir -p "$cache"

build() {
    "$here/k8s-tools/build.sh" >/dev/null
    make -s -C "$repo" k8s-node-deps
    "$here/k8s-local/build-node-tools.sh" >/dev/null
    "$here/k8s-local/build-image.sh" >/dev/null
}

case "${1:-}" in
    --built)
        "$here/k8s-tools/build.sh" --path >/dev/null && "$here/k8s-local/build-node-tools.sh" --path >/dev/null
        ;;
    --background)
        exec 9>"$lock"
        flock -x 9  # taken here, before this returns: the waiter below cannot slip in before the build starts
        rm -f "$status"
        echo "k8s-tier-build: building the Kubernetes tier's tools in the background (log: $log)"
        # the build keeps fd 9, so the lock is held until it ends; what it starts must not inherit it (a daemon
        # that outlived the build would hold the lock for good)
        ( set +e; build 9>&- >"$log" 2>&1; echo $? >"$status" ) &
        ;;
    --wait)
        exec 9>"$lock"
        flock -s 9
        code="$(cat "$status" 2>/dev/null || echo 0)"  # no status: no background build ran
        if [[ "$code" != 0 ]]; then
            echo "k8s-tier-build: the background build failed (exit $code); the end of $log:" >&2
            tail -30 "$log" >&2
        fi
        exit "$code"
        ;;
    "")
        build
        ;;
    *)
        echo "usage: $0 [--built|--background|--wait]" >&2
        exit 2
        ;;
esac
