"""PullStream: keep a consumer's queues flowing on one server-streaming call (issue 17, streaming consume).

Why: a consumer at the head of its queues otherwise sends one PullMessage per batch and per queue, each a full
RPC; here the node reads every queue of the stream in turn through the one read path (node/read_path.py), sends
what it finds, and when all of them are caught up parks on the long-poll registry for all of them at once
(futures, no thread), waking when the reput dispatches to any of them. Each response is exactly what
PullMessage would answer at that queue's offset, so status handling is the same; gRPC flow control bounds what is
sent ahead of a slow reader.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from raftmq.node import convert
from raftmq.node.errors import invalid
from raftmq.node.read_path import ReadPath
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

IDLE_WAIT_S = 30.0  # a caught-up stream re-reads its queues at least this often (a missed wake-up costs no more)


async def serve(node: BrokerCore, reads: ReadPath, request: pb.PullStreamRequest,
                context) -> AsyncIterator[pb.PullStreamResponse]:
    sub = reads.subscribe(request.topic, request.consumer_group, tag_expression=request.tag_expression,
                          sql_expression=request.sql_expression, max_count=request.max_count,
                          max_bytes=request.max_bytes, from_leader=request.from_leader)
    if not request.offsets:
        raise invalid("offsets is empty; give {queue_id: next offset} for every queue this stream should read")
    for qid, off in request.offsets.items():
        reads.check_queue(sub, qid, off)
    offsets = dict(sorted(request.offsets.items()))
    while node.serving:
        sent = False
        for qid, offset in offsets.items():
            got = await reads.read(sub, qid, offset)
            response = convert.pull_response(got, offset)
            if response is None or (not response.messages and response.next_offset == offset):
                continue  # nothing new here (yet)
            offsets[qid] = response.next_offset
            if response.status == pb.NO_MATCHED_MSG:
                continue  # skipped past messages the filter drops: nothing to tell
            reads.record(sub, got.messages)
            yield pb.PullStreamResponse(queue_id=qid, pull=response)
            sent = True
        if sent:
            continue
        wait = IDLE_WAIT_S
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, remaining - 0.1)
            if wait <= 0:
                return  # the caller's deadline is near: end the stream cleanly (OK) rather than be cut off
        await reads.wait_any(sub.topic, offsets, wait)
