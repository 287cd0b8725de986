"""The official RocketMQ 5 Python client's own venv, built once per requirements set and cached outside the work
tree (``~/.cache/raftmq/rmq5-python-client/<hash>/``; ``$RAFTMQ_RMQ5_CLIENT_CACHE`` moves it). Used by
tests/rocketmq5 and bench/rocketmq5_bench.py; the client runs only as separate processes (drivers/)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "client-requirements.txt"
DRIVERS = HERE / "drivers"


def _cache_root() -> Path:
    env = os.environ.get("RAFTMQ_RMQ5_CLIENT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "raftmq" / "rmq5-python-client"


def build_client_venv() -> Path:
    """The client venv's python, building the venv when this requirements set has none yet (one builder at a
    time: a lock file beside it; a half-built venv is never used: it is built aside and renamed)."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes() + sys.version.encode()).hexdigest()[:16]
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / digest
    python = final / "bin" / "python"
    with open(root / f"{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / ".complete").exists():
            return python
        building = root / f"{digest}.building"
        shutil.rmtree(building, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(building)], check=True)
        result = subprocess.run([str(building / "bin" / "python"), "-m", "pip", "install", "-q",
                                 "--disable-pip-version-check", "--progress-bar", "off", "-r", str(REQUIREMENTS)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"installing the RocketMQ 5 Python client failed:\n{result.stdout}\n{result.stderr}")
        building.rename(final)  # venv scripts hold absolute paths, but we only ever run bin/python -m / a file
        (final / ".complete").write_text(REQUIREMENTS.read_text())
        return python
