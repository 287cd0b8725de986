"""PullStream: keep a consumer's queues flowing on one server-streaming call (issue 17, streaming consume).

Why: a consumer at the head of its queues otherwise sends one PullMessage per batch and per queue, each a full
RPC; here the node reads every queue of the stream in turn, sends what it finds, and when all of them are
caught up parks on the long-poll registry for all of them at once (futures, no thread), waking when the reput
dispatches to any of them. Each response is exactly what PullMessage would answer at that queue's offset, so
status handling is the same; gRPC flow control bounds what is sent ahead of a slow reader.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from raftmq.node import convert
from raftmq.node.errors import invalid
from raftmq.node.validation import check_consumable_topic, check_group_name, check_topic_name
from raftmq.store.sql_filter import SqlFilter
from raftmq.store.tag_filter import TagFilter
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

IDLE_WAIT_S = 30.0  # a caught-up stream re-reads its queues at least this often (a missed wake-up costs no more)


async def serve(node: BrokerCore, request: pb.PullStreamRequest, context) -> AsyncIterator[pb.PullStreamResponse]:
    from raftmq.node.messaging import DEFAULT_MAX_BYTES, DEFAULT_MAX_COUNT, MAX_PULL_BYTES, MAX_PULL_COUNT

    topic = request.topic
    check_topic_name(topic, allow_system=True)
    check_consumable_topic(topic)
    cfg = node.readable_topic(topic)
    if not request.offsets:
        raise invalid("offsets is empty; give {queue_id: next offset} for every queue this stream should read")
    for qid, off in request.offsets.items():
        node.check_read_queue(cfg, qid)
        if off < 0:
            raise invalid(f"offset {off} for queue {qid} is negative; queue offsets start at 0")
    if request.max_count < 0 or request.max_bytes < 0:
        raise invalid("max_count and max_bytes must be >= 0 (0 means the default: 32 messages, 4 MiB)")
    if request.consumer_group:
        check_group_name(request.consumer_group)
    tag_filter = TagFilter.parse(request.tag_expression)
    sql_filter = SqlFilter.parse(request.sql_expression) if request.sql_expression else None
    if request.from_leader:
        node.check_leader()
    max_count = min(request.max_count or DEFAULT_MAX_COUNT, MAX_PULL_COUNT)
    max_bytes = min(request.max_bytes or DEFAULT_MAX_BYTES, MAX_PULL_BYTES)
    offsets = dict(sorted(request.offsets.items()))
    store = node.store
    while node.serving:
        sent = False
        for qid, offset in offsets.items():
            t0 = time.perf_counter()
            got = await node.run_blocking(store.get_messages, topic, qid, offset, max_count, max_bytes, tag_filter,
                                          sql_filter)
            node.metrics.get_latency.observe(time.perf_counter() - t0)
            response = convert.pull_response(got, offset)
            if response is None or (not response.messages and response.next_offset == offset):
                continue  # nothing new here (yet)
            offsets[qid] = response.next_offset
            if response.status == pb.NO_MATCHED_MSG:
                continue  # skipped past messages the filter drops: nothing to tell
            if response.messages:
                node.metrics.record_pull(topic, request.consumer_group, len(response.messages),
                                         sum(len(m.body) for m in response.messages))
            yield pb.PullStreamResponse(queue_id=qid, pull=response)
            sent = True
        if not sent and not await _wait_any(node, topic, offsets, context):
            return  # the caller's deadline is near: end the stream cleanly (OK) rather than be cut off


async def _wait_any(node: BrokerCore, topic: str, offsets: dict[int, int], context) -> bool:
    """Park until any queue of the stream gets a message past its offset, the caller's deadline nears, or
    IDLE_WAIT_S passes; False when the deadline is too near to wait at all."""
    wait = IDLE_WAIT_S
    remaining = context.time_remaining()
    if remaining is not None:
        wait = min(wait, remaining - 0.1)
        if wait <= 0:
            return False
    store = node.store
    waits = [asyncio.ensure_future(node.long_polls.wait(
        topic, qid, wait, lambda q=qid, o=off: store.max_offset_in_queue(topic, q) > o))
        for qid, off in offsets.items()]
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if any(not t.cancelled() and t.exception() is None and t.result() for t in done):
            node.metrics.long_poll_wakeups.inc()
    finally:
        for t in waits:
            t.cancel()
    return True
