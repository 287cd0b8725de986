"""Start real raftmq node processes on free loopback ports, wait for ``/ready``, stop or kill them.

Every room's multi-process tests use this: one node or a cluster (a list of member specs that know each other),
each with a temp data dir, tiny segment sizes and its own log file. Processes are always cleaned up, even when
a test fails: use ``running_nodes`` (a context manager) or call ``stop_all`` in a ``finally``.

    with running_nodes(tmp_path, 1) as [n0]:
        stub = raftmq_pb2_grpc.MessagingServiceStub(n0.channel())
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
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
# A local subchannel pool: a channel made after a node restarted does not inherit the reconnect backoff of the
# old process's connection from gRPC's shared pool (seen: seconds of UNAVAILABLE from a node that was up).
GRPC_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
                ("grpc.use_local_subchannel_pool", 1), ("grpc.initial_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 1000)]


class _PortReservations:
    """Ports for test processes, reserved for this whole test process so a node restarted on its ports finds
    them free.

    They come from below the kernel's ephemeral range: outgoing connections and ``bind(port 0)`` take their
    local ports from inside it, so neither can take the port of a node that is stopped for a moment. Within the
    range, ports are reserved in blocks, each by an exclusive lock on a file in a shared directory, held until
    this process exits: other test processes on the machine (pytest-xdist workers, another checkout's run) skip
    a locked block, and this process hands out each port once. A port something else listens on is skipped."""

    BLOCK = 64
    LOCK_DIR = Path(tempfile.gettempdir()) / "raftmq-test-ports"

    def __init__(self) -> None:
        try:
            low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            low = 32768
        self.first, self.end = 10000, max(10000 + 4 * self.BLOCK, low)
        self._lock = threading.Lock()
        self._held: list[int] = []  # lock-file descriptors, open (and locked) until this process exits
        self._next = self._stop = 0

    def take(self, n: int) -> list[int]:
        with self._lock:
            ports: list[int] = []
            while len(ports) < n:
                if self._next >= self._stop:
                    self._reserve_block()
                port = self._next
                self._next += 1
                if _bindable(port):
                    ports.append(port)
            return ports

    def _reserve_block(self) -> None:
        self.LOCK_DIR.mkdir(exist_ok=True)
        starts = list(range(self.first, self.end - self.BLOCK + 1, self.BLOCK))
        random.shuffle(starts)
        for start in starts:
            fd = os.open(self.LOCK_DIR / f"{start}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._held.append(fd)
            self._next, self._stop = start, start + self.BLOCK
            return
        raise RuntimeError(f"every block of test ports in [{self.first}, {self.end}) is held by another test "
                           f"process (lock files in {self.LOCK_DIR})")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
            return True
        except OSError:
            return False


_ports = _PortReservations()


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports for this test process alone, free now and kept for it (see
    ``_PortReservations``): a restarted node binds its ports again without racing anyone for them."""
    return _ports.take(n)


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
    host: str = HOST  # the gRPC and Raft ports' loopback address (HTTP stays on HOST)

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def raft_address(self) -> str:
        return f"{self.host}:{self.raft_port}"

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


def group_specs(base_dir: Path, groups: int = 2, members: int = 3, **overrides: dict[str, Any]) -> list[list[NodeSpec]]:
    """Specs of a cluster of ``groups`` Raft groups (issue 37: cluster.groups) of ``members`` each: group gI's
    members are ``gI-nJ``, each group has its own STOREHOST; every member knows every group."""
    ports = free_ports(3 * groups * members)
    out: list[list[NodeSpec]] = []
    for gi in range(groups):
        group = []
        for j in range(members):
            at = 3 * (gi * members + j)
            g, h, r = ports[at:at + 3]
            sid = f"g{gi}-n{j}"
            group.append(NodeSpec(sid, Path(base_dir) / sid / "store", g, h, r,
                                  {k: dict(v) for k, v in overrides.items()}))
        out.append(group)
    listed = [{"name": f"g{gi}", "store_host": f"127.0.0.1:{10911 + gi}",
               "members": [{"id": s.id, "raft": s.raft_address, "grpc": s.grpc_address} for s in group]}
              for gi, group in enumerate(out)]
    for gi, group in enumerate(out):
        for s in group:
            s.overrides.setdefault("cluster", {}).update({"group": f"g{gi}", "groups": listed})
    return out


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
