"""A member with a damaged commit log repairs it from its peers before it serves (issue 10, must-have 2).

Three real member processes. A stopped follower's commit log gets real byte writes (64 random bytes in its
first segment, 4 KiB of zeros in its middle segment; later its middle segment is deleted). On restart it must
end byte-identical to its peers (``raftmq cluster check``) with every acknowledged message readable from it.
With no peer reachable it stays not ready and says why, and repairs once a peer is back. The old code
truncated the log at the first damage (destroying every later record) and served on.
"""

from __future__ import annotations

import random
from pathlib import Path

import grpc
import pytest

from raftmq.client import Admin, Producer
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.client.test_cluster_check_e2e import SECRET, converged, raftmq
from tests.support.processes import GRPC_OPTIONS, TINY_STORE, running_nodes
from tests.support.waiting import wait_for

SEGMENT = TINY_STORE["mapped_file_size_commit_log"]
BODY = b"R" * 1000


def _patch(store_dir: Path, offset: int, data: bytes) -> None:
    path = store_dir / "commitlog" / f"{offset - offset % SEGMENT:020d}"
    with open(path, "r+b") as f:
        f.seek(offset % SEGMENT)
        f.write(data)


def _pull(address: str, topic: str, queue_id: int, offset: int) -> list[int]:
    with grpc.insecure_channel(address, options=GRPC_OPTIONS) as ch:
        r = pb_grpc.MessagingServiceStub(ch).PullMessage(
            pb.PullMessageRequest(topic=topic, queue_id=queue_id, offset=offset, max_count=32), timeout=30)
        return [int(m.body[len(BODY):]) for m in r.messages]


def _read_all(address: str, topic: str) -> list[int]:
    """Every message of ``topic`` pulled from one member, as the numbers their bodies carry."""
    out: list[int] = []
    with grpc.insecure_channel(address, options=GRPC_OPTIONS) as ch:
        stub = pb_grpc.MessagingServiceStub(ch)
        for q in stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=topic), timeout=10).queues:
            off = q.min_offset
            while off < q.max_offset:
                r = stub.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=q.queue_id, offset=off, max_count=32),
                                     timeout=30)
                assert r.status == pb.FOUND, (q.queue_id, off, r.status)
                out += [int(m.body[len(BODY):]) for m in r.messages]
                off = r.next_offset
    return sorted(out)


def _check_identical(servers: list[str], victim, acked: list[int]) -> None:
    end = converged(servers, timeout=120)
    r = raftmq("cluster", "check", "-s", servers[0], "--chunk", "64K")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"3 members identical over [0, {end})" in r.stdout
    assert _read_all(victim.grpc_address, "Heal") == acked


def test_damaged_follower_repairs_from_peers_and_ends_byte_identical(tmp_path: Path) -> None:
    with running_nodes(tmp_path, 3, cluster={"secret": SECRET}) as nodes:
        servers = [n.grpc_address for n in nodes]
        with Admin(servers) as admin:
            admin.create_topic("Heal", queues=2)
        acked: list[int] = []
        with Producer(servers) as p:
            for i in range(10):  # ~650 KB: three 256 KiB segments, all inside recovery's scan
                nums = [i * 50 + k for k in range(50)]
                p.send_batch("Heal", [BODY + b"%05d" % n for n in nums], queue_id=i % 2)
                acked += nums
        end = converged(servers)
        assert 2 * SEGMENT < end < 3 * SEGMENT
        with Admin(servers) as admin:
            leader_id = admin.cluster_status().leader_id
        victim = next(n for n in nodes if n.spec.id != leader_id)
        others = [n for n in nodes if n is not victim]

        # 64 random bytes in the first segment and 4 KiB of zeros in the middle one
        victim.stop()
        # inside a body: only the body is covered by a CRC (a change in the properties is found by the
        # cluster check, not by the member itself)
        seg0 = (victim.spec.data_dir / "commitlog" / f"{0:020d}").read_bytes()
        _patch(victim.spec.data_dir, seg0.index(BODY[:100], 50_000) + 10, random.Random(3).randbytes(64))
        _patch(victim.spec.data_dir, SEGMENT + 100_000, bytes(4096))
        victim.start().wait_ready(120)
        log = victim.spec.log_path.read_text(errors="replace")
        assert log.count("repaired commit-log range") >= 2, victim.log_tail(60)
        assert "truncating there" not in log  # the old recovery cut the log at the first damage
        _check_identical(servers, victim, acked)

        # a deleted middle segment
        victim.stop()
        (victim.spec.data_dir / "commitlog" / f"{SEGMENT:020d}").unlink()
        victim.start().wait_ready(120)
        _check_identical(servers, victim, acked)

        # a body byte rots while the member serves: the read is refused (DATA_LOSS, never the bytes) and the
        # member replaces the record with a peer's copy in the background; the retried read gets it
        seg0_path = victim.spec.data_dir / "commitlog" / f"{0:020d}"
        seg0 = seg0_path.read_bytes()
        at = seg0.index(BODY + b"%05d" % 7)
        with open(seg0_path, "r+b") as f:  # the member's mapping sees this write (same page cache)
            f.seek(at + 300)
            f.write(bytes([seg0[at + 300] ^ 0x04]))
        assert _pull(victim.grpc_address, "Heal", 0, 0) == list(range(7))  # the good ones before it
        with pytest.raises(grpc.RpcError) as ei:
            _pull(victim.grpc_address, "Heal", 0, 7)
        assert ei.value.code() == grpc.StatusCode.DATA_LOSS and "repairing it from a peer" in ei.value.details()

        def healed() -> list[int] | None:
            try:
                return _pull(victim.grpc_address, "Heal", 0, 7)
            except grpc.RpcError:
                return None

        assert wait_for(healed, timeout=60, what="the rotten record repaired from a peer")[0] == 7
        _check_identical(servers, victim, acked)

        # no peer reachable: not ready, with the reason; repaired as soon as a peer is back
        victim.stop()
        _patch(victim.spec.data_dir, 60_000, bytes(2048))
        for n in others:
            n.stop()
        victim.start()

        def reason() -> str | None:
            try:
                code, body = victim.http_get("/ready")
            except OSError:  # not listening yet
                return None
            return body if code == 503 and "no healthy peer" in body else None

        body = wait_for(reason, timeout=90, what="victim not ready with a reason")
        assert "commit log damaged" in body and f"{0:020d}" in body, body
        for n in others:
            n.start()
        victim.wait_ready(180)
        for n in others:
            n.wait_ready(120)
        _check_identical(servers, victim, acked)
