"""The `helm test` pod's script, run as the pod runs it, against real node processes on loopback.

The script is taken from the rendered chart; only the addresses (SERVER, MEMBERS) are replaced by loopback ones
and `raftmq` is the real CLI from this checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helm.chart import objects, one
from tests.support.processes import node_specs, running_nodes, start_nodes, stop_all

BIN = str(Path(sys.executable).parent)



def kubernetes_expand(text: str, env: dict[str, str]) -> str:
    """What the kubelet does to a container's args before the shell sees them: `$(NAME)` of a defined variable
    becomes its value, `$$` becomes `$`, anything else stays (a real node turned the script's `$$` into `$`)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def pod_script_and_env() -> tuple[str, dict[str, str]]:
    pod = one(objects(), "Pod")
    c = pod["spec"]["containers"][0]
    assert c["command"] == ["/bin/sh", "-c"]
    env = {e["name"]: e["value"] for e in c["env"]}
    return kubernetes_expand(c["args"][0], env), env


def run_script(server: str, members: list[str], attempts: int = 30) -> subprocess.CompletedProcess:
    script, env = pod_script_and_env()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}, **env}
    env.update(SERVER=server, MEMBERS=" ".join(members), ATTEMPTS=str(attempts),
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""), HOME=os.environ.get("HOME", "/tmp"))
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, env=env, timeout=240)


def test_helm_test_passes_on_a_healthy_group(shared_cluster):
    nodes = shared_cluster
    done = run_script(nodes[0].grpc_address, [n.grpc_address for n in nodes])
    assert done.returncode == 0, done.stdout + done.stderr
    # each run writes its own key (the shell's `$$` never reached the shell: Kubernetes made it a lone `$`)
    assert re.search(r"^writing helm-test-\d+ through ", done.stdout, re.M), done.stdout
    for n in nodes:
        assert f"ok: {n.grpc_address} has helm-test-" in done.stdout


def test_helm_test_fails_when_a_member_lacks_the_message(tmp_path):
    """A node outside the group never gets the message: the test must say so and fail."""
    nodes = start_nodes(node_specs(tmp_path / "group", 3), timeout=90)
    try:
        with running_nodes(tmp_path / "stranger", 1) as [stranger]:
            subprocess.run([f"{BIN}/raftmq", "topic", "create", "raftmq-helm-test", "--server",
                            stranger.grpc_address], check=True, capture_output=True)
            done = run_script(nodes[0].grpc_address, [nodes[0].grpc_address, stranger.grpc_address], attempts=2)
    finally:
        stop_all(nodes)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"FAIL: {stranger.grpc_address} does not have helm-test-" in done.stdout
