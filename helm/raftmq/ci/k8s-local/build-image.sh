#!/usr/bin/env bash
# Build the raftmq image with the repository's unchanged Dockerfile, without any registry: a Debian base made by
# debootstrap (python3 + the wheels of `.[k8s]`, pip pointed at them) is imported into a private dockerd, then
# `docker build --build-arg PYTHON_IMAGE=<that base>`; a static pause image joins it. Writes one `docker save`
# tar of both images (for `ctr images import`) and prints its path.
#
#   helm/raftmq/ci/k8s-local/build-image.sh        # -> $RAFTMQ_K8S_LOCAL_CACHE/images/raftmq-e2e.tar
#
# Needs root, debootstrap, docker.io (dockerd), gcc. The base (~3-4 min) is cached until the wheel set changes;
# the image build reuses docker's layer cache.
set -euo pipefail

IMAGE="${IMAGE:-raftmq:e2e}"
PAUSE_IMAGE="${PAUSE_IMAGE:-registry.k8s.io/pause:3.10}"
repo="$(cd "$(dirname "$0")/../../../.." && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
cache="${RAFTMQ_K8S_LOCAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/raftmq/k8s-local}"
python="${PYTHON:-$repo/.venv/bin/python}"
log() { echo "build-image: $*" >&2; }
mkdir -p "$cache/images"

for tool in debootstrap dockerd docker gcc; do
    command -v "$tool" >/dev/null || { echo "build-image: $tool is needed (apt-get install debootstrap docker.io gcc)" >&2; exit 1; }
done

# 1. Wheels of everything `pip install .[k8s]` needs (plus pip itself): the build containers have no network.
wheels="$cache/wheels"
rm -rf "$wheels.tmp"
"$python" -m pip wheel -q -w "$wheels.tmp" "$repo[k8s]" pip setuptools wheel >&2
rm -f "$wheels.tmp"/raftmq-*.whl
wheel_key="$(ls "$wheels.tmp" | sha256sum | cut -c1-12)"
rm -rf "$wheels" && mv "$wheels.tmp" "$wheels"

# 2. A private dockerd (own socket and data root, no bridge, no iptables rules on the host).
sock="$cache/docker.sock"
export DOCKER_HOST="unix://$sock"
if ! docker version >/dev/null 2>&1; then
    log "starting a private dockerd ($sock) for this build"
    trap 'kill "$(cat "$cache/dockerd.pid" 2>/dev/null)" 2>/dev/null || true' EXIT
    mkdir -p "$cache/docker"
    nohup dockerd --host "$DOCKER_HOST" --data-root "$cache/docker" --exec-root "$cache/docker-exec" \
        --pidfile "$cache/dockerd.pid" --bridge none --iptables=false --ip6tables=false \
        >"$cache/dockerd.log" 2>&1 &
    for _ in $(seq 1 60); do docker version >/dev/null 2>&1 && break; sleep 1; done
    docker version >/dev/null 2>&1 || { echo "build-image: dockerd did not start:" >&2; tail -20 "$cache/dockerd.log" >&2; exit 1; }
fi

# 3. The base image: Debian bookworm's python3 (3.11, as the Dockerfile's default base) with pip from the wheels.
base="raftmq-base:bookworm-$wheel_key"
if ! docker image inspect "$base" >/dev/null 2>&1; then
    rootfs="$cache/rootfs"
    if [[ ! -x "$rootfs/usr/bin/python" ]]; then
        log "debootstrap bookworm (minbase + python3; ~3-4 min)"
        rm -rf "$rootfs.tmp"
        debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
            bookworm "$rootfs.tmp" http://deb.debian.org/debian >&2
        rm -rf "$rootfs.tmp"/var/cache/apt/archives/*.deb "$rootfs.tmp"/var/lib/apt/lists/*
        mv "$rootfs.tmp" "$rootfs"
    fi
    rm -rf "$rootfs/wheels" && cp -a "$wheels" "$rootfs/wheels"
    # pip into /usr/local (the image's `pip uninstall pip setuptools wheel` needs a pip-installed pip), and no
    # PEP 668 marker: this interpreter is the image's, not a Debian system's.
    rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
    chroot "$rootfs" env -i PATH=/usr/local/bin:/usr/bin:/bin sh -c 'set -- /wheels/pip-*.whl && python "$1/pip" install -q --no-index --find-links /wheels pip setuptools wheel'
    log "importing $base"
    tar -C "$rootfs" -c . | docker import \
        --change 'ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels LANG=C.UTF-8' --change 'CMD ["python3"]' - "$base" >&2
fi

# 4. The raftmq image from the unchanged Dockerfile, and a static pause image.
log "docker build $IMAGE (base $base)"
DOCKER_BUILDKIT=0 docker build -q --network none --build-arg "PYTHON_IMAGE=$base" -t "$IMAGE" "$repo" >/dev/null
pause_dir="$cache/pause"
mkdir -p "$pause_dir"
gcc -static -Os -o "$pause_dir/pause" "$here/pause.c"
printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' > "$pause_dir/Dockerfile"
DOCKER_BUILDKIT=0 docker build -q --network none -t "$PAUSE_IMAGE" "$pause_dir" >/dev/null
docker save -o "$cache/images/raftmq-e2e.tar.tmp" "$IMAGE" "$PAUSE_IMAGE"
mv "$cache/images/raftmq-e2e.tar.tmp" "$cache/images/raftmq-e2e.tar"
log "$(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%s: %.0f MB", "'"$IMAGE"'", $1/1e6}')"
echo "$cache/images/raftmq-e2e.tar"
