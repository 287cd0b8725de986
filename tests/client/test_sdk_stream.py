"""Producer.send through the accumulator and SendStream (issue 17), against real node processes: sends from
many threads share the stream, errors are the ones the unary path raises, and when the node is killed mid-stream
every send either was acknowledged and survives, or reports a failure (unknown outcome when it was in flight)."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from raftmq.client import (
    Admin,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    Producer,
    RaftmqError,
    TopicNotFoundError,
    UnknownOutcomeError,
)
from raftmq.node.send_stream import ACCEPTED_METADATA_KEY, STREAM_METHOD
from tests.support.metrics import metric_sum
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def node(shared_node):
    return shared_node


def _stream_requests(node) -> float:
    return metric_sum(node, "raftmq_rpc_latency_seconds_count", method="SendStream.request")


def _send_from_threads(producer: Producer, topic: str, threads: int, per_thread: int) -> list:
    results: list = []
    failures: list = []

    def work(t: int) -> None:
        for i in range(per_thread):
            try:
                results.append((f"t{t}-{i}", producer.send(topic, f"t{t}-{i}", keys=[f"t{t}-{i}"])))
            except Exception as e:  # collected: the test asserts on them
                failures.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not failures, failures[:3]
    return results


def leader_and_follower(nodes, topic: str) -> tuple:
    """Create ``topic`` on a running cluster: (leader, a follower)."""
    with Admin([n.grpc_address for n in nodes]) as admin:
        admin.create_topic(topic, queues=2)
        leader_id = admin.cluster_status().leader_id
    leader = next(n for n in nodes if n.spec.id == leader_id)
    return leader, next(n for n in nodes if n is not leader)


def check_stored(address: str, acked: list) -> None:
    """Every (body, SendResult) in ``acked`` is readable at ``address``, byte for byte, under its UNIQ_KEY."""
    with Admin(address) as admin:
        for body, r in acked:
            m = admin.view_message(r.msg_id)
            assert m.body == body.encode() and m.uniq_key == r.uniq_key


def test_sends_from_many_threads_share_the_stream_and_are_stored(node):
    addr = node.grpc_address
    with Admin(addr) as admin:
        admin.create_topic("StreamMany", queues=4)
    before = _stream_requests(node)
    with Producer(addr) as p:
        results = _send_from_threads(p, "StreamMany", threads=8, per_thread=40)
    assert len(results) == 320
    assert len({r.msg_id for _, r in results}) == 320
    assert len({r.uniq_key for _, r in results}) == 320
    assert _stream_requests(node) > before, "sends went through SendStream"
    with Admin(addr) as admin:
        for body, r in results[::16]:
            m = admin.view_message(r.msg_id)
            assert m.body == body.encode() and m.uniq_key == r.uniq_key and m.queue_offset == r.queue_offset
        assert sum(q.max_offset for q in admin.queue_offsets("StreamMany")) == 320


@pytest.mark.parametrize("linger_ms", [0.1, 0])
def test_errors_are_the_unary_ones(node, linger_ms):
    addr = node.grpc_address
    with Admin(addr) as admin:
        admin.create_topic(f"StreamErr{linger_ms}".replace(".", ""), queues=2)
        admin.create_topic(f"StreamRo{linger_ms}".replace(".", ""), queues=2, perm=4)
    topic, read_only = f"StreamErr{linger_ms}".replace(".", ""), f"StreamRo{linger_ms}".replace(".", "")
    with Producer(addr, linger_ms=linger_ms) as p:
        with pytest.raises(InvalidArgumentError, match="tag"):
            p.send(topic, b"x", tags="a||b")
        with pytest.raises(TopicNotFoundError):
            p.send("NoSuchTopicStream", b"x")
        with pytest.raises(PermissionDeniedError):
            p.send(read_only, b"x")
        with pytest.raises(NotFoundError, match="queue 7 does not exist"):
            p.send_batch(topic, [b"a", b"b"], queue_id=7)
        with pytest.raises(InvalidArgumentError, match="delay_level"):
            p.send(topic, b"x", delay_level=-1)
        assert p.send(topic, b"fine", queue_id=1).queue_id == 1
        assert [r.queue_offset for r in p.send_batch(topic, [b"a", b"b", b"c"], queue_id=0)] == [0, 1, 2]


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="linger_ms"):
        Producer("127.0.0.1:1", linger_ms=-1)
    with pytest.raises(ValueError, match="stream_window"):
        Producer("127.0.0.1:1", stream_window=0)
    for bad in (None, 0, -1, "5", True):  # a send waits at most `timeout`: it must be a positive number of seconds
        with pytest.raises(ValueError, match=r"timeout must be a number of seconds > 0"):
            Producer("127.0.0.1:1", timeout=bad)
    with pytest.raises(ValueError, match=r"retry_timeout must be a number of seconds >= 0"):
        Producer("127.0.0.1:1", retry_timeout=-1)


def test_node_killed_mid_stream_acknowledged_sends_survive(tmp_path):
    """SIGKILL while 6 threads stream sends: each send is acknowledged, or fails (unknown outcome when it was
    in flight); after the restart every acknowledged message is there, byte for byte."""
    with running_nodes(tmp_path, 1) as [n0]:
        addr = n0.grpc_address
        with Admin(addr) as admin:
            admin.create_topic("StreamKill", queues=4)
        acked: list = []
        failed: list[Exception] = []
        stop = threading.Event()
        with Producer(addr, timeout=5, retry_timeout=1) as p:
            def work(t: int) -> None:
                i = 0
                while not stop.is_set():
                    body = f"k{t}-{i}"
                    try:
                        acked.append((body, p.send("StreamKill", body)))
                    except RaftmqError as e:
                        failed.append(e)
                        return
                    i += 1

            ts = [threading.Thread(target=work, args=(t,)) for t in range(6)]
            for t in ts:
                t.start()
            wait_for(lambda: len(acked) >= 200, "200 acknowledged sends")
            n0.kill()
            for t in ts:
                t.join(timeout=60)
            stop.set()
            assert not any(t.is_alive() for t in ts), "a send hung after the node died"
        assert len(failed) == 6, "every thread saw the failure"
        for e in failed:  # in flight: unknown outcome; not yet sent: the connection failure of the unary path
            assert isinstance(e, RaftmqError) and e.address == addr
            if isinstance(e, UnknownOutcomeError):
                assert e.uniq_keys
        n0.start().wait_ready()
        check_stored(addr, acked)


def test_stream_opened_at_a_follower_moves_to_the_leader(shared_cluster):
    """The stream first goes to the only address the producer knows, a follower: its sends come back 'not the
    leader', are re-sent the unary way (redirect), and the next stream opens at the leader."""
    leader, follower = leader_and_follower(shared_cluster, "StreamMove")
    before, before_follower = _stream_requests(leader), _stream_requests(follower)
    with Producer([follower.grpc_address]) as p:
        first = p.send("StreamMove", b"first")
        assert p.leader == leader.grpc_address
        results = _send_from_threads(p, "StreamMove", threads=4, per_thread=10)
    assert _stream_requests(follower) > before_follower, "the first stream went to the follower"
    assert _stream_requests(leader) > before, "later sends streamed to the leader"
    check_stored(leader.grpc_address, [("first", first)] + results)


def test_close_lets_the_broker_answer_sends_in_flight(node):
    """close() half-closes the stream and waits for the answers: a send never ends as an unknown outcome just
    because its producer was closed (queued ones fail as not sent)."""
    addr = node.grpc_address
    with Admin(addr) as admin:
        admin.create_topic("StreamClose", queues=2)
    p = Producer(addr)
    acked: list = []
    errors_seen: list[Exception] = []

    def work(t: int) -> None:
        for i in range(10_000):
            try:
                acked.append((f"c{t}-{i}", p.send("StreamClose", f"c{t}-{i}")))
            except RaftmqError as e:
                errors_seen.append(e)
                return

    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    wait_for(lambda: len(acked) >= 100, "100 acknowledged sends")
    p.close()
    for t in ts:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in ts)
    assert len(errors_seen) == 8
    assert not [e for e in errors_seen if isinstance(e, UnknownOutcomeError)], errors_seen
    check_stored(addr, acked[-20:])


def test_the_broker_accepts_a_stream_with_headers_before_any_request(node):
    """The SDK waits for them before its first write (client/accumulator.py ``_accepted``): with a write in
    progress, a refusal would end the call INTERNAL and hide its own status."""
    async def headers() -> tuple:
        async with grpc.aio.insecure_channel(node.grpc_address) as channel:
            call = channel.stream_stream(STREAM_METHOD)()
            metadata = await asyncio.wait_for(call.initial_metadata(), 30)
            call.cancel()
            return tuple(metadata)

    assert (ACCEPTED_METADATA_KEY, "1") in asyncio.run(headers())
