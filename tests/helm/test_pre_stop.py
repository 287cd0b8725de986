"""The chart's preStop hook (helm/raftmq/files/pre-stop.py) against a real 3-member cluster on loopback.

It runs exactly as the pod runs it: `python pre-stop.py --server <local node> --timeout N` with the member id
in $RAFTMQ_NODE_ID and the real `raftmq` CLI on PATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import free_ports

HOOK = Path(__file__).resolve().parents[2] / "helm" / "raftmq" / "files" / "pre-stop.py"
BIN = str(Path(sys.executable).parent)  # the venv's bin: `raftmq` lives next to python



def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env.update(extra or {})
    return env


def leader_id(server: str) -> str:
    out = subprocess.run([f"{BIN}/raftmq", "cluster", "status", "--json", "--server", server],
                         capture_output=True, text=True, env=cli_env(), timeout=60, check=True)
    return json.loads(out.stdout)["leader_id"]


def wait_leader(server: str) -> str:
    for _ in range(120):
        try:
            lid = leader_id(server)
        except subprocess.CalledProcessError:
            lid = ""
        if lid:
            return lid
        subprocess.run(["sleep", "0.5"], check=True)
    raise AssertionError("no leader elected")


def run_hook(server: str, member_id: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HOOK), "--server", server, "--timeout", str(timeout)],
                          capture_output=True, text=True, env=cli_env({"RAFTMQ_NODE_ID": member_id}),
                          timeout=timeout + 30)


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster  # the hook moves the leadership at most: no member is harmed


def test_on_a_follower_it_leaves_leadership_alone(cluster):
    leader = wait_leader(cluster[0].grpc_address)
    follower = next(n for n in cluster if n.spec.id != leader)
    done = run_hook(follower.grpc_address, follower.spec.id)
    assert done.returncode == 0, done.stderr
    assert "is not the leader" in done.stderr
    assert wait_leader(follower.grpc_address) == leader


def test_on_the_leader_it_hands_leadership_to_a_follower(cluster):
    leader = wait_leader(cluster[0].grpc_address)
    node = next(n for n in cluster if n.spec.id == leader)
    done = run_hook(node.grpc_address, leader)
    assert done.returncode == 0, done.stderr
    assert "leader is now" in done.stderr, done.stderr
    new = wait_leader(node.grpc_address)
    assert new != leader and new in {n.spec.id for n in cluster}


def test_an_unreachable_node_never_fails_the_shutdown():
    (port,) = free_ports(1)
    done = run_hook(f"127.0.0.1:{port}", "n0", timeout=3)
    assert done.returncode == 0
    assert "stopping without a transfer" in done.stderr
