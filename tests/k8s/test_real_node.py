"""The chart on a real Kubernetes node (``make k8s-e2e-local``) as part of the suite: the image built from the
unchanged Dockerfile runs in containerd under a real kubelet, and ``helm/raftmq/ci/k8s-e2e.sh`` installs the
chart, runs ``helm test``, checks the leader Service and the admission policy, force-kills the leader pod, checks
that no acknowledged message is lost, does a rolling restart and uninstalls (``tests/k8s/e2e_local.py``).

``make test`` builds what it needs first (``make k8s-local``); outside CI a missing build or a non-root user
skips the test, in CI both are errors (this tier must never skip silently there).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.k8s.control_plane import REPO_ROOT, missing_prerequisite, require_tools

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]
NODE_TOOLS = REPO_ROOT / "helm" / "raftmq" / "ci" / "k8s-local" / "build-node-tools.sh"


def test_chart_end_to_end_on_a_real_node():
    require_tools()
    if os.geteuid() != 0:
        missing_prerequisite("a real node needs root (network namespace, containerd, kubelet)")
    if subprocess.run([str(NODE_TOOLS), "--path"], capture_output=True).returncode != 0:
        missing_prerequisite("node tools not built: run `make k8s-local`")
    done = subprocess.run([sys.executable, "-m", "tests.k8s.e2e_local"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=1700)
    print(done.stdout[-4000:])
    assert done.returncode == 0, done.stdout[-8000:]
    assert "=== PASS" in done.stdout
