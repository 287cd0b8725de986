"""The registry of connected RocketMQ 5 clients (node.rocketmq5.telemetry): streams, settings, goodbyes."""

from __future__ import annotations

import asyncio
import time

from raftmq.node.rocketmq5.telemetry import FORGET_AFTER_S, ClientRegistry, settings_reply
from raftmq.rocketmq.v2 import definition_pb2 as v2


def _producer(*topics: str) -> v2.Settings:
    return v2.Settings(client_type=v2.PRODUCER, publishing=v2.Publishing(topics=[v2.Resource(name=t) for t in topics]))


def test_producer_streams_by_topic_and_forgetting_silent_clients():
    async def scenario():
        reg = ClientRegistry()
        a = reg.open_stream("a", "ipv4:1.2.3.4:5")
        reg.apply_settings(a, _producer("t1", "t2"))
        b = reg.open_stream("b", "ipv4:1.2.3.4:6")
        reg.apply_settings(b, _producer("t2"))
        assert reg.producer_streams("t2") == [a, b] and reg.producer_streams("t1") == [a]
        assert reg.published_topics() == {"t1", "t2"}
        reg.heartbeat("c", v2.SIMPLE_CONSUMER, "g")
        reg.close_stream(b)
        assert reg.producer_streams("t2") == [a]
        # b and c have no stream: forgotten once silent long enough; a keeps its stream
        assert reg.prune(time.time() + FORGET_AFTER_S + 1) == 2
        assert [i.client_id for i in reg.clients()] == ["a"]
        assert reg.terminate("a") is not None and reg.clients() == []

    asyncio.run(scenario())


def test_a_full_outbox_drops_its_oldest_command():
    async def scenario():
        reg = ClientRegistry()
        s = reg.open_stream("a", "p")
        for i in range(s.outbox.maxsize + 5):
            s.push(settings_reply(_producer(f"t{i}"), max_body_size=1))
        first = s.outbox.get_nowait()
        assert first.settings.publishing.topics[0].name == "t5"

    asyncio.run(scenario())


def test_settings_reply_never_leaves_the_body_limit_or_status_unset():
    reply = settings_reply(_producer("t"), max_body_size=4 << 20)
    assert reply.status.code == v2.OK and reply.settings.publishing.max_body_size == 4 << 20
    assert reply.settings.publishing.validate_message_type and not reply.settings.metric.on
    assert reply.settings.backoff_policy.max_attempts == 3
