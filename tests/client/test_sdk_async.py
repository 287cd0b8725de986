"""AsyncProducer against real node processes: sends from many tasks share one SendStream on the caller's own
event loop, outcomes and errors are Producer's, a follower's refusal is re-sent the unary way (in a worker
thread), and a node killed mid-stream loses no acknowledged send and hangs no task. AsyncSimpleConsumer: pop
consumption from coroutines without blocking the loop, and a cancelled receive loses nothing."""

from __future__ import annotations

import asyncio
import time

import pytest

from raftmq.client import (
    Admin,
    AsyncProducer,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    RaftmqError,
    TopicNotFoundError,
    UnknownOutcomeError,
)
from tests.client.test_sdk_stream import _stream_requests, check_stored, leader_and_follower
from tests.support.processes import running_nodes


@pytest.fixture(scope="module")
def node(shared_node):
    return shared_node


class LoopTicks:
    """Counts turns of the running event loop (a task sleeping 10 ms at a time): a blocked loop counts none."""

    def __init__(self) -> None:
        self.count = 0
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.count += 1

    def stop(self) -> None:
        self._task.cancel()


async def _send_from_tasks(producer: AsyncProducer, topic: str, tasks: int, per_task: int) -> list:
    async def work(t: int) -> list:
        return [(f"a{t}-{i}", await producer.send(topic, f"a{t}-{i}", keys=[f"a{t}-{i}"])) for i in range(per_task)]

    return [r for rs in await asyncio.gather(*(work(t) for t in range(tasks))) for r in rs]


def dispatched(node, topic: str, done, timeout: float = 30.0) -> int:
    """Messages in ``topic``'s queues once ``done(count)`` holds (or the count at the deadline): an acknowledged
    send is in the commit log, and reaches the queues a moment later (dispatch), later still on a loaded box."""
    deadline = time.monotonic() + timeout
    with Admin(node.grpc_address) as admin:
        while True:
            n = sum(q.max_offset for q in admin.queue_offsets(topic))
            if done(n) or time.monotonic() > deadline:
                return n
            time.sleep(0.05)


def test_sends_from_many_tasks_share_the_stream_and_are_stored(node):
    addr = node.grpc_address
    with Admin(addr) as admin:
        admin.create_topic("AsyncMany", queues=4)
    before = _stream_requests(node)

    async def main() -> tuple[list, list]:
        async with AsyncProducer(addr) as p:
            singles = await _send_from_tasks(p, "AsyncMany", tasks=8, per_task=40)
            batch = await p.send_batch("AsyncMany", [b"b0", b"b1", b"b2"], queue_id=3)
            assert await p.send_batch("AsyncMany", []) == []
            return singles, batch

    results, batch = asyncio.run(main())
    assert len(results) == 320 and len({r.msg_id for _, r in results}) == 320
    assert len({r.uniq_key for _, r in results}) == 320
    assert [r.queue_id for r in batch] == [3, 3, 3]
    assert [r.queue_offset for r in batch] == [batch[0].queue_offset + i for i in range(3)]
    requests = _stream_requests(node) - before
    assert 0 < requests < 322, "sends went through SendStream, several per request"
    with Admin(addr) as admin:
        for body, r in results[::16] + [(f"b{i}", r) for i, r in enumerate(batch)]:
            m = admin.view_message(r.msg_id)
            assert m.body == body.encode() and m.uniq_key == r.uniq_key and m.queue_offset == r.queue_offset
    assert dispatched(node, "AsyncMany", lambda n: n >= 323) == 323


@pytest.mark.parametrize("linger_ms", [0.1, 0])
def test_errors_are_producers(node, linger_ms):
    """The same typed errors as Producer (tests/client/test_sdk_stream.py), streamed or unary (linger_ms=0)."""
    addr = node.grpc_address
    topic, read_only = f"AsyncErr{linger_ms}".replace(".", ""), f"AsyncRo{linger_ms}".replace(".", "")
    with Admin(addr) as admin:
        admin.create_topic(topic, queues=2)
        admin.create_topic(read_only, queues=2, perm=4)

    async def main() -> None:
        async with AsyncProducer(addr, linger_ms=linger_ms) as p:
            with pytest.raises(InvalidArgumentError, match="tag"):
                await p.send(topic, b"x", tags="a||b")
            with pytest.raises(TopicNotFoundError):
                await p.send("NoSuchTopicAsync", b"x")
            with pytest.raises(PermissionDeniedError):
                await p.send(read_only, b"x")
            with pytest.raises(NotFoundError, match="queue 7 does not exist"):
                await p.send_batch(topic, [b"a", b"b"], queue_id=7)
            with pytest.raises(InvalidArgumentError, match="delay_level"):
                await p.send(topic, b"x", delay_level=-1)
            with pytest.raises(TypeError, match="body must be bytes or str"):
                await p.send(topic, 5)
            assert (await p.send(topic, b"fine", queue_id=1)).queue_id == 1
            assert [r.queue_offset for r in await p.send_batch(topic, [b"a", b"b", b"c"], queue_id=0)] == [0, 1, 2]
        with pytest.raises(RaftmqError, match="producer is closed"):
            await p.send(topic, b"late")

    asyncio.run(main())


def test_bad_arguments_and_a_second_event_loop_are_refused(node):
    with pytest.raises(ValueError, match="linger_ms"):
        AsyncProducer("127.0.0.1:1", linger_ms=-1)
    with pytest.raises(ValueError, match="stream_window"):
        AsyncProducer("127.0.0.1:1", stream_window=0)
    with pytest.raises(ValueError, match=r"timeout must be a number of seconds > 0"):
        AsyncProducer("127.0.0.1:1", timeout=0)
    with Admin(node.grpc_address) as admin:
        admin.create_topic("AsyncLoops", queues=1)
    p = AsyncProducer(node.grpc_address)
    first_loop = asyncio.new_event_loop()
    try:
        assert first_loop.run_until_complete(p.send("AsyncLoops", b"first loop")).queue_offset == 0
        with pytest.raises(RaftmqError, match="one AsyncProducer per event loop"):
            asyncio.run(p.send("AsyncLoops", b"second loop"))
        with pytest.raises(RaftmqError, match="aclose.. it there"):
            asyncio.run(p.aclose())
        first_loop.run_until_complete(p.aclose())
    finally:
        first_loop.close()
    gone = AsyncProducer(node.grpc_address)
    asyncio.run(gone.send("AsyncLoops", b"loop since closed"))
    asyncio.run(gone.aclose())  # its loop is gone: closing it elsewhere is fine
    with pytest.raises(RaftmqError, match="producer is closed"):
        asyncio.run(gone.send("AsyncLoops", b"after close"))
    assert dispatched(node, "AsyncLoops", lambda n: n == 2) == 2


def test_a_cancelled_send_leaves_the_producer_working(node):
    with Admin(node.grpc_address) as admin:
        admin.create_topic("AsyncCancel", queues=2)

    async def main() -> list:
        async with AsyncProducer(node.grpc_address) as p:
            tasks = [asyncio.create_task(p.send("AsyncCancel", f"c{i}")) for i in range(20)]
            await asyncio.sleep(0)  # every task is waiting for its outcome now
            tasks[5].cancel()
            done = await asyncio.gather(*tasks, return_exceptions=True)
            assert isinstance(done[5], asyncio.CancelledError)
            after = await _send_from_tasks(p, "AsyncCancel", tasks=4, per_task=5)
            return [r for r in done if not isinstance(r, BaseException)] + [r for _, r in after]

    results = asyncio.run(main())
    assert len(results) == 39
    stored = dispatched(node, "AsyncCancel", lambda n: n in (39, 40))
    assert stored in (39, 40), "the cancelled send was stored at most once, and every other one was"


def test_an_unanswered_send_times_out_as_unknown_without_blocking_the_loop(tmp_path):
    """A stopped (SIGSTOP) node answers nothing: the send ends as an unknown outcome after ``timeout`` with its
    UNIQ_KEY, while the loop's other tasks keep running."""
    with running_nodes(tmp_path, 1) as [n0]:
        with Admin(n0.grpc_address) as admin:
            admin.create_topic("AsyncStopped", queues=1)

        async def main() -> tuple[BaseException, int]:
            async with AsyncProducer(n0.grpc_address, timeout=2, retry_timeout=0) as p:
                await p.send("AsyncStopped", b"before")
                n0.freeze()
                ticks = LoopTicks()
                try:
                    await p.send("AsyncStopped", b"unanswered")
                except RaftmqError as e:
                    error, seen = e, ticks.count
                else:
                    raise AssertionError("a stopped node acknowledged a send")
                finally:
                    ticks.stop()
                    n0.thaw()
            return error, seen

        error, ticks = asyncio.run(main())
        assert isinstance(error, UnknownOutcomeError) and len(error.uniq_keys) == 1, error
        assert ticks > 0, "the event loop was blocked while the send waited"


def test_stream_opened_at_a_follower_moves_to_the_leader(shared_cluster):
    """The first stream goes to a follower: its send comes back 'not the leader' and is re-sent the unary way
    (in a worker thread, following the redirect); later sends stream to the leader."""
    leader, follower = leader_and_follower(shared_cluster, "AsyncMove")
    before, before_follower = _stream_requests(leader), _stream_requests(follower)

    async def main() -> tuple:
        async with AsyncProducer([follower.grpc_address]) as p:
            first = await p.send("AsyncMove", b"first")
            assert p.leader == leader.grpc_address
            return first, await _send_from_tasks(p, "AsyncMove", tasks=4, per_task=10)

    first, results = asyncio.run(main())
    assert _stream_requests(follower) > before_follower, "the first stream went to the follower"
    assert _stream_requests(leader) > before, "later sends streamed to the leader"
    check_stored(leader.grpc_address, [("first", first)] + results)


def test_node_killed_mid_stream_acknowledged_sends_survive(tmp_path):
    """SIGKILL while 6 tasks stream sends: each send is acknowledged or fails (unknown outcome when it was in
    flight), no task hangs, and after the restart every acknowledged message is there, byte for byte."""
    with running_nodes(tmp_path, 1) as [n0]:
        addr = n0.grpc_address
        with Admin(addr) as admin:
            admin.create_topic("AsyncKill", queues=4)
        acked: list = []

        async def main() -> list:
            async with AsyncProducer(addr, timeout=5, retry_timeout=1) as p:
                async def work(t: int) -> BaseException:
                    i = 0
                    while True:
                        body = f"k{t}-{i}"
                        try:
                            acked.append((body, await p.send("AsyncKill", body)))
                        except RaftmqError as e:
                            return e
                        i += 1

                tasks = [asyncio.create_task(work(t)) for t in range(6)]
                while len(acked) < 200:
                    await asyncio.sleep(0.01)
                n0.kill()
                return await asyncio.wait_for(asyncio.gather(*tasks), 60)

        failed = asyncio.run(main())
        assert len(failed) == 6
        for e in failed:
            assert isinstance(e, RaftmqError) and e.address == addr, e
            if isinstance(e, UnknownOutcomeError):
                assert e.uniq_keys
        n0.start().wait_ready()
        check_stored(addr, acked)


def test_aclose_lets_the_broker_answer_sends_in_flight(node):
    """aclose() half-closes the stream and waits for its answers: no send ends unknown because its producer
    closed (queued ones fail as not sent), and the caller's other tasks are not cancelled."""
    with Admin(node.grpc_address) as admin:
        admin.create_topic("AsyncClose", queues=2)
    acked: list = []

    async def main() -> tuple[list, str]:
        p = AsyncProducer(node.grpc_address)

        async def work(t: int) -> BaseException:
            i = 0
            while True:
                try:
                    acked.append((f"c{t}-{i}", await p.send("AsyncClose", f"c{t}-{i}")))
                except RaftmqError as e:
                    return e
                i += 1

        async def bystander() -> str:
            await asyncio.sleep(3600)
            return "never"

        other = asyncio.create_task(bystander())
        tasks = [asyncio.create_task(work(t)) for t in range(8)]
        while len(acked) < 100:
            await asyncio.sleep(0.01)
        await p.aclose()
        seen = await asyncio.wait_for(asyncio.gather(*tasks), 60)
        alive = "running" if not other.done() else "cancelled"
        other.cancel()
        return seen, alive

    seen, alive = asyncio.run(main())
    assert alive == "running", "aclose cancelled a task that was not the producer's"
    assert len(seen) == 8 and not [e for e in seen if isinstance(e, UnknownOutcomeError)], seen
    check_stored(node.grpc_address, acked[-20:])


# ---------------------------------------------------------------------------------------------- AsyncSimpleConsumer
def test_async_simple_consumer_receives_acks_and_nacks_without_blocking_the_loop(node):
    """Every call of AsyncSimpleConsumer is SimpleConsumer's in a worker thread of its own: while a receive
    waits at the server, the loop's other tasks run; acked messages do not come back, a nacked one does."""
    from raftmq.client import AsyncSimpleConsumer, Producer

    addr = node.grpc_address
    with Admin(addr) as admin:
        admin.create_topic("AsyncPop", queues=2)

    async def main() -> None:
        ticks = LoopTicks()
        async with AsyncSimpleConsumer("async-billing", "AsyncPop", addr, await_duration=1.0) as c:
            assert await c.receive() == []  # nothing stored: waited out its long poll at the server
            assert ticks.count >= 2, f"the loop ran {ticks.count} ticks during a 1 s long poll"  # blocked: 0
            with Producer(addr) as p:
                sent = {p.send("AsyncPop", f"m{i}").uniq_key for i in range(6)}
            got: dict[str, object] = {}
            while len(got) < 6:
                for m in await c.receive(max_messages=4, invisible_duration=30):
                    got[m.message.uniq_key] = m
            assert set(got) == sent and all(m.delivery_attempt == 1 for m in got.values())
            nacked = got.pop(next(iter(got)))
            await c.ack(list(got.values()))
            await c.nack(nacked)  # visible again after the group's first back-off (1 s)
            again = []
            while not again:
                again = await c.receive(invisible_duration=30)
            assert [m.message.uniq_key for m in again] == [nacked.message.uniq_key]
            assert again[0].delivery_attempt == 2
            longer = await c.change_invisible_duration(again[0], 60)
            assert longer.receipt_handle != again[0].receipt_handle
            await c.ack(longer)
        ticks.stop()
        with pytest.raises(RaftmqError, match="closed"):
            await c.receive()

    asyncio.run(main())


def test_a_cancelled_async_receive_loses_nothing(node):
    """A task cancelled while its receive waits at the server: whatever the server hands to that receive comes
    back after its invisible time, to the next receive."""
    from raftmq.client import AsyncSimpleConsumer, Producer

    addr = node.grpc_address
    with Admin(addr) as admin:
        admin.create_topic("AsyncPopCancel", queues=1)

    async def main() -> None:
        async with AsyncSimpleConsumer("async-cancel", "AsyncPopCancel", addr, await_duration=5.0) as c:
            waiting = asyncio.ensure_future(c.receive(invisible_duration=1))
            await asyncio.sleep(0.2)
            waiting.cancel()
            with Producer(addr) as p:
                key = p.send("AsyncPopCancel", "only one").uniq_key
            got = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while not got and loop.time() < deadline:
                got = await c.receive(invisible_duration=30)
            assert [m.message.uniq_key for m in got] == [key]
            await c.ack(got)

    asyncio.run(main())


def test_async_simple_consumer_refuses_bad_arguments(node):
    from raftmq.client import AsyncSimpleConsumer

    with pytest.raises(InvalidArgumentError, match="concurrency must be at least 1"):
        AsyncSimpleConsumer("g", "t", node.grpc_address, concurrency=0)
    with pytest.raises(InvalidArgumentError, match="group and topic must not be empty"):
        AsyncSimpleConsumer("", "t", node.grpc_address)


# ---------------------------------------------------------------------------------------------- AsyncPullConsumer
def test_async_pull_consumer_reads_commits_and_loses_nothing_to_a_cancelled_poll(node):
    """``async for`` over a topic without blocking the loop; a poll cancelled while it waits at the server keeps
    what it took for the next call; commit stores the group's offsets; aclose leaves the group."""
    from raftmq.client import AsyncPullConsumer, Producer

    addr = node.grpc_address
    with Admin(addr) as admin:
        admin.create_topic("AsyncPull", queues=2)
    with Producer(addr) as p:
        first = [p.send("AsyncPull", f"m{i}", queue_id=i % 2).uniq_key for i in range(6)]

    async def main() -> list[str]:
        ticks = LoopTicks()
        seen: list[str] = []
        async with AsyncPullConsumer("async-pull", "AsyncPull", addr, start_from="first", auto_commit=False,
                                     long_poll=1.0) as c:
            async for m in c:
                seen.append(m.uniq_key)
                if len(seen) == 6:
                    break
            assert await c.poll(0.5) == []  # nothing more stored: waited at the server
            waiting = asyncio.ensure_future(c.poll(5.0))
            await asyncio.sleep(0.3)
            waiting.cancel()  # the poll goes on in the consumer's thread
            with Producer(addr) as p:
                late = p.send("AsyncPull", "late", queue_id=0).uniq_key
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            got: list = []
            while not got and loop.time() < deadline:
                got = await c.poll(1.0)
            assert [m.uniq_key for m in got] == [late], "the cancelled poll's message came with the next poll"
            await c.commit()
            assert c.positions() == {0: 4, 1: 3}
        ticks.stop()
        assert ticks.count >= 20, f"the loop ran {ticks.count} ticks during the polls"
        with pytest.raises(RaftmqError, match="closed"):
            await c.poll()
        return seen

    seen = asyncio.run(main())
    assert sorted(seen) == sorted(first)
    with Admin(addr) as admin:
        assert admin.committed_offsets("async-pull", "AsyncPull") == {0: 4, 1: 3}
