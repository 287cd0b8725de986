"""Every code block of the README and of docs/ marked runnable is run, against a live 3-member cluster, as a
reader would paste it (issue 42: the docs' blocks too, not only the README's).

A block is runnable when the line before its fence is ``<!-- runnable -->`` (an HTML comment: invisible on GitHub
and in the site). A runnable ```python block runs as a script; in a runnable ```sh block every line that runs
`raftmq` runs in bash (`make`, `curl`, `.` lines are the set-up around them). Other blocks are listings, output
and commands for other machines (docker, helm, kubectl) and are not run. Documents run in reading order: the
README, then the site's navigation (mkdocs.yml), so a guide may use the topic an earlier one created. The
snippets use `make run`'s loopback addresses; the test points them at its own nodes by replacing those
addresses, nothing else.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.processes import REPO_ROOT, running_nodes

README = REPO_ROOT / "README.md"
MARK = "<!-- runnable -->"
FENCE = re.compile(r"^(<!-- runnable -->\n)?```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
MAKE_RUN = ["127.0.0.1:8081", "127.0.0.1:8181", "127.0.0.1:8281"]


def documents() -> list[Path]:
    """The README, then every page of the site in navigation order."""
    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())

    def pages(nav) -> list[str]:
        out: list[str] = []
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            out += pages(value) if isinstance(value, list) else [value]
        return out

    return [README] + [REPO_ROOT / config["docs_dir"] / p for p in pages(config["nav"])]


def blocks(kind: str, doc: Path | None = None) -> list[tuple[str, str]]:
    """(``file:line``, code) of every runnable block of ``kind``, in reading order."""
    out = []
    for path in [doc] if doc else documents():
        text = path.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) and m.group(2) == kind:
                line = text[: m.start()].count("\n") + 2
                out.append((f"{path.relative_to(REPO_ROOT)}:{line}", m.group(3)))
    return out


def _raftmq_lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if re.search(r"(^|\|\s*)raftmq ", line)]


def _env(addresses: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    env["RAFTMQ_SERVER"] = ",".join(addresses)
    bin_dir = Path(sys.executable).parent  # the venv's `raftmq`
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_docs_have_runnable_blocks_and_every_mark_marks_one():
    assert len(blocks("python")) >= 7 and len(blocks("sh")) >= 2
    assert blocks("sh", README) and blocks("python", README)
    assert all(_raftmq_lines(b) for _, b in blocks("sh"))
    for path in documents():
        text = path.read_text()
        for m in re.finditer(re.escape(MARK) + r"\n(.*)", text):
            assert re.fullmatch(r"```(python|sh)", m.group(1)), \
                f"{path.relative_to(REPO_ROOT)}: {MARK} must stand right above a ```python or ```sh fence"


def test_every_runnable_block_runs(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        addresses = [n.grpc_address for n in nodes]
        env = _env(addresses)
        failures = []
        runnable = sorted([(where, "sh", b) for where, b in blocks("sh")] +
                          [(where, "python", b) for where, b in blocks("python")],
                          key=lambda r: _reading_position(r[0]))
        for where, kind, block in runnable:
            if kind == "sh":
                for line in _raftmq_lines(block):
                    r = subprocess.run(["bash", "-o", "pipefail", "-c", line], capture_output=True, text=True,
                                       env=env, cwd=tmp_path, timeout=180)
                    if r.returncode != 0:
                        failures.append(f"{where}: {line}\n  exit {r.returncode}: {r.stderr.strip()}")
                continue
            code = block
            for ours, live in zip(MAKE_RUN, addresses, strict=True):
                code = code.replace(f'"{ours}"', f'"{live}"')
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                               timeout=180)
            if r.returncode != 0:
                failures.append(f"{where} (python)\n  exit {r.returncode}: {r.stderr.strip()[-800:]}")
        assert failures == [], "\n".join(failures)


def _reading_position(where: str) -> tuple[int, int]:
    path, line = where.rsplit(":", 1)
    order = [str(p.relative_to(REPO_ROOT)) for p in documents()]
    return order.index(path), int(line)


def test_the_quick_start_metrics_line_answers_on_every_member(tmp_path):
    """issue 34: the Quick start's metrics line grepped a counter only the leader has, so on 127.0.0.1:8080 it
    printed nothing whenever n0 did not lead. Run against each member's HTTP port, it must print something."""
    from raftmq.client import Admin, Producer

    [quick_start] = [b for _, b in blocks("sh", README) if "raftmq topic create demo" in b]
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
