"""What the benchmarks that start peer servers as processes (NATS, RocketMQ) share: waiting until one listens,
and the CPU all of them used."""

from __future__ import annotations

import random
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


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def broker_port_bases(count: int) -> list[int]:
    """``count`` ports B for RocketMQ brokers, each with B-2, B, B+1 and B+7 free: a broker listening on B also
    binds its fast remoting port B-2 and its HA port B+1 (a DLedger member: B+7 for its peers)."""
    out: list[int] = []
    while len(out) < count:
        base = random.randrange(20000, 40000, 10)
        if all(_free(base + d) for d in (-2, 0, 1, 7)):
            out.append(base)
    return out
