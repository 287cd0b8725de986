"""The official RocketMQ 5 Python client against real raftmq nodes (issue 13).

The client (``rocketmq-python-client``, pinned with its gRPC/protobuf stack in client-requirements.txt) lives
in its own venv, built once and cached outside the work tree (``~/.cache/raftmq/rmq5-python-client/<hash>/``,
``$RAFTMQ_RMQ5_CLIENT_CACHE`` moves it), and runs as separate processes (tests/rocketmq5/drivers): it ships its
own ``apache.rocketmq.v2`` stubs, which cannot share a process with raftmq's. Drivers print JSON lines; the tests
assert on them and read the messages back through raftmq's own API.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import pytest

from tests.rocketmq5.client_venv import DRIVERS, build_client_venv


@pytest.fixture(scope="session")
def rmq5_python() -> Path:
    return build_client_venv()


class Driver:
    """One driver process: its JSON lines arrive on a queue as they are printed."""

    def __init__(self, python: Path, script: str, plan: dict[str, Any], home: Path,
                 env: dict[str, str] | None = None):
        home.mkdir(parents=True, exist_ok=True)
        full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        full_env["HOME"] = str(home)  # the client writes ~/logs/rocketmq_python/ there
        full_env.update(env or {})
        env = full_env
        self.log = home / "driver.stderr"
        self._stderr = open(self.log, "wb")
        self.proc = subprocess.Popen([str(python), str(DRIVERS / script), json.dumps(plan)], cwd=home, env=env,
                                     stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self.lines: Queue = Queue()
        self.seen: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:
                pass
        self.lines.put(None)

    def next(self, timeout: float = 60.0) -> dict:
        """The next line; AssertionError (with the driver's stderr and the client log) if none comes in time."""
        try:
            line = self.lines.get(timeout=timeout)
        except Empty:
            raise AssertionError(f"driver printed nothing for {timeout}s:\n{self.diagnostics()}") from None
        if line is None:
            raise AssertionError(f"driver ended (exit {self.proc.wait()}):\n{self.diagnostics()}")
        self.seen.append(line)
        return line

    def until(self, op: str, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            line = self.next(max(0.1, deadline - time.monotonic()))
            if line.get("op") == op:
                return line

    def all(self, timeout: float = 120.0) -> list[dict]:
        """Every remaining line until the driver exits (it must exit 0)."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except Empty:
                raise AssertionError(f"driver did not finish in {timeout}s:\n{self.diagnostics()}") from None
            if line is None:
                break
            self.seen.append(line)
            out.append(line)
        code = self.proc.wait(30)
        assert code == 0, f"driver exited {code}:\n{self.diagnostics()}"
        return out

    def client_log(self) -> str:
        """The client's own log file (it writes ~/logs/rocketmq_python/rocketmq_client.log)."""
        path = Path(self.log.parent, "logs", "rocketmq_python", "rocketmq_client.log")
        return path.read_text(errors="replace") if path.exists() else ""

    def diagnostics(self) -> str:
        self._stderr.flush()
        err = self.log.read_text(errors="replace")[-4000:]
        tail = self.client_log()[-4000:] or "(no client log)"
        return f"--- stderr\n{err}\n--- client log\n{tail}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


@pytest.fixture
def run_driver(rmq5_python, tmp_path) -> Iterator:
    """``run_driver(script, plan, env=None) -> Driver``; every driver is killed at the end of the test."""
    started: list[Driver] = []

    def run(script: str, plan: dict[str, Any], env: dict[str, str] | None = None) -> Driver:
        d = Driver(rmq5_python, script, plan, tmp_path / f"client-home-{len(started)}", env)
        started.append(d)
        return d

    yield run
    for d in started:
        d.close()
