"""Catch-up serving limits: the token bucket (injected clock, no timing), and FetchCommitLog in-process (a real
store, a one-member Raft group and a real gRPC server on loopback) under a rate far below the copy's size, with a
stream cap that refuses extra fetches with RESOURCE_EXHAUSTED and a client that waits its turn."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import grpc
import pytest

from raftmq.node.metrics import RaftCollector
from raftmq.replication import catch_up
from raftmq.replication.catch_up_throttle import CatchUpThrottle, TokenBucket
from raftmq.replication.peers import Peers
from raftmq.replication.raft_write_path import RaftSettings
from raftmq.replication.write_path import MemberInfo
from raftmq.store import Message
from raftmq.v1 import replica_pb2 as rpb
from raftmq.v1 import replica_pb2_grpc as rpb_grpc
from tests.replication.tcp_proxy import PausableProxy
from tests.replication.test_checksum_commit_log import AUTH, SECRET, _Server, disk_bytes
from tests.replication.test_raft_single import make, one_member, open_store, wait_writable
from tests.support.waiting import wait_for

RATE = 64 << 10  # bytes/s: the ~190 KB the fixture writes take about two seconds to copy (after the burst)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------- token bucket, deterministic


def test_bucket_allows_its_burst_then_paces_at_the_rate():
    clock = FakeClock()
    b = TokenBucket(rate=1000, burst=500, clock=clock)
    assert b.reserve(300) == 0.0
    assert b.reserve(200) == 0.0          # the burst is used up exactly
    assert b.reserve(100) == pytest.approx(0.1)
    clock.now += 0.1                      # the caller waited; its 100 bytes are paid for
    assert b.reserve(1000) == pytest.approx(1.0)


def test_bucket_debt_queues_concurrent_callers_and_a_chunk_larger_than_the_burst():
    clock = FakeClock()
    b = TokenBucket(rate=1000, burst=100, clock=clock)
    assert b.reserve(100) == 0.0
    waits = [b.reserve(500) for _ in range(3)]  # three streams reserve at the same instant
    assert waits == pytest.approx([0.5, 1.0, 1.5])  # each behind the others' debt: 1000 B/s in all
    clock.now += 1.5
    assert b.reserve(1) == pytest.approx(0.001)


def test_bucket_refills_only_up_to_its_burst_and_refunds():
    clock = FakeClock()
    b = TokenBucket(rate=1000, burst=200, clock=clock)
    clock.now += 3600                     # idle for an hour: still only one burst
    assert b.reserve(200) == 0.0
    assert b.reserve(100) == pytest.approx(0.1)
    b.refund(100)                         # that read came back short: nothing was used
    assert b.reserve(0) == 0.0
    b.refund(10_000)
    assert b.reserve(201) == pytest.approx(0.001)


def test_zero_rate_is_unlimited_and_bad_rates_are_refused():
    b = TokenBucket(rate=0, clock=FakeClock())
    assert all(b.reserve(1 << 30) == 0.0 for _ in range(5))
    with pytest.raises(ValueError, match="rate"):
        TokenBucket(rate=-1)
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(rate=10, burst=0)


def test_throttle_caps_streams_and_chunks():
    t = CatchUpThrottle(bytes_per_s=1 << 20, max_streams=2, clock=FakeClock())
    assert t.try_open() and t.try_open()
    assert not t.try_open() and t.refused == 1 and t.streams == 2
    t.close()
    assert t.try_open() and t.streams == 2
    assert t.chunk_bytes(4 << 20) == 256 << 10     # one burst (a quarter second) per chunk
    assert CatchUpThrottle(0, 1).chunk_bytes(4 << 20) == 4 << 20
    with pytest.raises(ValueError, match="max_streams"):
        CatchUpThrottle(1, 0)


def test_settings_refuse_bad_catch_up_limits():
    assert RaftSettings().catch_up_bytes_per_s == 64 << 20 and RaftSettings().catch_up_max_streams >= 1
    with pytest.raises(ValueError, match="catch_up_bytes_per_s"):
        RaftSettings(catch_up_bytes_per_s=-1)
    with pytest.raises(ValueError, match="catch_up_max_streams"):
        RaftSettings(catch_up_max_streams=0)


# ---------------------------------------------------------------- FetchCommitLog over gRPC


@pytest.fixture
def member(tmp_path) -> Iterator[tuple]:
    """(store, write path, server, root) of a one-member group serving copies at RATE, one stream at a time."""
    st, wp = make(tmp_path / "s", one_member(tmp_path), catch_up_bytes_per_s=RATE, catch_up_max_streams=1)
    wp.start()
    server = None
    try:
        wait_writable(wp)
        for i in range(6):
            wp.put([Message(topic="T", queue_id=0, body=bytes([i * 10 + k]) * 3000) for k in range(10)]).result(10)
        # the first leader records the group's voters in an entry of its own: applied while a test copies, it
        # would move the applied index the test compares the copy's end with
        wait_for(lambda: wp.machine.membership is not None, "the group's membership record applied")
        server = _Server(wp)
        yield st, wp, server, tmp_path / "s"
    finally:
        if server is not None:
            server.stop()
        wp.stop()
        st.shutdown()


def peers_for(server: _Server) -> Peers:
    return Peers([MemberInfo("me", "127.0.0.1:1", "127.0.0.1:1"),
                  MemberInfo("src", "127.0.0.1:1", f"127.0.0.1:{server.port}")], "me", SECRET)


def served(wp) -> dict[str, float]:
    collector = RaftCollector("C", "n0", lambda: wp)
    return {m.name: m.samples[0].value for m in collector.collect()
            if m.name.startswith(("raftmq_raft_catch_up_served", "raftmq_raft_catch_up_refused",
                                  "raftmq_raft_catch_up_streams"))}


def test_a_copy_larger_than_the_rate_completes_byte_identical(member, tmp_path):
    st, wp, server, root = member
    end = st.commit_log_max_offset
    assert end > 2 * RATE, "the copy should take several rate-seconds"
    dest = open_store(tmp_path / "dest")
    peers = peers_for(server)
    try:
        end_offset, end_index = catch_up.fetch_range(peers, "src", dest, 0, wp.machine.applied.last[0], timeout=60)
        assert end_offset == end and end_index == wp.machine.applied.last[0]
        assert dest.commit_log_max_offset == end
        assert disk_bytes(tmp_path / "dest", 0, end, dest.config.mapped_file_size_commit_log) == \
            disk_bytes(root, 0, end, st.config.mapped_file_size_commit_log)
    finally:
        peers.close()
        dest.shutdown()
    t = wp.catch_up_throttle
    # every byte but the tails of full segments (skipped after their blank record) was sent
    assert end - 3 * st.config.max_message_size < t.bytes_served <= end and t.streams == 0 and t.refused == 0
    assert served(wp) == {"raftmq_raft_catch_up_served_bytes": t.bytes_served, "raftmq_raft_catch_up_refused": 0,
                          "raftmq_raft_catch_up_streams": 0}


def test_chunks_stay_within_one_burst(member):
    st, wp, server, _ = member
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        chunks = list(rpb_grpc.ReplicaServiceStub(ch).FetchCommitLog(
            rpb.FetchCommitLogRequest(from_offset=0, up_to_index=wp.machine.applied.last[0], max_chunk_bytes=4 << 20),
            metadata=AUTH, timeout=60))
    assert chunks[-1].last and chunks[-1].end_offset == st.commit_log_max_offset
    burst = int(wp.catch_up_throttle.bucket.burst)
    assert all(0 < len(c.data) <= burst for c in chunks[:-1])
    assert chunks[-1].offset == st.commit_log_max_offset  # every chunk sent (segment-end blanks are skipped)
    assert wp.catch_up_throttle.bytes_served == sum(len(c.data) for c in chunks)
    assert [c.offset for c in chunks] == sorted({c.offset for c in chunks})


def test_too_many_fetches_are_refused_with_retry_and_the_client_waits_its_turn(member, tmp_path):
    st, wp, server, root = member
    up_to = wp.machine.applied.last[0]
    req = rpb.FetchCommitLogRequest(from_offset=0, up_to_index=up_to)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = rpb_grpc.ReplicaServiceStub(ch)
        holder = stub.FetchCommitLog(req, metadata=AUTH, timeout=60)
        next(holder)  # one stream is open and being paced
        assert wp.catch_up_throttle.streams == 1
        with pytest.raises(grpc.RpcError) as err:
            next(stub.FetchCommitLog(req, metadata=AUTH, timeout=10))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "retry" in err.value.details() and "catch_up_max_streams" in err.value.details()

        # the tick-thread path does not wait: it fails at once and tries another peer
        peers = peers_for(server)
        dest = open_store(tmp_path / "dest")
        try:
            with pytest.raises(catch_up.CatchUpError, match="RESOURCE_EXHAUSTED"):
                catch_up.fetch_range(peers, "src", dest, 0, up_to, timeout=10, retry=False)
            assert dest.commit_log_max_offset == 0

            # the start-up path retries after a backoff and completes once the first stream is done
            result: list = []
            t = threading.Thread(target=lambda: result.append(
                catch_up.fetch_range(peers, "src", dest, 0, up_to, timeout=60)))
            t.start()
            refused = wp.catch_up_throttle.refused
            wait_for(lambda: wp.catch_up_throttle.refused > refused, "the retrying fetch to be refused once")
            holder.cancel()
            t.join(60)
            assert not t.is_alive()
            assert result == [(st.commit_log_max_offset, up_to)]
            assert disk_bytes(tmp_path / "dest", 0, st.commit_log_max_offset, dest.config.mapped_file_size_commit_log) \
                == disk_bytes(root, 0, st.commit_log_max_offset, st.config.mapped_file_size_commit_log)
        finally:
            peers.close()
            dest.shutdown()
    wait_for(lambda: wp.catch_up_throttle.streams == 0, "the streams to close")


def test_the_limits_are_set_from_the_node_config():
    from raftmq.node.config import load_config

    s = load_config(environ={}).raft_settings()
    assert (s.catch_up_bytes_per_s, s.catch_up_max_streams) == (64 << 20, 2)
    s = load_config(environ={"RAFTMQ_CLUSTER_RAFT_CATCH_UP_BYTES_PER_S": "0"},
                    assignments=["cluster.raft.catch_up_max_streams=3"]).raft_settings()
    assert (s.catch_up_bytes_per_s, s.catch_up_max_streams) == (0, 3)


def test_a_copy_cut_midway_resumes_from_the_local_end(member, tmp_path, caplog):
    """A long, rate-limited copy whose connection drops keeps what it verified and asks again from there."""
    st, wp, server, root = member
    up_to = wp.machine.applied.last[0]
    proxy = PausableProxy(server.port)
    peers = Peers([MemberInfo("me", "127.0.0.1:1", "127.0.0.1:1"),
                   MemberInfo("src", "127.0.0.1:1", f"127.0.0.1:{proxy.port}")], "me", SECRET)
    dest = open_store(tmp_path / "dest")
    try:
        result: list = []
        t = threading.Thread(target=lambda: result.append(catch_up.fetch_range(peers, "src", dest, 0, up_to,
                                                                               timeout=60)))
        caplog.set_level(logging.INFO, logger="raftmq.replication.catch_up")
        t.start()
        wait_for(lambda: dest.commit_log_max_offset > 0, "the first chunk")
        for s in list(proxy._socks):  # drop the connection mid-copy (the rate keeps the rest for seconds)
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:  # closed already by its pump thread
                pass
        t.join(60)
        assert not t.is_alive()
        assert result == [(st.commit_log_max_offset, up_to)]
        assert "resuming" in caplog.text
        assert disk_bytes(tmp_path / "dest", 0, st.commit_log_max_offset, dest.config.mapped_file_size_commit_log) \
            == disk_bytes(root, 0, st.commit_log_max_offset, st.config.mapped_file_size_commit_log)
    finally:
        peers.close()
        proxy.close()
        dest.shutdown()
