"""Every README code block meant to run is run, against a live 3-member cluster, as a reader would paste it.

Blocks fenced ```python run as scripts; in blocks fenced ```sh every line that runs `raftmq` runs in bash
(`make`, `curl`, `.` lines are the set-up around them). Plain ``` blocks are listings, output and commands for
other machines (docker, helm, kubectl) and are not run. The snippets use `make run`'s loopback addresses; the
test points them at its own nodes by replacing those addresses, nothing else.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.processes import REPO_ROOT, running_nodes

README = REPO_ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
MAKE_RUN = ["127.0.0.1:8081", "127.0.0.1:8181", "127.0.0.1:8281"]


def blocks(kind: str) -> list[tuple[int, str]]:
    text = README.read_text()
    return [(text[: m.start()].count("\n") + 1, m.group(2)) for m in FENCE.finditer(text) if m.group(1) == kind]


def _raftmq_lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if re.search(r"(^|\|\s*)raftmq ", line)]


def _env(addresses: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    env["RAFTMQ_SERVER"] = ",".join(addresses)
    bin_dir = Path(sys.executable).parent  # the venv's `raftmq`
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_readme_has_runnable_blocks():
    assert len(blocks("python")) >= 2 and len(blocks("sh")) >= 2
    assert all(_raftmq_lines(b) for _, b in blocks("sh"))


def test_every_runnable_readme_block_runs(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        addresses = [n.grpc_address for n in nodes]
        env = _env(addresses)
        failures = []
        for line_no, block in blocks("sh"):
            for line in _raftmq_lines(block):
                r = subprocess.run(["bash", "-o", "pipefail", "-c", line], capture_output=True, text=True, env=env,
                                   cwd=tmp_path, timeout=180)
                if r.returncode != 0:
                    failures.append(f"README.md:{line_no}: {line}\n  exit {r.returncode}: {r.stderr.strip()}")
        for line_no, block in blocks("python"):
            code = block
            for ours, live in zip(MAKE_RUN, addresses, strict=True):
                code = code.replace(f'"{ours}"', f'"{live}"')
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                               timeout=180)
            if r.returncode != 0:
                failures.append(f"README.md:{line_no} (python)\n  exit {r.returncode}: {r.stderr.strip()[-800:]}")
        assert failures == [], "\n".join(failures)


def test_the_quick_start_metrics_line_answers_on_every_member(tmp_path):
    """issue 34: the Quick start's metrics line grepped a counter only the leader has, so on 127.0.0.1:8080 it
    printed nothing whenever n0 did not lead. Run against each member's HTTP port, it must print something."""
    from raftmq.client import Admin, Producer

    [quick_start] = [b for _, b in blocks("sh") if "raftmq topic create demo" in b]
    [line] = [ln for ln in quick_start.splitlines() if ln.startswith("curl ") and "/metrics" in ln]
    with running_nodes(tmp_path, 3) as nodes:
        addresses = [n.grpc_address for n in nodes]
        with Admin(addresses) as admin, Producer(addresses) as p:
            admin.create_topic("demo")
            p.send("demo", "hello raftmq")
        for n in nodes:
            mine = line.replace("127.0.0.1:8080", n.http_url.removeprefix("http://"))
            r = subprocess.run(["bash", "-o", "pipefail", "-c", mine], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and r.stdout.strip(), (n.spec.id, mine, r.stderr)
