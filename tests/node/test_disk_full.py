"""Disk full on a real, small filesystem: a node whose data directory sits on a 6 MiB tmpfs mounted by the test.

Sends are refused at once with RESOURCE_EXHAUSTED ("disk full on n0: <path>, N bytes free"), the SDK raises
StorageFullError without retrying and the CLI exits 10 with one line; ``/ready`` is 503 with the reason; every
acknowledged message can still be read; when space comes back the node takes writes again by itself, and the
next message gets the next queue offset.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from raftmq.client import Admin, Producer, StorageFullError, UnavailableError
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.processes import REPO_ROOT, node_specs, start_nodes, stop_all
from tests.support.waiting import wait_for

FS_SIZE = 6 << 20
BALLAST = 2 << 20


@pytest.fixture
def small_fs(tmp_path):
    """A tmpfs of 6 MiB mounted for this test (needs root / CAP_SYS_ADMIN; skipped with the reason otherwise)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE}", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for the disk-full test: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_disk_full_refuses_writes_at_once_keeps_reads_and_recovers(small_fs: Path, tmp_path):
    ballast = small_fs / "ballast"
    ballast.write_bytes(os.urandom(BALLAST))  # the space an operator frees later
    store = {"mapped_file_size_commit_log": 512 * 1024, "preallocate": True, "disk_min_free_bytes": 256 * 1024,
             "max_hash_slot_num": 256, "max_index_num": 1024, "mapped_file_size_consume_queue": 20 * 1000}
    [spec] = node_specs(tmp_path, 1, store=store)
    spec.data_dir = small_fs / "store"
    [node] = start_nodes([spec])
    try:
        addr = node.grpc_address
        topic = f"full-{uuid.uuid4().hex[:6]}"
        with Admin(addr) as admin:
            admin.create_topic(topic, queues=1)
        body = os.urandom(16 * 1024)
        acked = []
        with Producer(addr, retry_timeout=30) as p:
            with pytest.raises(StorageFullError) as exc_info:
                for _ in range(1000):  # 16 MiB: more than the filesystem holds
                    acked.append(p.send(topic, body, queue_id=0))
            err = exc_info.value
        assert acked, "nothing was stored before the disk filled"
        assert err.message.startswith("disk full on n0: "), err.message
        assert "bytes free" in err.message and str(small_fs) in err.message
        assert len(acked) < 1000

        status, text = node.http_get("/ready")
        assert status == 503 and "disk full on n0" in text, (status, text)

        # the CLI: one line, exit code 10, no retries
        r = _cli("produce", "--server", addr, "--body", "x" * 100, topic)
        assert r.returncode == 10, (r.returncode, r.stdout, r.stderr)
        assert "disk full on n0" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

        # reads keep working: every acknowledged message is there, at its offset
        stub = pb_grpc.MessagingServiceStub(node.channel())
        offset, got = 0, []
        while offset < len(acked):
            resp = stub.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=0, offset=offset, max_count=32,
                                                          long_poll_timeout_ms=5000), timeout=30)
            assert resp.status == pb.FOUND, resp.status
            got.extend(resp.messages)
            offset = resp.next_offset
        assert [m.queue_offset for m in got] == [a.queue_offset for a in acked]
        assert all(m.body == body for m in got)

        # space comes back: the node takes writes again by itself
        ballast.unlink()
        wait_for(lambda: node.http_get("/ready")[0] == 200, "the node is ready again once space is freed")
        with Producer(addr) as p:
            nxt = p.send(topic, b"after", queue_id=0)
        assert nxt.queue_offset == acked[-1].queue_offset + 1
    finally:
        stop_all([node])


@pytest.fixture
def failing_disk(tmp_path):
    """An ext4 filesystem on a loop device whose backing file lives on a 12 MiB tmpfs: ext4 believes it has
    64 MiB, so writes land in the page cache and fail at writeback (msync/fsync) once the tmpfs is full - a real
    I/O error path of the kernel (lost writeback), not a simulated one."""
    tfs, mnt = tmp_path / "backing", tmp_path / "ext4"
    tfs.mkdir()
    mnt.mkdir()
    steps: list[list[str]] = []

    def run(*cmd: str) -> str:
        r = subprocess.run(list(cmd), capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot build a failing disk for the I/O-error test ({' '.join(cmd)}): "
                        f"{r.stderr.strip() or r.returncode}")
        return r.stdout.strip()

    run("mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(tfs))
    steps.append(["umount", "-l", str(tfs)])
    image = tfs / "disk.img"
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    loop = run("losetup", "-f", "--show", str(image))
    steps.append(["losetup", "-d", loop])
    run("mkfs.ext4", "-q", "-F", loop)
    run("mount", "-o", "errors=continue", loop, str(mnt))
    steps.append(["umount", "-l", str(mnt)])
    try:
        yield mnt
    finally:
        for cmd in reversed(steps):
            subprocess.run(cmd, check=False, capture_output=True)


def test_an_io_error_on_flush_stops_writes_for_good(failing_disk: Path, tmp_path):
    store = {"mapped_file_size_commit_log": 4 << 20, "preallocate": True, "disk_min_free_bytes": 256 * 1024,
             "flush_interval_commit_log": 20, "flush_commit_log_least_pages": 0,
             "max_hash_slot_num": 256, "max_index_num": 1024, "mapped_file_size_consume_queue": 20 * 1000}
    [spec] = node_specs(tmp_path, 1, store=store)
    spec.data_dir = failing_disk / "store"
    [node] = start_nodes([spec])
    try:
        addr = node.grpc_address
        topic = f"eio-{uuid.uuid4().hex[:6]}"
        with Admin(addr) as admin:
            admin.create_topic(topic, queues=1)
        body = os.urandom(64 * 1024)
        with Producer(addr, retry_timeout=1) as p:
            with pytest.raises(UnavailableError) as exc_info:
                for _ in range(2000):  # 128 MiB: far more than the backing store holds
                    p.send(topic, body, queue_id=0)
        assert "I/O error on n0" in exc_info.value.message, exc_info.value.message
        status, text = node.http_get("/ready")
        assert status == 503 and "I/O error on n0" in text, (status, text)
        # it stays refused: nothing after the failure is ever taken (or reported durable) again
        with Producer(addr, retry_timeout=1) as p, pytest.raises(UnavailableError):
            p.send(topic, b"after", queue_id=0)
        assert "I/O error on n0" in node.http_get("/ready")[1]
    finally:
        stop_all([node], kill=True)
