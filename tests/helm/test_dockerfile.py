"""The image recipe, checked without a Docker engine (none runs in CI or on the dev box).

The Dockerfile is parsed and its key properties asserted; the build context that .dockerignore lets through is
materialised and the package is really built from it (offline wheel build), so a missing COPY or an over-eager
ignore rule fails here rather than in a release pipeline.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
BUILD_TOOLS = re.compile(r"\b(apt-get|apk|gcc|g\+\+|make|build-essential|cc|clang|git)\b")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        op, _, args = full.partition(" ")
        out.append((op.upper(), args.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for op, args in instructions():
        if op == "FROM":
            result.append([])
        if result:
            result[-1].append((op, args))
    return result


def _ignore_regex(pattern: str) -> re.Pattern:
    pattern = pattern.strip().strip("/")
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    # A pattern that matches a directory excludes (or re-includes) everything below it.
    return re.compile(f"^{out}(?:/.*)?$")


def context_files() -> list[Path]:
    """Files of the repository that .dockerignore lets into the build context (last matching rule wins)."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        rules.append((negate, _ignore_regex(line.lstrip("!"))))
    kept = []
    for path in ROOT.rglob("*"):
        if not path.is_file() or ".git" in path.relative_to(ROOT).parts[:1]:
            continue
        rel = path.relative_to(ROOT).as_posix()
        included = True
        for negate, rx in rules:
            if rx.match(rel):
                included = negate
        if included:
            kept.append(path)
    return kept


def test_two_stages_on_a_slim_python_base():
    s = stages()
    assert len(s) == 2
    builder_from, final_from = s[0][0][1], s[1][0][1]
    assert builder_from.endswith("AS builder")
    args = dict(a.split("=", 1) for op, a in instructions() if op == "ARG" and "=" in a)
    assert "slim" in args["PYTHON_IMAGE"]
    assert builder_from.split()[0] == final_from.split()[0] == "${PYTHON_IMAGE}"


def test_builder_installs_the_package_with_the_k8s_extra_into_a_venv():
    runs = " ".join(a for op, a in stages()[0] if op == "RUN")
    assert "venv" in runs and "/opt/raftmq" in runs
    assert re.search(r"pip .*install .*\"\.\[k8s\]\"", runs)


def test_final_stage_is_minimal_non_root_and_runs_the_node():
    final = stages()[1]
    ops = [op for op, _ in final]
    copies = [a for op, a in final if op == "COPY"]
    assert copies == ["--from=builder /opt/raftmq /opt/raftmq"]  # the venv only, no source tree
    for op, a in final:
        if op == "RUN":
            assert not BUILD_TOOLS.search(a.replace("install -d", "")), a
            assert "pip uninstall" in a  # the base image's packaging tools go too
    user = next(a for op, a in final if op == "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    values = yaml.safe_load((ROOT / "helm/raftmq/values.yaml").read_text())
    assert int(uid) == values["podSecurityContext"]["runAsUser"]
    entry = next(a for op, a in final if op == "ENTRYPOINT")
    assert json.loads(entry) == ["raftmq", "node"]  # exec form: signals reach the node directly
    assert ops.index("USER") < ops.index("ENTRYPOINT")
    exposed = {int(p) for op, a in final if op == "EXPOSE" for p in a.split()}
    assert exposed == set(values["ports"].values())


def test_every_package_is_copied_and_let_through_by_dockerignore():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = pyproject["tool"]["setuptools"]
    dirs = setuptools.get("package-dir", {})
    needed = set()
    for pkg in setuptools["packages"]:
        # The folder of the longest mapped prefix (raftmq.pipeline.jobs -> pipeline/jobs), else the name itself.
        mapped = max((p for p in dirs if pkg == p or pkg.startswith(p + ".")), key=len, default=None)
        folder = dirs[mapped] + pkg[len(mapped):].replace(".", "/") if mapped else pkg.replace(".", "/")
        needed.add(folder.split("/")[0])
    copied = {a.split()[0].rstrip("/") for op, a in stages()[0] if op == "COPY"}
    assert needed <= copied, needed - copied
    kept = {p.relative_to(ROOT).as_posix() for p in context_files()}
    for src in copied:
        assert any(k == src or k.startswith(src + "/") for k in kept), f"{src} is excluded by .dockerignore"
    assert not any(k.startswith((".venv/", "data/", "tests/", ".git/")) for k in kept)
    assert not any("__pycache__" in k for k in kept)


def test_the_build_context_builds_the_package(tmp_path):
    """What `pip install .` does in the builder stage, offline, from exactly the files Docker would send."""
    ctx = tmp_path / "ctx"
    for path in context_files():
        dest = ctx / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    out = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(out), str(ctx)],
        check=True, capture_output=True, cwd=tmp_path,
    )
    (wheel,) = out.glob("raftmq-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        requires = next(zf.read(n).decode() for n in names if n.endswith("METADATA"))
    for module in ("raftmq/node/kube.py", "raftmq/v1/raftmq_pb2.py", "raftmq/client/cli.py",
                   "raftmq/store/__init__.py", "raftmq/replication/__init__.py", "raftmq/pipeline/jobs/verify.py",
                   "raftmq/pipeline/log4j2.properties"):
        assert module in names, module
    # One import package: nothing of ours at the top level of site-packages but `raftmq`.
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"raftmq"}, tops
    assert "raftmq = raftmq.client.cli:main" in entry_points
    assert re.search(r"Requires-Dist: kubernetes==[\d.]+; extra == \"k8s\"", requires)
