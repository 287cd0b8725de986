# raftmq broker image: `docker build -t raftmq:dev .` from the repository root.
#
# Two stages: the builder installs the raftmq package with its runtime dependencies (`.[k8s]`: the Kubernetes
# client for pod role labels) into a venv; the final image gets only that venv on the same slim Python base,
# runs as an unprivileged user, and holds no compiler, no pip and no source tree.
# Runtime dependencies are pinned in pyproject.toml; for bit-for-bit rebuilds pin the base image by digest too
# (--build-arg PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:...).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# The venv has no pip of its own: the builder's pip installs into it, so nothing to remove later.
RUN python -m venv --without-pip /opt/raftmq
WORKDIR /src
# Only what the package needs (see .dockerignore): metadata, the generated gRPC code and the room packages.
COPY pyproject.toml README.md ./
COPY proto/ proto/
COPY store/ store/
COPY replication/ replication/
COPY node/ node/
COPY client/ client/
COPY pipeline/ pipeline/
RUN python -m pip --python /opt/raftmq/bin/python install --no-cache-dir ".[k8s]" \
 && /opt/raftmq/bin/python -c "import raftmq.node.kube, raftmq.v1.raftmq_pb2, raftmq.replication, raftmq.store, raftmq.pipeline.jobs, kubernetes" \
 && /opt/raftmq/bin/raftmq --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="raftmq" \
      org.opencontainers.image.description="Replicated message store, byte-compatible with RocketMQ 4.9 store files" \
      org.opencontainers.image.licenses="Apache-2.0"
# Drop the base image's packaging tools; create the runtime user (the chart runs it as 10001:10001 too).
RUN python -m pip uninstall --no-cache-dir -y pip setuptools wheel \
 && groupadd --system --gid 10001 raftmq \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin raftmq \
 && install -d -o 10001 -g 10001 -m 0750 /data
COPY --from=builder /opt/raftmq /opt/raftmq
ENV PATH=/opt/raftmq/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /data
# HTTP (/metrics /health /ready), gRPC (clients and peer catch-up), Raft.
EXPOSE 8080 8081 8091
ENTRYPOINT ["raftmq", "node"]
