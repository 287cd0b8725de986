"""Start real raftmq node processes on free loopback ports, wait for ``/ready``, stop or kill them.

Every room's multi-process tests use this: one node or a cluster (a list of member specs that know each other),
each with a temp data dir, tiny segment sizes and its own log file. Processes are always cleaned up, even when
a test fails: use ``running_nodes`` (a context manager) or call ``stop_all`` in a ``finally``.

    with running_nodes(tmp_path, 1) as [n0]:
        stub = raftmq_pb2_grpc.MessagingServiceStub(n0.channel())
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

from tests.support.waiting import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"

# Small files so rolls, index files and recovery are exercised with little data; a body limit that fits them.
TINY_STORE: dict[str, Any] = {
    "mapped_file_size_commit_log": 256 * 1024,
    "mapped_file_size_consume_queue": 20 * 200,
    "max_hash_slot_num": 1024,
    "max_index_num": 4096,
    "max_message_size": 64 * 1024,
    "flush_interval_commit_log": 100,
    "flush_interval_consume_queue": 200,
    "preallocate": False,
}
GRPC_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on loopback right now (all held open until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class NodeSpec:
    """What one member needs: its id, directories, ports and config overrides (section -> key -> value)."""

    id: str
    data_dir: Path
    grpc_port: int
    http_port: int
    raft_port: int
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    members: list[dict[str, str]] = field(default_factory=list)

    @property
    def grpc_address(self) -> str:
        return f"{HOST}:{self.grpc_port}"

    @property
    def raft_address(self) -> str:
        return f"{HOST}:{self.raft_port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir.parent / f"{self.id}.yaml"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.id}.log"

    def config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "node": {"id": self.id, "data_dir": str(self.data_dir), "grpc_listen": self.grpc_address,
                     "http_listen": f"{HOST}:{self.http_port}", "log_level": "INFO"},
            "cluster": {"raft_listen": self.raft_address, "raft_address": self.raft_address,
                        "members": self.members},
            "store": dict(TINY_STORE),
            "kubernetes": {"role_label": "false"},
        }
        for section, values in self.overrides.items():
            cfg.setdefault(section, {}).update(values)
        return cfg

    def write_config(self) -> Path:
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        return self.config_path


def node_specs(base_dir: Path, n: int = 1, **overrides: dict[str, Any]) -> list[NodeSpec]:
    """Specs for ``n`` members under ``base_dir``; with n > 1 each knows the others (cluster.members).

    ``overrides`` are config sections merged into every member, e.g. ``store={"flush_disk_type": "SYNC"}``.
    """
    ports = free_ports(3 * n)
    specs = []
    for i in range(n):
        g, h, r = ports[3 * i : 3 * i + 3]
        specs.append(NodeSpec(f"n{i}", Path(base_dir) / f"n{i}" / "store", g, h, r,
                              {k: dict(v) for k, v in overrides.items()}))
    if n > 1:
        members = [{"id": s.id, "raft": s.raft_address, "grpc": s.grpc_address} for s in specs]
        for s in specs:
            s.members = members
    return specs


class NodeProcess:
    """One running ``python -m raftmq.node node --config FILE`` process."""

    started = 0  # processes started in this test process (tests/support/suite_report.py)

    def __init__(self, spec: NodeSpec):
        self.spec = spec
        self.proc: subprocess.Popen | None = None
        self._log = None
        self._channel: grpc.Channel | None = None
        self.http_context: Any = None  # ssl.SSLContext: the HTTP port speaks TLS (security.tls_*)

    # ---------------------------------------------------------------- addresses
    @property
    def grpc_address(self) -> str:
        return self.spec.grpc_address

    @property
    def http_url(self) -> str:
        scheme = "https" if self.http_context is not None else "http"
        return f"{scheme}://{HOST}:{self.spec.http_port}"

    def channel(self) -> grpc.Channel:
        """A shared channel to this node (closed by stop/kill)."""
        if self._channel is None:
            self._channel = grpc.insecure_channel(self.grpc_address, options=GRPC_OPTIONS)
        return self._channel

    def http_get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.http_url + path, timeout=timeout, context=self.http_context) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    # ---------------------------------------------------------------- lifecycle
    def start(self, *extra_args: str, env: dict[str, str] | None = None,
              command: list[str] | None = None,
              wrap: Callable[[list[str]], list[str]] | None = None) -> NodeProcess:
        """Start the node from this checkout, or with ``command`` (e.g. ``[venv/bin/raftmq, "node"]``) from an
        installed package: then outside the checkout, so none of its folders can be imported by accident.
        ``wrap`` turns the final argv into the one to run (e.g. inside a private mount namespace)."""
        self.spec.write_config()
        self.spec.data_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.spec.log_path, "ab")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_") and k != "PYTHONPATH"}
        if command is None:
            full_env["PYTHONPATH"] = str(REPO_ROOT / "proto")
        full_env.update(env or {})
        argv = [*(command or [sys.executable, "-m", "raftmq.node", "node"]), "--config", str(self.spec.config_path),
                *extra_args]
        NodeProcess.started += 1
        self.proc = subprocess.Popen(
            wrap(argv) if wrap else argv,
            cwd=REPO_ROOT if command is None else self.spec.data_dir.parent,
            stdout=self._log, stderr=subprocess.STDOUT, env=full_env,
        )
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.spec.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_ready(self, timeout: float = 60.0) -> NodeProcess:
        """Poll ``/ready`` until 200; fail with the log tail if the process exits or the time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise RuntimeError(f"node {self.spec.id} exited with {self.proc.returncode} before it was ready:\n"
                                   f"{self.log_tail()}")
            try:
                if self.http_get("/ready", timeout=1.0)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"node {self.spec.id} not ready after {timeout}s:\n{self.log_tail()}")

    def _close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code (kills and raises if it does not exit in time)."""
        try:
            if self.proc is None:
                return 0
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                    raise TimeoutError(f"node {self.spec.id} ignored SIGTERM for {timeout}s:\n{self.log_tail()}") from None
            return self.proc.returncode
        finally:
            self._close()

    def kill(self) -> None:
        """SIGKILL (crash) and reap."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        finally:
            self._close()

    def freeze(self, timeout: float = 30.0) -> None:
        """SIGSTOP, and return only once every thread of the process is stopped.

        ``kill()`` returns before the stop reaches all threads: one woken thread must run first and then stop
        the others, and on a loaded box its threads keep answering Raft and gRPC for milliseconds meanwhile
        (seen: a "cut-off" leader's first write acknowledged by a follower that was still running)."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        wait_for(lambda: _all_threads_stopped(self.proc.pid), f"every thread of node {self.spec.id} to stop",
                 timeout, interval=0.001)

    def thaw(self) -> None:
        """SIGCONT (after ``freeze``)."""
        os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self, timeout: float = 60.0) -> NodeProcess:
        """Stop cleanly (if running), start again on the same ports and data, wait for ready."""
        if self.alive:
            self.stop()
        return self.start().wait_ready(timeout)


def _all_threads_stopped(pid: int) -> bool:
    """Every thread in state T (stopped) per /proc/PID/task/*/stat; a thread that exited meanwhile is skipped."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except FileNotFoundError:
            continue
        state = stat[stat.rindex(b")") + 2]  # after "pid (comm) "; comm may hold ")" itself
        if state != ord("T"):
            return False
    return True


def start_nodes(specs: list[NodeSpec], *, wait: bool = True, timeout: float = 60.0) -> list[NodeProcess]:
    """Start every member, then wait for all of them; on any failure the started ones are killed."""
    nodes = [NodeProcess(s) for s in specs]
    try:
        for n in nodes:
            n.start()
        if wait:
            for n in nodes:
                n.wait_ready(timeout)
    except BaseException:
        stop_all(nodes, kill=True)
        raise
    return nodes


def stop_all(nodes: list[NodeProcess], *, kill: bool = False) -> None:
    """Stop (or kill) every node, even when some of them fail to stop."""
    for n in nodes:
        try:
            n.kill() if kill else n.stop()
        except Exception:
            n.kill()


@contextlib.contextmanager
def running_nodes(base_dir: Path, n: int = 1, **overrides: dict[str, Any]) -> Iterator[list[NodeProcess]]:
    """``n`` ready nodes for the duration of the block; always stopped (killed if they do not stop)."""
    nodes = start_nodes(node_specs(base_dir, n, **overrides))
    try:
        yield nodes
    finally:
        stop_all(nodes)
