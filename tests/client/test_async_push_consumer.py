"""AsyncPushConsumer against a real node process: async listeners run on the caller's event loop, several at once;
SUCCESS acks, FAILURE and exceptions come back with the next delivery attempt and end in the DLQ; a slow listener's
message is renewed instead of redelivered; shutdown finishes running listeners, and one that outlives the timeout is
cancelled and its message given back at once; bad arguments and receive failures say what is wrong."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from raftmq.client import (
    Admin,
    AsyncPushConsumer,
    ConsumeResult,
    InvalidArgumentError,
    Producer,
    RaftmqError,
    SimpleConsumer,
)
from raftmq.client.simple_consumer import KEPT_ERRORS, PushConsumer
from tests.client.test_sdk_async import LoopTicks
from tests.node.test_pop import dead_letters
from tests.support.processes import running_nodes

FAST = {"max_delivery_attempts": 3, "retry_backoff": "1s"}
GROUPS = ("apush-retry", "apush-dlq", "apush-renew", "apush-stop", "apush-cancel")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("async-push"), 1,
                       node={"group_policies": {g: FAST for g in GROUPS}}) as [n0]:
        yield n0


def make_topic(node, name: str, queues: int = 2) -> str:
    with Admin(node.grpc_address) as admin:
        admin.create_topic(name, queues=queues)
    return name


async def eventually(predicate, what: str, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def nothing_left(node, group: str, topic: str) -> bool:
    """A receive that waits past every back-off gets nothing: no message is still in flight for the group."""
    with SimpleConsumer(group, topic, node.grpc_address, await_duration=3) as c:
        return c.receive(32, 5) == []


def test_listeners_run_on_the_loop_together_and_failures_come_back_with_the_next_attempt(node):
    topic = make_topic(node, "APushRetry")
    with Producer(node.grpc_address) as p:
        for i in range(6):
            p.send(topic, f"r{i}", properties={"fail": str(i % 3)})  # fails 0, 1 or 2 times, then succeeds
    deliveries: dict[str, list[int]] = {}
    now_running = [0, 0]  # listeners running now, most at once

    async def listener(m):
        deliveries.setdefault(m.text, []).append(m.delivery_attempt)
        now_running[0] += 1
        now_running[1] = max(now_running[1], now_running[0])
        try:
            await asyncio.sleep(0.3)  # awaits on the loop, as a handler awaiting its database would
        finally:
            now_running[0] -= 1
        if m.text == "r1" and m.delivery_attempt == 1:
            raise RuntimeError("an exception is a FAILURE")
        fails = int(m.message.properties["fail"])
        return ConsumeResult.FAILURE if m.delivery_attempt <= fails else ConsumeResult.SUCCESS

    async def main() -> AsyncPushConsumer:
        ticks = LoopTicks()
        async with AsyncPushConsumer("apush-retry", topic, listener, node.grpc_address, concurrency=4,
                                     invisible_duration=20) as push:
            await eventually(lambda: all(len(deliveries.get(f"r{i}", ())) == i % 3 + 1 for i in range(6)),
                             "every message consumed after its failures")
            await eventually(lambda: now_running[0] == 0, "the last listener finished")
        ticks.stop()
        assert ticks.count >= 10, "the loop kept turning while listeners and long polls ran"
        return push

    push = asyncio.run(main())
    assert not push.errors
    assert deliveries == {f"r{i}": list(range(1, i % 3 + 2)) for i in range(6)}
    assert now_running[1] > 1, "listeners ran concurrently on the loop"
    assert nothing_left(node, "apush-retry", topic), "every message was acked"


def test_a_message_failing_every_time_ends_in_the_dead_letter_queue(node):
    topic = make_topic(node, "APushDlq")
    with Producer(node.grpc_address) as p:
        sent = p.send(topic, "poison")
    attempts: list[int] = []

    async def listener(m):
        attempts.append(m.delivery_attempt)
        raise ValueError("cannot handle this one")

    async def main() -> None:
        async with AsyncPushConsumer("apush-dlq", topic, listener, node.grpc_address, invisible_duration=20):
            await eventually(lambda: len(attempts) >= 3, "three deliveries")
            await asyncio.to_thread(dead_letters, node, "apush-dlq", 1)

    asyncio.run(main())
    assert attempts == [1, 2, 3]
    [dead] = dead_letters(node, "apush-dlq", 1)
    assert dead.uniq_key == sent.uniq_key and dead.properties["DLQ_DELIVERY_ATTEMPTS"] == "3"


def test_a_slow_listener_is_renewed_not_raced_by_a_redelivery(node):
    topic = make_topic(node, "APushRenew", queues=1)
    with Producer(node.grpc_address) as p:
        p.send(topic, "slow")
    deliveries: list[int] = []

    async def listener(m):
        deliveries.append(m.delivery_attempt)
        if len(deliveries) == 1:  # outlive the first deadline by a good margin
            await eventually(lambda: time.time() * 1000 > m.invisible_until + 2000, "past the first deadline")
        return ConsumeResult.SUCCESS

    async def main() -> AsyncPushConsumer:
        async with AsyncPushConsumer("apush-renew", topic, listener, node.grpc_address,
                                     invisible_duration=6) as push:
            await eventually(lambda: push.errors or (deliveries and not push._running), "the slow message finished")
        return push

    push = asyncio.run(main())
    assert not push.errors, "the ack used the renewed handle"
    assert deliveries == [1], "no redelivery while the listener ran"
    assert nothing_left(node, "apush-renew", topic)


def test_shutdown_lets_a_running_listener_finish_and_acks_it(node):
    topic = make_topic(node, "APushStop", queues=1)
    with Producer(node.grpc_address) as p:
        p.send(topic, "in progress")
    started, done = asyncio.Event(), []

    async def listener(m):
        started.set()
        await asyncio.sleep(1.0)
        done.append(m.text)
        return ConsumeResult.SUCCESS

    async def main() -> AsyncPushConsumer:
        push = await AsyncPushConsumer("apush-stop", topic, listener, node.grpc_address, concurrency=1,
                                       invisible_duration=60).start()
        await asyncio.wait_for(started.wait(), 60)
        await push.shutdown()
        with pytest.raises(RaftmqError, match="shut down"):
            await push.start()
        return push

    push = asyncio.run(main())
    assert done == ["in progress"] and not push.errors
    assert nothing_left(node, "apush-stop", topic), "acked at shutdown, not left to its invisible time"


def test_a_listener_outliving_the_shutdown_timeout_is_cancelled_and_its_message_given_back(node):
    """The message comes back after the group's 1 s back-off with attempt 2, not after its 60 s invisible time."""
    topic = make_topic(node, "APushCancel", queues=1)
    with Producer(node.grpc_address) as p:
        key = p.send(topic, "never finishes").uniq_key
    started, cancelled = asyncio.Event(), []

    async def listener(m):
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(m.text)
            raise
        return ConsumeResult.SUCCESS

    async def main() -> None:
        push = await AsyncPushConsumer("apush-cancel", topic, listener, node.grpc_address,
                                       invisible_duration=60).start()
        await asyncio.wait_for(started.wait(), 60)
        await push.shutdown(timeout=0.5)
        assert not push.errors

    asyncio.run(main())
    assert cancelled == ["never finishes"]
    with SimpleConsumer("apush-cancel", topic, node.grpc_address, await_duration=5) as c:
        got = []
        for _ in range(6):  # 30 s at most: well inside the 60 s invisible time a lost nack would leave
            got = c.receive(1, 30)
            if got:
                break
        assert [(m.message.uniq_key, m.delivery_attempt) for m in got] == [(key, 2)]
        c.ack(got)


def test_bad_arguments_are_refused_and_receive_failures_are_reported(node, caplog):
    async def ok(m):
        return ConsumeResult.SUCCESS

    class Handler:
        async def __call__(self, m):
            return ConsumeResult.SUCCESS

    with pytest.raises(InvalidArgumentError, match="listener must be an async function .* use PushConsumer"):
        AsyncPushConsumer("g", "t", lambda m: ConsumeResult.SUCCESS, node.grpc_address)
    for kwargs, text in (({"concurrency": 0}, "concurrency must be at least 1"),
                         ({"batch_size": 0}, "batch_size must be at least 1"),
                         ({"invisible_duration": 0}, "invisible_duration must be positive"),
                         ({"await_duration": -1}, "await_duration must be >= 0")):
        with pytest.raises(InvalidArgumentError, match=text):
            AsyncPushConsumer("g", "t", ok, node.grpc_address, **kwargs)
    with pytest.raises(InvalidArgumentError, match="group and topic must not be empty"):
        AsyncPushConsumer("", "t", ok, node.grpc_address)
    AsyncPushConsumer("g", "t", Handler(), node.grpc_address)  # an object with an async __call__ is a listener

    async def main() -> AsyncPushConsumer:
        async with AsyncPushConsumer("apush-missing", "APushNoSuchTopic", ok, node.grpc_address,
                                     await_duration=0.5) as push:
            await eventually(lambda: push.errors, "a receive failure")
        return push

    with caplog.at_level(logging.WARNING, logger="raftmq.client.async_push_consumer"):
        push = asyncio.run(main())
    assert "APushNoSuchTopic" in str(push.errors[0])
    assert any("receive failed for group apush-missing on topic APushNoSuchTopic" in r.getMessage()
               for r in caplog.records)


def test_push_consumers_keep_only_the_last_errors():
    """A long outage must not grow a consumer's memory: ``errors`` keeps the last KEPT_ERRORS."""
    async def ok(m):
        return ConsumeResult.SUCCESS

    consumers = [AsyncPushConsumer("g", "t", ok, "127.0.0.1:1"),
                 PushConsumer("g", "t", lambda m: ConsumeResult.SUCCESS, "127.0.0.1:1")]
    for c in consumers:
        for i in range(KEPT_ERRORS + 50):
            c._note("receive", RaftmqError(f"failure {i}"))
        assert len(c.errors) == KEPT_ERRORS and str(c.errors[-1]).endswith(f"failure {KEPT_ERRORS + 49}")
