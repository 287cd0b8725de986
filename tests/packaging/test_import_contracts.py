"""The architecture's import contracts ([tool.importlinter] in pyproject.toml, run by `make lint` and `make test`):
they hold on this tree, and the configuration as written does catch a new import circle inside a room."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_tree_keeps_every_contract():
    done = _lint_imports(ROOT, ROOT / "lint")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


def test_a_new_circle_inside_node_breaks_the_build(tmp_path):
    """node/ copied next to a namespace `raftmq` (found before the editable install), two modules importing each
    other added: the same contracts report the circle."""
    view = tmp_path / "raftmq"
    shutil.copytree(ROOT / "node", view / "node", ignore=shutil.ignore_patterns("__pycache__"))
    (view / "node" / "probe_a.py").write_text("from raftmq.node import probe_b  # noqa: F401\n")
    (view / "node" / "probe_b.py").write_text("from raftmq.node import probe_a  # noqa: F401\n")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    lines = ["[importlinter]", "root_packages =", *(f"    {r}" for r in config["root_packages"])]
    for i, contract in enumerate(config["contracts"]):
        lines.append(f"[importlinter:contract:{i}]")
        for key, value in contract.items():
            lines.append(f"{key} = " + ("\n    " + "\n    ".join(value) if isinstance(value, list) else value))
    (tmp_path / ".importlinter").write_text("\n".join(lines) + "\n")
    done = _lint_imports(tmp_path, tmp_path)
    assert done.returncode != 0
    assert "no import circle inside a room BROKEN" in done.stdout
    assert "probe_a" in done.stdout or "probe_b" in done.stdout
