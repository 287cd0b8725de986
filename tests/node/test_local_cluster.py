"""``make run`` (node.local_cluster): it believes only its own nodes and moves with --port-base."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from tests.support.processes import HOST, REPO_ROOT


def _free_port_base(n: int) -> int:
    """A base whose HTTP/gRPC/Raft ports for ``n`` members are all free right now."""
    for _ in range(200):
        s = socket.socket()
        s.bind((HOST, 0))
        base = s.getsockname()[1]
        s.close()
        base -= base % 10
        if base < 20000 or base > 60000:
            continue
        ports = [base + 100 * i + d for i in range(n) for d in (0, 1, 11)]
        socks = []
        try:
            for p in ports:
                t = socket.socket()
                socks.append(t)
                t.bind((HOST, p))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise RuntimeError("no free port base")


def _run(*args: str, timeout: float = 120, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    # the started nodes read RAFTMQ_<SECTION>_<KEY> too: small files instead of 1.5 GB preallocated per member
    env.update(RAFTMQ_STORE_PREALLOCATE="false", RAFTMQ_STORE_MAPPED_FILE_SIZE_COMMIT_LOG=str(256 * 1024),
               RAFTMQ_STORE_MAX_HASH_SLOT_NUM="1024", RAFTMQ_STORE_MAX_INDEX_NUM="4096",
               RAFTMQ_STORE_MAX_MESSAGE_SIZE=str(64 * 1024))
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "raftmq.node.local_cluster", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_second_run_on_the_same_ports_fails_loudly_with_the_dead_nodes_log(tmp_path: Path) -> None:
    base = _free_port_base(1)
    first = _run("start", "--dir", str(tmp_path / "a"), "--nodes", "1", "--port-base", str(base))
    try:
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"127.0.0.1:{base + 1}" in first.stdout
        with urllib.request.urlopen(f"http://{HOST}:{base}/ready", timeout=5) as r:
            body = r.read().decode()
        pid = (tmp_path / "a" / "n0.pid").read_text().strip()
        assert body.splitlines()[1] == f"node=n0 pid={pid}"
        # the same ports again, other data: the new node cannot bind; the old one still answers /ready
        second = _run("start", "--dir", str(tmp_path / "b"), "--nodes", "1", "--port-base", str(base))
        assert second.returncode == 1, second.stdout + second.stderr
        assert "raftmq is running" not in second.stdout
        assert "FAILED" in second.stderr and "n0" in second.stderr
        assert "in use" in second.stderr.lower(), second.stderr  # the dead node's log tail says why
    finally:
        stopped = _run("stop", "--dir", str(tmp_path / "a"))
        _run("stop", "--dir", str(tmp_path / "b"))
    assert stopped.returncode == 0, stopped.stderr


def test_port_held_by_another_process_is_named(tmp_path: Path) -> None:
    """A live server on the HTTP port that is not this run's node: never taken for ready."""
    base = _free_port_base(1)

    class Ready(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b"ready\nnode=n0 pid=1\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a) -> None:
            pass

    srv = HTTPServer((HOST, base), Ready)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        r = _run("start", "--dir", str(tmp_path / "c"), "--nodes", "1", "--port-base", str(base), "--timeout", "60")
    finally:
        srv.shutdown()
        srv.server_close()
        _run("stop", "--dir", str(tmp_path / "c"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "raftmq is running" not in r.stdout
    assert "FAILED" in r.stderr


def test_bad_port_base_is_a_usage_error(tmp_path: Path) -> None:
    r = _run("start", "--dir", str(tmp_path), "--nodes", "3", "--port-base", "65500")
    assert r.returncode == 2 and "RUN_PORT_BASE" in r.stderr


def test_three_nodes_start_on_a_port_base_and_stop_without_unknown_leader_lines(tmp_path: Path) -> None:
    base = _free_port_base(3)
    started = _run("start", "--dir", str(tmp_path), "--nodes", "3", "--port-base", str(base))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"export RAFTMQ_SERVER=127.0.0.1:{base + 1},127.0.0.1:{base + 101},127.0.0.1:{base + 201}" \
            in started.stdout
    finally:
        stopped = _run("stop", "--dir", str(tmp_path))
    assert stopped.returncode == 0, stopped.stderr
    logs = "".join((tmp_path / f"n{i}.log").read_text() for i in range(3))
    assert "graceful stop" in logs  # the leader handed off or stepped down ...
    assert "handed leadership to ?" not in logs  # ... and says which


def test_a_member_started_again_keeps_the_settings_of_the_run_it_belongs_to(tmp_path: Path) -> None:
    """issue 34: settings given only in the environment of the first `make run` silently differed when one member
    was started again from another shell; and `make run` rewrote the config files it tells users to edit."""
    base = _free_port_base(1)
    first = _run("start", "--dir", str(tmp_path), "--nodes", "1", "--port-base", str(base),
                 extra_env={"RAFTMQ_CLUSTER_NAME": "FromTheEnv"})
    try:
        assert first.returncode == 0, first.stdout + first.stderr
        assert (tmp_path / "environment").stat().st_mode & 0o077 == 0  # it may hold secrets: owner-only
        with urllib.request.urlopen(f"http://{HOST}:{base}/metrics", timeout=5) as r:
            assert 'cluster="FromTheEnv"' in r.read().decode()
        assert _run("stop", "--dir", str(tmp_path)).returncode == 0
        config = tmp_path / "n0.yaml"
        config.write_text(config.read_text().replace("node:\n", "node:\n  log_level: WARNING\n", 1))  # an edit
        again = _run("start", "--dir", str(tmp_path), "--nodes", "1", "--port-base", str(base))  # no such env now
        assert again.returncode == 0, again.stdout + again.stderr
        assert "the environment differs from the one this cluster was started with in RAFTMQ_CLUSTER_NAME" in \
            again.stderr
        with urllib.request.urlopen(f"http://{HOST}:{base}/metrics", timeout=5) as r:
            assert 'cluster="FromTheEnv"' in r.read().decode()  # the run's settings, not this shell's
        assert "log_level: WARNING" in config.read_text()  # the edit was kept, not rewritten
    finally:
        _run("stop", "--dir", str(tmp_path))
