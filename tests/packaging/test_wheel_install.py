"""The built wheel, installed into a fresh venv, is a working raftmq: broker, CLI, one import package.

This is what a user gets from ``pip install raftmq-*.whl``: the base install (no extras) must start a broker and
run the client commands, import only under ``raftmq``, and pull in none of the test, Spark or Kubernetes
dependencies. The venv is built from the wheel alone (dependencies from the package index), outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import NodeProcess, node_specs

ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",) and not k.startswith("RAFTMQ_")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "data", "build", "dist", "tests", "bench", "__pycache__", "*.egg-info", ".*_cache"))
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                  "-w", str(work / "dist"), str(src)], cwd=work)
    assert built.returncode == 0, built.stderr
    (wheel,) = (work / "dist").glob("raftmq-*.whl")
    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    assert made.returncode == 0, made.stderr
    installed = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                      str(wheel)], cwd=work)
    assert installed.returncode == 0, installed.stderr
    return venv


@pytest.mark.e2e  # installs raftmq into a new venv
def test_base_install_is_lean_and_namespaced(fresh_venv, tmp_path):
    py = str(fresh_venv / "bin" / "python")
    listed = _run([py, "-m", "pip", "list", "--format", "json"], cwd=tmp_path)
    names = {d["name"].lower() for d in json.loads(listed.stdout)}
    assert "raftmq" in names
    assert not names & {"pyspark", "kubernetes", "pytest", "hypothesis", "grpcio-tools", "pandas"}, names
    probe = ("import importlib.util as u, raftmq.store, raftmq.replication, raftmq.node, raftmq.client, "
             "raftmq.v1.raftmq_pb2, raftmq.pipeline.jobs;"
             "print([n for n in ('store','node','client','replication','pipeline') if u.find_spec(n)])")
    r = _run([py, "-c", probe], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", "generic top-level modules installed: " + r.stdout


@pytest.mark.e2e  # installs raftmq into a new venv
def test_cli_has_every_command_and_no_plugin_warning(fresh_venv, tmp_path):
    r = _run([str(fresh_venv / "bin" / "raftmq"), "--help"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr
    for command in ("produce", "consume", "node", "config", "pipeline"):
        assert command in r.stdout
    sample = _run([str(fresh_venv / "bin" / "raftmq"), "config", "sample"], cwd=tmp_path)
    assert sample.returncode == 0 and "grpc_listen" in sample.stdout, sample.stderr


@pytest.mark.e2e  # installs raftmq into a new venv
def test_installed_broker_stores_and_serves_a_message(fresh_venv, tmp_path):
    raftmq = str(fresh_venv / "bin" / "raftmq")
    (spec,) = node_specs(tmp_path, 1)
    node = NodeProcess(spec).start(command=[raftmq, "node"])
    try:
        node.wait_ready(120)
        server = ["--server", spec.grpc_address]
        assert _run([raftmq, "topic", "create", "wheel-topic", *server], cwd=tmp_path).returncode == 0
        sent = _run([raftmq, "produce", "wheel-topic", "--body", "from the wheel", "--keys", "w-1", *server],
                    cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr
        got = _run([raftmq, "consume", "wheel-group", "wheel-topic", "--from-beginning", "--max", "1",
                    "--idle-timeout", "30", "--json", *server], cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout.splitlines()[0])["body"] == "from the wheel"
    finally:
        node.stop()


ROOMS = {"raftmq": "proto/raftmq", "raftmq.store": "store", "raftmq.replication": "replication",
         "raftmq.node": "node", "raftmq.client": "client", "raftmq.pipeline": "pipeline"}


@pytest.mark.parametrize("package, folder", ROOMS.items())
def test_every_subpackage_is_packaged(package, folder):
    """A folder with an __init__.py that pyproject's package list misses works in a checkout (editable) and is
    absent from the wheel: the kind of gap that once left `pipeline.jobs` out of the image."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    assert setuptools["package-dir"][package] == folder
    for init in (ROOT / folder).rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT / folder)
        name = ".".join([package, *rel.parts]) if rel.parts else package
        assert name in listed, f"{init.parent} is not in [tool.setuptools] packages (add {name!r})"
