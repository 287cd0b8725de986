"""The gRPC side of pop consumption: ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardToDeadLetterQueue,
SendMessageBack, ResetGroupOffsets (MessagingService methods, mixed into node.messaging.MessagingService).

Validation and status mapping live here; decisions live in node.pop_core.PopCore (blocking, run off the event
loop). Only the leader decides: elsewhere the call fails with FAILED_PRECONDITION and the leader hint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from raftmq.node import convert
from raftmq.node.errors import RpcError, invalid
from raftmq.node.pop_core import (
    DEFAULT_INVISIBLE_MS,
    MAX_INVISIBLE_MS,
    MAX_RECEIVE,
    MIN_INVISIBLE_MS,
    RETRY_PREFIX,
    BadReceiptHandleError,
    PopCore,
    PopError,
    StaleReceiptHandleError,
)
from raftmq.node.rpc import rpc_handler
from raftmq.node.validation import check_consumable_topic, check_group_name, check_topic_name
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore
    from raftmq.node.receive_path import ReceivePath

MAX_ACK_HANDLES = 1024


def pop_error(exc: PopError) -> RpcError:
    if isinstance(exc, BadReceiptHandleError):
        return invalid(str(exc))
    if isinstance(exc, StaleReceiptHandleError):
        return RpcError(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    return RpcError(grpc.StatusCode.NOT_FOUND, str(exc))


class PopRpcs:
    """Mixin for MessagingService; ``self.node`` is the BrokerCore, whose ``pop`` is the PopCore; receives take
    the node's one receive path (``receives``), which the other calls tell of their changes."""

    node: BrokerCore
    receives: ReceivePath

    def _pop(self, group: str, topic: str, broker: str = "") -> PopCore:
        self.node.check_group(broker)  # issue 37: another group's pop state is decided there (relayed)
        check_group_name(group)
        check_topic_name(topic, allow_system=True)
        check_consumable_topic(topic)
        self.node.check_leader()  # pop state is decided by the leader (replicated to the others)
        self.node.readable_topic(topic)
        return self.node.pop

    async def _run(self, fn, group: str, topic: str, *args, **kwargs):
        """A PopCore decision on the group's state of ``topic``, refused with raftmq's codes."""
        return await self.receives.decide(fn, group, topic, *args, refused=pop_error, **kwargs)

    @rpc_handler("ReceiveMessage")
    async def ReceiveMessage(self, request: pb.ReceiveMessageRequest, context) -> pb.ReceiveMessageResponse:  # noqa: N802
        self.node.check_group(request.broker)
        sub = self.receives.subscribe(request.group, request.topic, tag_expression=request.tag_expression,
                                      sql_expression=request.sql_expression)
        pop = self.node.pop
        if request.max_messages < 0 or request.max_messages > MAX_RECEIVE:
            raise invalid(f"max_messages {request.max_messages} must be 0 (= 32) .. {MAX_RECEIVE}")
        invisible = request.invisible_duration_ms or DEFAULT_INVISIBLE_MS
        if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
            raise invalid(f"invisible_duration_ms {invisible} must be {MIN_INVISIBLE_MS}..{MAX_INVISIBLE_MS} "
                          "(0 = 30 s)")
        if request.long_poll_timeout_ms < 0:
            raise invalid(f"long_poll_timeout_ms {request.long_poll_timeout_ms} is negative; use 0 for no wait")
        wait = request.long_poll_timeout_ms / 1000.0
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - 0.2))
        try:
            got = await self.receives.receive(sub, max_messages=request.max_messages or 32, invisible_ms=invisible,
                                              fifo=request.fifo or pop.policy(request.group).fifo, wait_s=wait)
        except PopError as e:
            raise pop_error(e) from None
        out = []
        for d in got:
            view = convert.message_view(d.message)
            view.topic = d.topic
            out.append(pb.ReceivedMessage(message=view, receipt_handle=d.receipt_handle,
                                          delivery_attempt=d.delivery_attempt, invisible_until=d.invisible_until_ms,
                                          message_group=d.message_group, broker=self.node.groups.answer_name))
        return pb.ReceiveMessageResponse(messages=out)

    @rpc_handler("AckMessage")
    async def AckMessage(self, request: pb.AckMessageRequest, context) -> pb.AckMessageResponse:  # noqa: N802
        pop = self._pop(request.group, request.topic, request.broker)
        handles = list(request.receipt_handles)
        if not handles:
            raise invalid("receipt_handles is empty; pass the handles of the received messages to ack")
        if len(handles) > MAX_ACK_HANDLES:
            raise invalid(f"{len(handles)} handles in one ack; at most {MAX_ACK_HANDLES}")
        errors = await self._run(pop.ack, request.group, request.topic, handles)
        return pb.AckMessageResponse(results=[pb.AckEntryResult(receipt_handle=h, ok=e is None, error=e or "")
                                              for h, e in zip(handles, errors, strict=True)])

    @rpc_handler("ChangeInvisibleDuration")
    async def ChangeInvisibleDuration(self, request: pb.ChangeInvisibleDurationRequest, context):  # noqa: N802
        pop = self._pop(request.group, request.topic, request.broker)
        ms = request.invisible_duration_ms
        if not 0 <= ms <= MAX_INVISIBLE_MS:
            raise invalid(f"invisible_duration_ms {ms} must be 0 (nack) .. {MAX_INVISIBLE_MS}")
        if not request.receipt_handle:
            raise invalid("receipt_handle is empty; pass the handle of the received message")
        handle, until = await self._run(pop.change_invisible, request.group, request.topic, request.receipt_handle,
                                        ms)
        return pb.ChangeInvisibleDurationResponse(receipt_handle=handle, invisible_until=until)

    @rpc_handler("ForwardToDeadLetterQueue")
    async def ForwardToDeadLetterQueue(self, request: pb.ForwardToDeadLetterQueueRequest, context):  # noqa: N802
        pop = self._pop(request.group, request.topic, request.broker)
        if not request.receipt_handle:
            raise invalid("receipt_handle is empty; pass the handle of the received message")
        result = await self._run(pop.forward_to_dlq, request.group, request.topic, request.receipt_handle)
        resp = pb.ForwardToDeadLetterQueueResponse()
        if result is not None:
            resp.result.CopyFrom(_send_result(result))
        return resp

    @rpc_handler("SendMessageBack")
    async def SendMessageBack(self, request: pb.SendMessageBackRequest, context):  # noqa: N802
        pop = self._pop(request.group, request.topic, request.broker)
        if request.topic.startswith("%DLQ%"):
            raise invalid("a dead letter cannot be sent back; resend it to its topic (raftmq dlq resend)")
        if request.delay_level < 0:
            raise invalid(f"delay_level {request.delay_level} is negative; 0 picks the level for the next attempt")
        cfg = self.node.readable_topic(request.topic)
        self.node.check_read_queue(cfg, request.queue_id)
        result, dead = await self._run(pop.send_back, request.group, request.topic, request.queue_id,
                                       request.queue_offset, request.delay_level)
        return pb.SendMessageBackResponse(result=_send_result(result), dead_lettered=dead)

    @rpc_handler("ResetGroupOffsets")
    async def ResetGroupOffsets(self, request: pb.ResetGroupOffsetsRequest, context):  # noqa: N802
        """A consumer group's positions on a topic's queues; in a cluster of several groups without ``broker``
        every group resets its own queues (offsets live with the queue: docs/design/scale-out.md#consumers)."""
        node = self.node
        if not request.broker and node.groups.many:
            check_group_name(request.group)
            check_topic_name(request.topic, allow_system=True)
            _reset_target(request)
            answers = await node.groups.in_every_group("ResetGroupOffsets", request, context)
            return pb.ResetGroupOffsetsResponse(groups=[pb.GroupOffsetReset(group=g, offsets=a.offsets)
                                                        for g, a in answers.items()])
        pop = self._pop(request.group, request.topic, request.broker)
        offsets = await self._run(pop.reset, request.group, request.topic, **_reset_target(request))
        return pb.ResetGroupOffsetsResponse(offsets=offsets)


def _reset_target(request: pb.ResetGroupOffsetsRequest) -> dict:
    """PopCore.reset's target of a ResetGroupOffsets request; RpcError saying what to fix."""
    which = request.WhichOneof("to")
    if which is None:
        raise invalid("set timestamp (ms since the epoch) or offset to reset to")
    if which == "timestamp" and request.timestamp < 0 or which == "offset" and request.offset < 0:
        raise invalid("timestamp and offset must be >= 0")
    if request.topic.startswith(RETRY_PREFIX):
        raise invalid("reset the group on its topic, not on its retry topic")
    return {"timestamp_ms": request.timestamp} if which == "timestamp" else {"offset": request.offset}


def _send_result(r) -> pb.SendResult:
    return pb.SendResult(msg_id=r.msg_id, uniq_key=getattr(r, "uniq_key", None) or "", topic=r.topic,
                         queue_id=r.queue_id, queue_offset=r.queue_offset, physical_offset=r.physical_offset,
                         store_timestamp=r.store_timestamp)
