"""The issue-17 benchmarks run end to end (raftmq only, one short case each): they share helpers, and a change to
one once broke another without any test noticing. Only that they finish and print a result row is checked;
benchmarks never assert timings."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^async\s+2 x 1\s+\d+", re.M)
# raftmq msgs/s, p99, srv us, cli us, msgs/entry, reqs/entry, then the engine's msgs/s, p99 and the share
ROW_WITH_ENGINE = re.compile(r"^async\s+2 x 1(\s+\d+(\.\d+)?){9}\s", re.M)


def _run(*argv: str) -> str:
    done = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.parametrize("sdk", ["asyncio", "threads"])
def test_peer_bench_runs_raftmq_alone(sdk):
    # the write path alone once is enough; two rounds once (their medians and the spread table)
    extra = () if sdk == "asyncio" else ("--skip-engine", "--rounds", "2")
    out = _run("bench/peer_bench.py", "--skip-nats", "--skip-dledger", "--modes", "async", "--producers", "2",
               "--batch", "1", "--seconds", "1", "--client-procs", "1", "--stream-window", "2", "--sdk", sdk,
               *extra)
    assert (ROW_WITH_ENGINE if sdk == "asyncio" else ROW).search(out), out
    if sdk == "threads":
        assert "the median of 2 rounds" in out and re.search(r"^async 2 x 1\s+\d+-\d+\s", out, re.M), out


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) pins the members")
def test_core_scaling_bench_runs_one_member():
    out = _run("bench/core_scaling_bench.py", "--members", "1", "--cpus", "0", "--producers", "2", "--batch", "1",
               "--seconds", "1", "--client-procs", "1")
    assert re.search(r"^\s+1\s+0\s+\d+", out, re.M), out


def test_a_stream_window_below_one_is_refused_before_anything_starts():
    for bench in ("bench/peer_bench.py", "bench/core_scaling_bench.py"):
        done = subprocess.run([sys.executable, bench, "--stream-window", "0"], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2, done
        assert "--stream-window: must be at least 1" in done.stderr, done.stderr
    done = subprocess.run([sys.executable, "bench/peer_bench.py", "--rounds", "0"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done
    assert "--rounds: must be at least 1, got 0" in done.stderr, done.stderr


def test_scale_bench_runs_two_groups():
    """issue 37: one short case over 2 groups of 3 members (6 processes), unpinned; its table and projection."""
    out = _run("bench/scale_bench.py", "--groups", "2", "--modes", "async", "--batch", "32", "--producers", "2",
               "--seconds", "1", "--client-procs", "1", "--no-pin", "--cores-per-group", "1")
    assert re.search(r"^free\s+async\s+2 x 32\s+2\s+\d+\s+-\s+[\d.]+\s+\d+\s+g0 \d+ \(\d+\) net \d+\s+g1 \d+", out,
                     re.M), out
    assert "cannot show linear scaling" in out, out
