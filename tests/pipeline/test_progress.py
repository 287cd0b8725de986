"""A pipeline job talks from its first second: the first progress line does not wait for pyspark's import, and
Spark's start-up is ticked like any other wait (issue 16: 50-85 s of silence before)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

from raftmq.pipeline.progress import Progress
from tests.support.processes import REPO_ROOT
from tests.support.waiting import wait_for


def test_first_line_comes_before_pyspark_is_imported():
    code = ("import sys, io; from pipeline.progress import Progress; out = io.StringIO(); Progress('stats', out=out); "
            "assert 'pyspark' not in sys.modules, 'pyspark imported before the first line'; print(out.getvalue())")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("[stats    0.0s] started")


def test_a_long_start_up_is_ticked_until_it_ends():
    out = io.StringIO()
    progress = Progress("verify", interval=0.05, out=out)
    release = threading.Event()

    def start_spark() -> None:
        with progress.waiting("starting Spark"):
            release.wait(60)

    t = threading.Thread(target=start_spark)
    t.start()
    try:
        wait_for(lambda: out.getvalue().count("still starting Spark") >= 2, "two ticks while Spark starts")
    finally:
        release.set()
        t.join()
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("] started") and lines[1].endswith("] starting Spark")
    assert lines[-1].split("] ", 1)[1].startswith("done starting Spark in ")


def test_quiet_is_quiet():
    out = io.StringIO()
    progress = Progress("stats", quiet=True, interval=0.01, out=out)
    with progress.waiting("starting Spark"):
        pass
    assert out.getvalue() == ""
