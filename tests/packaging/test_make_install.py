"""``make run``'s install step, as a new user meets it on a fresh clone: one progress line, not pip's output."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e  # installs raftmq into a new venv
def test_the_first_install_says_one_line_and_a_second_nothing(tmp_path):
    """Issue 34: the first `make run` printed 109 lines of pip before anything else; it must be one progress
    line (pip's own output only when it fails, on stderr). Run on a copy with no .venv, as on a fresh clone."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "data", "build", "dist", "tests", "bench", "__pycache__", "*.egg-info", ".*_cache"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL") and not k.startswith(
        "RAFTMQ_")}
    first = subprocess.run(["make", "install-run", f"PYTHON={sys.executable}"], cwd=src, env=env,
                           capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("raftmq: installing") and lines[0].endswith(" done"), lines
    assert (src / ".venv" / "bin" / "raftmq").exists()
    again = subprocess.run(["make", "install-run", f"PYTHON={sys.executable}"], cwd=src, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout.strip() in ("", "make: Nothing to be done for 'install-run'."), \
        again.stdout
