"""ReplicaService.ChecksumCommitLog in-process: a real store, a one-member Raft group and a real gRPC server on
loopback. Digests match the bytes on disk; ranges past the applied end, before the retained start, bad chunk
sizes and a missing secret are refused with a status that says what to do; one call is bounded."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from raftmq.replication import replica_service
from raftmq.replication.peers import SECRET_METADATA_KEY
from raftmq.replication.replica_service import ReplicaServicer
from raftmq.store import Message
from raftmq.v1 import replica_pb2 as rpb
from raftmq.v1 import replica_pb2_grpc as rpb_grpc
from tests.replication.test_raft_single import make, one_member, wait_writable
from tests.support.processes import free_ports

SECRET = "s3cret"
AUTH = ((SECRET_METADATA_KEY, SECRET),)


class _Server:
    """A grpc.aio server with the ReplicaServicer, on its own event loop thread (as the node runs it)."""

    def __init__(self, wp):
        self.port = free_ports(1)[0]
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(wp), self.loop).result(10)

    async def _start(self, wp) -> None:
        self.server = grpc.aio.server()
        rpb_grpc.add_ReplicaServiceServicer_to_server(ReplicaServicer(lambda: wp, SECRET), self.server)
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        await self.server.start()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def member(tmp_path) -> Iterator[tuple]:
    """(store, stub) of a one-member group holding ~3 segments of applied messages."""
    st, wp = make(tmp_path / "s", one_member(tmp_path))
    wp.start()
    server = None
    channel = None
    try:
        wait_writable(wp)
        for i in range(6):
            wp.put([Message(topic="T", queue_id=0, body=bytes([i * 10 + k]) * 3000) for k in range(10)]).result(10)
        server = _Server(wp)
        channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
        yield st, rpb_grpc.ReplicaServiceStub(channel), tmp_path / "s"
    finally:
        if channel is not None:
            channel.close()
        if server is not None:
            server.stop()
        wp.stop()
        st.shutdown()


def disk_bytes(root: Path, start: int, stop: int, file_size: int) -> bytes:
    """The commit-log bytes [start, stop) read straight from the segment files."""
    out = bytearray()
    pos = start
    while pos < stop:
        base = pos - pos % file_size
        n = min(stop, base + file_size) - pos
        with open(root / "commitlog" / f"{base:020d}", "rb") as f:
            f.seek(pos - base)
            out += f.read(n)
        pos += n
    return bytes(out)


def test_digests_cover_the_range_across_segments_and_match_the_files(member):
    st, stub, root = member
    end = st.commit_log_max_offset
    file_size = st.config.mapped_file_size_commit_log
    assert end > 2 * file_size, "the workload should span segments"
    r = stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(from_offset=100, to_offset=end, chunk_bytes=50_000),
                               metadata=AUTH, timeout=10)
    assert r.end_offset == end and r.applied_offset == end and r.min_offset == 0 and r.member_id == "n0"
    assert [c.offset for c in r.chunks] == list(range(100, end, 50_000))
    assert sum(c.length for c in r.chunks) == end - 100
    for c in r.chunks:
        assert c.sha256 == hashlib.sha256(disk_bytes(root, c.offset, c.offset + c.length, file_size)).digest()
    # an empty range is fine (nothing to digest); chunk 0 means the default
    r = stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(from_offset=end, to_offset=end), metadata=AUTH, timeout=10)
    assert not r.chunks and r.end_offset == end
    r = stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(from_offset=0, to_offset=end), metadata=AUTH, timeout=10)
    assert [c.length for c in r.chunks] == [min(1 << 20, end)]


def test_one_call_is_bounded_and_the_caller_pages_on(member, monkeypatch):
    st, stub, _ = member
    end = st.commit_log_max_offset
    monkeypatch.setattr(replica_service, "MAX_CHECKSUM_BYTES_PER_CALL", 40_000)
    pos, chunks = 0, []
    while pos < end:
        r = stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(from_offset=pos, to_offset=end, chunk_bytes=16_384),
                                   metadata=AUTH, timeout=10)
        assert 0 < r.end_offset - pos <= 40_000 and len(r.chunks) <= 2
        chunks += r.chunks
        pos = r.end_offset
    monkeypatch.undo()
    whole = stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(from_offset=0, to_offset=end, chunk_bytes=16_384),
                                   metadata=AUTH, timeout=10)
    assert len(whole.chunks) == len(chunks) and whole.end_offset == end
    assert [(c.offset, c.sha256) for c in chunks] == [(c.offset, c.sha256) for c in whole.chunks]
    # tiny chunks: the answer is capped in digests, not only in bytes
    r = stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(from_offset=0, to_offset=end, chunk_bytes=1),
                               metadata=AUTH, timeout=10)
    assert len(r.chunks) == replica_service.MAX_CHECKSUM_CHUNKS_PER_CALL and r.end_offset == len(r.chunks)


BAD_REQUESTS = [
    (dict(from_offset=0, to_offset=10**9), grpc.StatusCode.OUT_OF_RANGE, "past what member n0 has applied"),
    (dict(from_offset=-1, to_offset=10), grpc.StatusCode.INVALID_ARGUMENT, "0 <= from_offset <= to_offset"),
    (dict(from_offset=10, to_offset=5), grpc.StatusCode.INVALID_ARGUMENT, "0 <= from_offset <= to_offset"),
    (dict(from_offset=0, to_offset=10, chunk_bytes=-4), grpc.StatusCode.INVALID_ARGUMENT, "chunk_bytes -4"),
    (dict(from_offset=0, to_offset=10, chunk_bytes=(16 << 20) + 1), grpc.StatusCode.INVALID_ARGUMENT,
     "must be 1..16777216"),
]


def test_bad_ranges_are_refused_with_what_to_do(member):
    _, stub, _ = member
    for req, code, text in BAD_REQUESTS:
        with pytest.raises(grpc.RpcError) as exc:
            stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(**req), metadata=AUTH, timeout=10)
        assert exc.value.code() == code and text in exc.value.details(), (req, exc.value.details())


def test_a_range_before_the_retained_start_and_a_missing_secret_are_refused(member):
    st, stub, _ = member
    assert st.retention.commit_log_cleaner.delete_expired_files(1 << 62, 0, True) >= 1  # retention takes segment 0
    low = st.commit_log_min_offset
    assert low > 0
    with pytest.raises(grpc.RpcError) as exc:
        stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(from_offset=low - 1, to_offset=low + 10), metadata=AUTH,
                               timeout=10)
    assert exc.value.code() == grpc.StatusCode.OUT_OF_RANGE and f"start at {low} or later" in exc.value.details()
    r = stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(from_offset=low, to_offset=low + 10), metadata=AUTH,
                               timeout=10)
    assert r.min_offset == low and [c.length for c in r.chunks] == [10]
    with pytest.raises(grpc.RpcError) as exc:
        stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(from_offset=0, to_offset=10), timeout=10)
    assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED and "cluster.secret" in exc.value.details()
    with pytest.raises(grpc.RpcError) as exc:
        stub.ChecksumCommitLog(rpb.ChecksumCommitLogRequest(from_offset=0, to_offset=10),
                               metadata=((SECRET_METADATA_KEY, "wrong"),), timeout=10)
    assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_consume_queue_digests_match_the_files_and_bad_ranges_are_refused(member, monkeypatch):
    st, stub, root = member
    assert st.reput.wait_dispatched(timeout=10)
    listing = stub.ChecksumConsumeQueues(rpb.ChecksumConsumeQueuesRequest(), metadata=AUTH, timeout=10)
    assert [(q.topic, q.queue_id, q.min_offset, q.max_offset, q.sha256) for q in listing.queues] == [
        ("T", 0, 0, 60, b"")]
    raw = (root / "consumequeue" / "T" / "0" / f"{0:020d}").read_bytes()
    r = stub.ChecksumConsumeQueues(rpb.ChecksumConsumeQueuesRequest(ranges=[
        rpb.ConsumeQueueRange(topic="T", queue_id=0, from_offset=0, to_offset=60),
        rpb.ConsumeQueueRange(topic="T", queue_id=0, from_offset=7, to_offset=9)]), metadata=AUTH, timeout=10)
    assert [q.sha256 for q in r.queues] == [hashlib.sha256(raw[:60 * 20]).digest(),
                                            hashlib.sha256(raw[7 * 20:9 * 20]).digest()]
    assert r.queues[1].max_offset == 60 and r.member_id == "n0"

    monkeypatch.setattr(replica_service, "MAX_CHECKSUM_QUEUE_UNITS_PER_CALL", 50)
    for (topic, qid, lo, hi), code, text in [
        (("T", 0, 58, 61), grpc.StatusCode.OUT_OF_RANGE, "dispatched of T/0: [0, 60)"),
        (("T", 3, 0, 1), grpc.StatusCode.NOT_FOUND, "no consume queue T/3"),
        (("T", 0, 5, 4), grpc.StatusCode.INVALID_ARGUMENT, "need 0 <= from_offset <= to_offset"),
        (("T", 0, 0, 51), grpc.StatusCode.INVALID_ARGUMENT, "at most 50: split the ranges"),
    ]:
        with pytest.raises(grpc.RpcError) as exc:
            stub.ChecksumConsumeQueues(rpb.ChecksumConsumeQueuesRequest(ranges=[rpb.ConsumeQueueRange(
                topic=topic, queue_id=qid, from_offset=lo, to_offset=hi)]), metadata=AUTH, timeout=10)
        assert exc.value.code() == code and text in exc.value.details(), exc.value.details()
    with pytest.raises(grpc.RpcError) as exc:
        stub.ChecksumConsumeQueues(rpb.ChecksumConsumeQueuesRequest(), timeout=10)
    assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
