"""``make k8s-e2e-local``: the chart's own end-to-end script (``helm/raftmq/ci/k8s-e2e.sh``) on a real Kubernetes
built on this machine: the control plane of the test tier, one real node (containerd, kubelet, kube-proxy,
CoreDNS; ``real_node.py``) and the image built from the unchanged Dockerfile (``build-image.sh``).

    .venv/bin/python -m tests.k8s.e2e_local            # build what is missing, run, tear everything down
    KEEP=1 .venv/bin/python -m tests.k8s.e2e_local     # leave cluster and release up (Ctrl-C tears down)

Needs root, Go, and Debian's containerd, runc, containernetworking-plugins, docker.io, debootstrap, iptables
(``make k8s-node-deps``). Prints a summary with the time of each phase; exit status is the e2e script's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.k8s.control_plane import ControlPlane
from tests.k8s.real_node import HOST_IP, RealNode, clean_work

REPO_ROOT = Path(__file__).resolve().parents[2]
CI_DIR = REPO_ROOT / "helm" / "raftmq" / "ci"
IMAGE = "raftmq:e2e"


def _build(script: Path) -> Path:
    """Run a build script (which prints its result path on stdout, progress on stderr)."""
    out = subprocess.run([str(script)], check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    return Path(out.splitlines()[-1])


def main() -> int:
    if os.geteuid() != 0:
        print("k8s-e2e-local: needs root (network namespace, containerd, kubelet)", file=sys.stderr)
        return 2
    phases: list[tuple[str, float]] = []
    t0 = time.monotonic()
    plane_bin = _build(CI_DIR / "k8s-tools" / "build.sh")
    node_bin = _build(CI_DIR / "k8s-local" / "build-node-tools.sh")
    phases.append(("tools (cached when built)", time.monotonic() - t0))
    t0 = time.monotonic()
    images = _build(CI_DIR / "k8s-local" / "build-image.sh")
    phases.append(("image (debootstrap base cached)", time.monotonic() - t0))

    work = Path(os.environ.get("RAFTMQ_K8S_LOCAL_WORK", "/var/lib/raftmq-k8s-local"))
    clean_work(work)
    (work / "plane").mkdir(parents=True)
    (work / "node").mkdir(parents=True)
    RealNode.create_network()
    plane = ControlPlane(plane_bin, work / "plane", nodes=0, address=HOST_IP)
    node = RealNode(plane, node_bin, work / "node", images)
    rc = 1
    try:
        t0 = time.monotonic()
        plane.start()
        node.start()
        phases.append(("control plane + Ready node", time.monotonic() - t0))
        print(f"k8s-e2e-local: cluster up (KUBECONFIG={plane.kubeconfig}, logs in {work})", flush=True)
        env = dict(os.environ, KUBECONFIG=str(plane.kubeconfig), PATH=f"{node_bin}:{os.environ['PATH']}",
                   IMAGE=IMAGE, ADMISSION_POLICY=os.environ.get("ADMISSION_POLICY", "1"),
                   KEEP=os.environ.get("KEEP", "0"), DIAG_DIR=str(work / "diagnostics"))
        (work / "diagnostics").mkdir()
        t0 = time.monotonic()
        rc = subprocess.run([str(CI_DIR / "k8s-e2e.sh")], env=env).returncode
        phases.append(("k8s-e2e.sh", time.monotonic() - t0))
        if os.environ.get("KEEP") == "1":
            print(f"KEEP=1: cluster left up; KUBECONFIG={plane.kubeconfig}. Ctrl-C tears it down.", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    finally:
        node.stop()
        plane.stop()
    print("\nk8s-e2e-local summary")
    for name, seconds in phases:
        print(f"  {name:<34} {seconds:7.1f} s")
    print(f"  result: {'PASS' if rc == 0 else f'FAIL (exit {rc})'}")
    if rc != 0:
        print(f"  pod logs and events: {work / 'diagnostics'}; node and control-plane logs: {work}/node, {work}/plane")
    return rc


if __name__ == "__main__":
    sys.exit(main())
