# raftmq developer entry points. Every target installs what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install run stop test lint proto bench clean browser-deps

install: $(STAMP)

# The virtualenv with the package (editable) and every extra the tests need.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,k8s,pipeline]'
	@touch $(STAMP)

# Regenerate the gRPC Python modules from proto/ (checked in, so a fresh clone needs no protoc).
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto --grpc_python_out=proto proto/raftmq/v1/*.proto

# A 3-member Raft cluster in the background on loopback (data, configs, logs and pids under ./data/n0..n2);
# RUN_NODES=1 for a single node; RUN_PORT_BASE moves every port (member i: HTTP BASE+100*i, gRPC +1, Raft +11).
# Fails (with the log tail of each node that did not come up) unless every node it started answers /ready itself.
RUN_DIR ?= data
RUN_NODES ?= 3
RUN_PORT_BASE ?= 8080
run: $(STAMP)
	$(PY) -m raftmq.node.local_cluster start --dir $(RUN_DIR) --nodes $(RUN_NODES) --port-base $(RUN_PORT_BASE)

# SIGTERM every node `make run` started and wait for each to exit.
stop:
	@if [ -x $(PY) ]; then $(PY) -m raftmq.node.local_cluster stop --dir $(RUN_DIR); else echo "nothing to stop"; fi

# Benchmarks print numbers and ratios against baselines measured in the same run; they never fail on time.
BENCHES ?= bench/store_bench.py bench/reput_bench.py bench/grpc_bench.py bench/replication_bench.py bench/pipeline_bench.py
bench: $(STAMP)
	@for b in $(BENCHES); do echo "== $$b"; $(PY) $$b || exit 1; done

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The web console's browser test drives Debian's chromium (never a downloaded one): install it once, as root.
CHROMIUM ?= /usr/bin/chromium
.PHONY: browser-deps
browser-deps:
	@test -x $(CHROMIUM) || { apt-get update -qq && apt-get install -y -qq chromium; }
	@test -x $(CHROMIUM) && echo "chromium: $(CHROMIUM)"

# The Kubernetes tier (tests/k8s) needs the tools `make k8s-tools` builds; SKIP_K8S_TIER=1 leaves them out (the
# tier then skips, except in CI where a missing build is an error).
test: $(STAMP) browser-deps $(if $(SKIP_K8S_TIER),,k8s-tools)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info

# Install the chart into the cluster of the current kubeconfig context, run `helm test`, kill the leader pod and
# check recovery. Needs kubectl, helm and IMAGE=<repository>:<tag> the cluster can pull (see helm/raftmq/ci/k8s-e2e.sh).
# Not part of `make test`: CI has no cluster.
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built from the Go module proxy into a
# versioned cache outside the work tree, only when missing (cold: ~15 min on an idle 2-core box, up to 40 loaded;
# needs Go). tests/k8s starts them as a throw-away control plane.
.PHONY: k8s-tools
k8s-tools:
	@helm/raftmq/ci/k8s-tools/build.sh >/dev/null

.PHONY: k8s-e2e
k8s-e2e:
	helm/raftmq/ci/k8s-e2e.sh
