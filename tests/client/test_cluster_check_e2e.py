"""``raftmq cluster check`` against a real 3-member cluster (with a cluster secret): identical replicas pass, one
flipped byte in a stopped follower's committed commit log and one in a consume-queue unit are found where they
are, an unreachable member is named, bad arguments and a missing secret get one clear line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from raftmq.client import Admin, Producer
from tests.client.test_cli_e2e import _env
from tests.support.processes import REPO_ROOT, TINY_STORE, running_nodes

SECRET = "check-secret"
BODY = b"B" * 1000
SEGMENT = TINY_STORE["mapped_file_size_commit_log"]


def raftmq(*args: str, secret: str | None = SECRET) -> subprocess.CompletedProcess:
    env = _env()
    if secret is not None:
        env["RAFTMQ_CLUSTER_SECRET"] = secret
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=REPO_ROOT)


def converged(servers: list[str], timeout: float = 60.0) -> int:
    """Every member has applied and dispatched the same commit-log end; returns it."""
    deadline = time.monotonic() + timeout
    with Admin(servers) as admin:
        while True:
            members = admin.cluster_status().members
            ends = {m.applied_offset for m in members}
            if len(ends) == 1 and all(m.role in ("leader", "follower") and m.dispatch_behind_bytes == 0
                                      for m in members):
                return ends.pop()
            assert time.monotonic() < deadline, f"members did not converge: {members}"
            time.sleep(0.2)


def row(stdout: str, member_id: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith(f"| {member_id} "))


def flip_body_byte(store_dir: Path, near: int) -> int:
    """Change one message-body byte at or after offset ``near`` in segment 0; returns its commit-log offset.

    Only a body byte: the record still parses (its CRC is only checked when recovery scans the last segments,
    and segment 0 is not one of them), so the member starts and serves the changed byte as committed data."""
    path = store_dir / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    pos = data.index(BODY[:64], near) + 10
    data[pos] ^= 0x01
    path.write_bytes(bytes(data))
    return pos


def flip_tags_code(store_dir: Path, topic: str, queue_id: int, unit: int) -> None:
    """Change the tags-code byte of one unit in the queue's first file of a *running* member (the file is mapped
    shared, so the member serves the changed unit at once; a restart would rebuild it from the commit log)."""
    path = store_dir / "consumequeue" / topic / str(queue_id) / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[unit * 20 + 19] ^= 0x01
    path.write_bytes(bytes(data))


def test_check_proves_replicas_identical_finds_a_flipped_byte_and_names_an_unreachable_member(tmp_path):
    with running_nodes(tmp_path, 3, cluster={"secret": SECRET}) as nodes:
        servers = [n.grpc_address for n in nodes]
        with Admin(servers) as admin:
            admin.create_topic("Check", queues=2)
        with Producer(servers) as p:
            for i in range(26):  # ~1.3 MB: six 256 KiB segments, so segment 0 is outside the recovery scan
                p.send_batch("Check", [BODY + b"%05d" % (i * 50 + k) for k in range(50)], queue_id=i % 2)
        end = converged(servers)
        assert end > 5 * SEGMENT

        # identical: exit 0, every member checked over [0, end)
        r = raftmq("cluster", "check", "-s", servers[0], "--chunk", "64K")
        assert r.returncode == 0, r.stderr
        for n in nodes:
            assert re.search(rf"\[0, {end}\)\s*\|\s+{end} \| identical", row(r.stdout, n.spec.id)), r.stdout
        assert f"3 members identical over [0, {end})" in r.stdout
        m = re.search(r"consume queues: (\d+) queues identical over every member's dispatched range \((\d+) units", r.stdout)
        assert m and int(m.group(1)) >= 2 and int(m.group(2)) >= 26 * 50, r.stdout
        r = raftmq("cluster", "check", "-s", servers[1], "--json", "--from", "1000", "--bytes", "300K")
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert report["identical"] and report["range_from"] == 1000 and report["range_to"] == 1000 + 300 * 1024
        assert report["algorithm"] == "sha256" and report["difference"] is None

        # on a live cluster: producers keep writing while the check runs; only the common committed prefix counts
        stop = threading.Event()

        def produce() -> None:
            with Producer(servers) as p:
                while not stop.is_set():
                    p.send_batch("Check", [BODY] * 20, queue_id=1)

        writer = threading.Thread(target=produce, daemon=True)
        writer.start()
        try:
            r = raftmq("cluster", "check", "-s", servers[2], "--chunk", "16K", "--json")
        finally:
            stop.set()
            writer.join(30)
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert json.loads(r.stdout)["range_to"] >= end
        end = converged(servers)

        # a missing secret is refused with what to do (exit 8); bad arguments are one usage line (exit 2)
        r = raftmq("cluster", "check", "-s", servers[0], secret=None)
        assert r.returncode == 8 and "RAFTMQ_CLUSTER_SECRET" in r.stderr, r.stderr
        for bad, what in ((["--from", "-5"], "--from"), (["--chunk", "0"], "--chunk"), (["--bytes", "0"], "--bytes")):
            r = raftmq("cluster", "check", "-s", servers[0], *bad)
            assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and what in r.stderr, r.stderr
        r = raftmq("cluster", "check", "-s", servers[0], "--from", str(end + 1))
        assert r.returncode == 4 and f"ends at {end}" in r.stderr, r.stderr

        # flip one committed body byte in a stopped follower; it still starts, with nothing truncated
        with Admin(servers) as admin:
            leader_id = admin.cluster_status().leader_id
        victim = next(n for n in nodes if n.spec.id != leader_id)
        victim.stop()
        bad = flip_body_byte(victim.spec.data_dir, 100_000)
        victim.start().wait_ready(90)
        assert converged(servers) == end
        flip_tags_code(victim.spec.data_dir, "Check", 0, 5)

        r = raftmq("cluster", "check", "-s", servers[0], "--chunk", "64K")
        assert r.returncode == 9, (r.stdout, r.stderr)
        m = re.search(r"DIFFERS in \[(\d+), (\d+)\)", row(r.stdout, victim.spec.id))
        assert m, r.stdout
        lo, hi = int(m.group(1)), int(m.group(2))
        assert lo <= bad < hi and hi - lo <= 4096, (bad, lo, hi)
        for n in nodes:
            if n is not victim:
                assert "matches majority" in row(r.stdout, n.spec.id)
        assert f"first difference: commit-log bytes [{lo}, {hi})" in r.stderr and victim.spec.id in r.stderr
        assert "DIFFERS in Check/0 at 5" in row(r.stdout, victim.spec.id)
        assert f"first consume-queue difference: Check/0 unit at queue offset 5: {victim.spec.id} differs" in r.stderr
        r = raftmq("cluster", "check", "-s", servers[0], "--json")
        assert r.returncode == 9
        report = json.loads(r.stdout)
        diff = report["difference"]
        assert diff["differing"] == [victim.spec.id] and diff["offset"] <= bad < diff["end"]
        assert diff["chunk_offset"] <= diff["offset"] and diff["end"] <= diff["chunk_end"]
        qdiff = report["queue_difference"]
        assert (qdiff["topic"], qdiff["queue_id"], qdiff["from_offset"], qdiff["to_offset"], qdiff["differing"]) == (
            "Check", 0, 5, 6, [victim.spec.id])
        # a check of the commit log only, stopping before the flipped byte, passes
        r = raftmq("cluster", "check", "-s", servers[0], "--bytes", str(lo), "--no-queues")
        assert r.returncode == 0 and "consume queues" not in r.stdout, r.stderr

        # the changed member down: the other two are compared (identical), the command names it and exits 5
        victim.kill()
        alive = [n.grpc_address for n in nodes if n is not victim]
        r = raftmq("cluster", "check", "-s", ",".join(alive), "--timeout", "3")
        assert r.returncode == 5, (r.stdout, r.stderr)
        assert "unreachable" in row(r.stdout, victim.spec.id)
        assert victim.spec.id in r.stderr and victim.grpc_address in r.stderr
        assert sum("identical" in row(r.stdout, n.spec.id) for n in nodes if n is not victim) == 2
