"""What the benchmarks that start peer servers as processes (NATS, RocketMQ) share: waiting until one listens,
and the CPU all of them used."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterable

from raftmq.store.thread_name import process_cpu_seconds


def wait_port(port: int, what: str, procs: Iterable[subprocess.Popen] = (), timeout: float = 90.0) -> None:
    """Return once 127.0.0.1:``port`` accepts connections; fail at once when one of ``procs`` has exited."""
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not listen on {port} within {timeout:g} s")


def cpu_seconds(pids: Iterable[int]) -> float:
    """CPU seconds of all ``pids`` together (NaN when one of them is gone)."""
    return sum(process_cpu_seconds(pid) for pid in pids)
