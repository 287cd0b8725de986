"""The consumer half of the RocketMQ 5 API over node.pop_core: QueryAssignment, ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, and the offset RPCs (PullMessage, UpdateOffset,
GetOffset, QueryOffset) over raftmq's queues and committed offsets.

The decisions are PopCore's (leader only, replicated), the same ones raftmq's own receive/ack RPCs make, so a
message received through either API is acked, retried and dead-lettered by the same rules and state. What is
RocketMQ 5 specific lives here: the request/response shapes and codes, and ``auto_renew`` (node.rocketmq5.renewer:
a PushConsumer's messages stay invisible while it processes them, under the handle it received).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from raftmq.node import convert as raftmq_convert
from raftmq.node.pop_core import (
    MAX_INVISIBLE_MS,
    MAX_RECEIVE,
    MIN_INVISIBLE_MS,
    BadReceiptHandleError,
    PopError,
    StaleReceiptHandleError,
)
from raftmq.node.read_path import FILTER, GROUP, OFFSET, QUEUE, SIZE, TOPIC, ReadRefused
from raftmq.node.rocketmq5 import route
from raftmq.node.rocketmq5.calls import client_id, v2_rpc
from raftmq.node.rocketmq5.convert import to_v2_message
from raftmq.node.rocketmq5.status import V2Error, ok, status
from raftmq.node.validation import ValidationError, check_consumable_topic, check_group_name, check_topic_name
from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2 as v2s
from raftmq.store.message_store import GetStatus

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore
    from raftmq.node.read_path import ReadPath
    from raftmq.node.receive_path import ReceivePath
    from raftmq.node.rocketmq5.renewer import Renewer

ANSWER_MARGIN_S = 0.5  # end a long poll this long before the caller's deadline, so it reads our answer
MAX_LONG_POLL_S = 30.0
MAX_PULL_BATCH = 1024
PULL_MAX_BYTES = 8 << 20


def _ms(duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def _now() -> Timestamp:
    t = Timestamp()
    t.GetCurrentTime()
    return t


def _names(group: v2.Resource, topic: v2.Resource) -> tuple[str, str]:
    """Validated (group, topic) names; the v2 code a client expects for a bad one."""
    try:
        check_group_name(group.name)
    except ValidationError as e:
        raise V2Error(v2.ILLEGAL_CONSUMER_GROUP, str(e)) from None
    try:
        check_topic_name(topic.name, allow_system=True)
        check_consumable_topic(topic.name)
    except ValidationError as e:
        raise V2Error(v2.ILLEGAL_TOPIC, str(e)) from None
    return group.name, topic.name


def _filter_texts(expr: v2.FilterExpression) -> tuple[str, str]:
    """(tag expression, SQL92 expression) of a v2 filter, as the read path and PopCore take them."""
    text = expr.expression.strip()
    return ("", text) if expr.type == v2.SQL else (text or "*", "")


# what a read-path refusal is about -> the v2 code a client expects for it (node/read_path.py)
_REFUSAL_CODES = {GROUP: v2.ILLEGAL_CONSUMER_GROUP, FILTER: v2.ILLEGAL_FILTER_EXPRESSION, QUEUE: v2.BAD_REQUEST,
                  OFFSET: v2.ILLEGAL_OFFSET, SIZE: v2.BAD_REQUEST}
_TOPIC_REFUSAL_CODES = {grpc.StatusCode.INVALID_ARGUMENT: v2.ILLEGAL_TOPIC,
                        grpc.StatusCode.NOT_FOUND: v2.TOPIC_NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED: v2.FORBIDDEN}


def _read_refusal(e: ReadRefused) -> Exception:
    """A read-path refusal with the v2 code for what it is about; a follower's "ask the leader" stays as it is
    (the call is relayed)."""
    code = _TOPIC_REFUSAL_CODES.get(e.code) if e.subject == TOPIC else _REFUSAL_CODES.get(e.subject)
    return e if code is None else V2Error(code, e.message)


def _handle_error(e: PopError) -> V2Error:
    if isinstance(e, (BadReceiptHandleError, StaleReceiptHandleError)):
        return V2Error(v2.INVALID_RECEIPT_HANDLE, str(e))
    return V2Error(v2.NOT_FOUND, str(e))


class ConsumerRpcs:
    """Mixin of RocketMQ5Service: the consumers' RPCs. ``renewer`` keeps auto-renewed receipts invisible."""

    node: BrokerCore
    renewer: Renewer
    reads: ReadPath
    receives: ReceivePath

    def _topic(self, name: str):
        cfg = self.node.topic_config(name)
        if cfg is None:
            raise V2Error(v2.TOPIC_NOT_FOUND, f"topic {name!r} does not exist; create it (raftmq topic create) "
                          "before consuming")
        return cfg

    async def _pop(self, fn, group: str, topic: str, *args, **kwargs):
        """A PopCore decision on the group's state of ``topic``, refused with RocketMQ 5's codes."""
        return await self.receives.decide(fn, group, topic, *args, refused=_handle_error, **kwargs)

    # ------------------------------------------------------------------ assignment
    @v2_rpc("QueryAssignment")
    async def QueryAssignment(self, request: v2s.QueryAssignmentRequest, context):  # noqa: N802
        _, topic = _names(request.group, request.topic)
        cfg = self._topic(topic)
        if cfg.read_queue_nums <= 0 or not route.permission(cfg.perm, True, False):
            raise V2Error(v2.FORBIDDEN, f"topic {topic!r} has no readable queue")
        members = [m.grpc for m in self.node.config.members] or [self.node.config.advertised_address]
        endpoints = route.route_endpoints(request.endpoints, members)
        # one assignment for the whole cluster (id -1, as the Java proxy gives one per broker): the leader hands
        # out messages of every queue; FIFO order is kept by message group on the server, not by queue ownership
        queue = v2.MessageQueue(topic=request.topic, id=-1, permission=route.permission(cfg.perm, True, True),
                                broker=route.broker(self.node.config.cluster.name, endpoints),
                                accept_message_types=route.accept_message_types(cfg))
        return v2s.QueryAssignmentResponse(status=ok(), assignments=[v2.Assignment(message_queue=queue)])

    # ------------------------------------------------------------------ receive
    @v2_rpc("ReceiveMessage")
    async def ReceiveMessage(self, request: v2s.ReceiveMessageRequest, context):  # noqa: N802
        node = self.node
        tags, sql = _filter_texts(request.filter_expression)
        try:  # pops happen on the leader: a follower relays the whole stream (node/rpc.py)
            sub = self.receives.subscribe(request.group.name, request.message_queue.topic.name,
                                          tag_expression=tags, sql_expression=sql)
        except ReadRefused as e:
            raise _read_refusal(e) from None
        group, topic = sub.group, sub.topic
        pop = node.pop
        batch = request.batch_size
        if not 0 < batch <= MAX_RECEIVE:
            raise V2Error(v2.BAD_REQUEST, f"batch size {batch} must be 1..{MAX_RECEIVE}")
        auto_renew = request.auto_renew and not request.HasField("invisible_duration")
        invisible = int(node.config.node.rocketmq5_auto_renew_seconds * 1000) if auto_renew else \
            _ms(request.invisible_duration)
        if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
            raise V2Error(v2.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms must be between "
                          f"{MIN_INVISIBLE_MS} ms and {MAX_INVISIBLE_MS // 3600_000} h")
        wait = _ms(request.long_polling_timeout) / 1000.0 if request.HasField("long_polling_timeout") else 0.0
        if wait < 0:
            raise V2Error(v2.ILLEGAL_POLLING_TIME, "long polling timeout must not be negative")
        wait = min(wait, MAX_LONG_POLL_S)
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - ANSWER_MARGIN_S))
        try:
            got = await self.receives.receive(sub, max_messages=batch, invisible_ms=invisible,
                                              fifo=pop.policy(group).fifo, wait_s=wait)
        except PopError as e:
            raise _handle_error(e) from None
        if not got:
            yield v2s.ReceiveMessageResponse(status=status(v2.MESSAGE_NOT_FOUND, "no new message"))
            yield v2s.ReceiveMessageResponse(delivery_timestamp=_now())
            return
        messages = []
        for d in got:
            view = raftmq_convert.message_view(d.message)
            m = to_v2_message(view, topic=d.topic)  # a retried message shows under the topic it came from
            m.topic.resource_namespace = request.message_queue.topic.resource_namespace
            sp = m.system_properties
            sp.receipt_handle = d.receipt_handle
            sp.delivery_attempt = d.delivery_attempt
            sp.invisible_duration.FromMilliseconds(invisible)
            messages.append(m)
        yield v2s.ReceiveMessageResponse(status=ok())
        for m in messages:
            yield v2s.ReceiveMessageResponse(message=m)
        yield v2s.ReceiveMessageResponse(delivery_timestamp=_now())
        if auto_renew:  # only once the whole answer went out: a client gone meanwhile gets them back in time
            cid = client_id(context)
            for d in got:
                self.renewer.track(group, topic, d.receipt_handle, cid, invisible)

    # ------------------------------------------------------------------ ack / change / dead letter
    @v2_rpc("AckMessage")
    async def AckMessage(self, request: v2s.AckMessageRequest, context):  # noqa: N802
        group, topic = _names(request.group, request.topic)
        self.node.check_leader()
        entries = list(request.entries)
        if not entries:
            raise V2Error(v2.BAD_REQUEST, "no entries to ack; pass the received messages' receipt handles")
        results: list[v2.Status] = []
        handles = [e.receipt_handle for e in entries]
        for h in handles:
            self.renewer.forget(h)
        try:
            errors = await self._pop(self.node.pop.ack, group, topic, handles)
            results = [ok() if e is None else status(v2.INVALID_RECEIPT_HANDLE, e) for e in errors]
        except V2Error:  # a forged or foreign handle among them: judge each on its own
            for h in handles:
                try:
                    err = (await self._pop(self.node.pop.ack, group, topic, [h]))[0]
                    results.append(ok() if err is None else status(v2.INVALID_RECEIPT_HANDLE, err))
                except V2Error as e:
                    results.append(e.status())
        out = [v2s.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=s)
               for e, s in zip(entries, results, strict=True)]
        codes = {s.code for s in results}
        top = results[0] if len(codes) == 1 else status(v2.MULTIPLE_RESULTS, "entries have different results")
        return v2s.AckMessageResponse(status=top, entries=out)

    @v2_rpc("ChangeInvisibleDuration")
    async def ChangeInvisibleDuration(self, request: v2s.ChangeInvisibleDurationRequest, context):  # noqa: N802
        group, topic = _names(request.group, request.topic)
        self.node.check_leader()
        ms = _ms(request.invisible_duration)
        if not 0 <= ms <= MAX_INVISIBLE_MS:
            raise V2Error(v2.ILLEGAL_INVISIBLE_TIME, f"invisible duration {ms} ms must be 0 (retry after the "
                          f"group's back-off) .. {MAX_INVISIBLE_MS // 3600_000} h")
        if not request.receipt_handle:
            raise V2Error(v2.INVALID_RECEIPT_HANDLE, "receipt handle is empty; pass the received message's handle")
        self.renewer.forget(request.receipt_handle)
        try:
            handle, _ = await self._pop(self.node.pop.change_invisible, group, topic, request.receipt_handle, ms)
        except V2Error as e:  # the client takes the answer's handle even on an error: give the old one back
            return v2s.ChangeInvisibleDurationResponse(status=e.status(), receipt_handle=request.receipt_handle)
        return v2s.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle)

    @v2_rpc("ForwardMessageToDeadLetterQueue")
    async def ForwardMessageToDeadLetterQueue(self, request, context):  # noqa: N802
        group, topic = _names(request.group, request.topic)
        self.node.check_leader()
        if not request.receipt_handle:
            raise V2Error(v2.INVALID_RECEIPT_HANDLE, "receipt handle is empty; pass the received message's handle")
        self.renewer.forget(request.receipt_handle)
        await self._pop(self.node.pop.forward_to_dlq, group, topic, request.receipt_handle)
        return v2s.ForwardMessageToDeadLetterQueueResponse(status=ok())

    # ------------------------------------------------------------------ offsets (pull consumers)
    def _queue(self, mq: v2.MessageQueue) -> tuple[str, int]:
        try:
            check_topic_name(mq.topic.name, allow_system=True)
        except ValidationError as e:
            raise V2Error(v2.ILLEGAL_TOPIC, str(e)) from None
        cfg = self._topic(mq.topic.name)
        if not 0 <= mq.id < cfg.read_queue_nums:
            raise V2Error(v2.BAD_REQUEST, f"topic {mq.topic.name!r} has read queues 0..{cfg.read_queue_nums - 1}, "
                          f"not {mq.id}")
        return mq.topic.name, mq.id

    @v2_rpc("PullMessage")
    async def PullMessage(self, request: v2s.PullMessageRequest, context):  # noqa: N802
        """An offset pull through the node's one read path (node/read_path.py), answered the v2 way."""
        mq = request.message_queue
        if not 0 < request.batch_size <= MAX_PULL_BATCH:
            raise V2Error(v2.BAD_REQUEST, f"batch size {request.batch_size} must be 1..{MAX_PULL_BATCH}")
        tags, sql = _filter_texts(request.filter_expression)
        reads = self.reads
        try:
            sub = reads.subscribe(mq.topic.name, request.group.name, tag_expression=tags, sql_expression=sql,
                                  max_count=request.batch_size, max_bytes=PULL_MAX_BYTES)
            reads.check_queue(sub, mq.id, request.offset)
        except ReadRefused as e:
            raise _read_refusal(e) from None
        wait = min(_ms(request.long_polling_timeout) / 1000.0, MAX_LONG_POLL_S)
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - ANSWER_MARGIN_S))
        pulled = await reads.pull(sub, mq.id, request.offset, wait)
        got = pulled.result
        if got.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
            yield v2s.PullMessageResponse(status=status(v2.ILLEGAL_OFFSET, f"offset {request.offset} is outside "
                                                        f"the queue; continue at {got.next_begin_offset}"))
            yield v2s.PullMessageResponse(next_offset=got.next_begin_offset)
            return
        if not got.messages:
            yield v2s.PullMessageResponse(status=status(v2.MESSAGE_NOT_FOUND, "no new message"))
            yield v2s.PullMessageResponse(next_offset=max(pulled.offset, got.next_begin_offset))
            return
        yield v2s.PullMessageResponse(status=ok())
        for m in got.messages:
            yield v2s.PullMessageResponse(message=to_v2_message(raftmq_convert.message_view(m)))
        yield v2s.PullMessageResponse(next_offset=got.next_begin_offset)

    @v2_rpc("UpdateOffset")
    async def UpdateOffset(self, request: v2s.UpdateOffsetRequest, context):  # noqa: N802
        group, _ = _names(request.group, request.message_queue.topic)
        topic, qid = self._queue(request.message_queue)
        if request.offset < 0:
            raise V2Error(v2.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        await self.node.run_blocking(self.node.write_path.commit_offsets, group, topic, {qid: request.offset})
        return v2s.UpdateOffsetResponse(status=ok())

    @v2_rpc("GetOffset")
    async def GetOffset(self, request: v2s.GetOffsetRequest, context):  # noqa: N802
        group, _ = _names(request.group, request.message_queue.topic)
        topic, qid = self._queue(request.message_queue)
        offsets = await self.node.run_blocking(self.node.group_offsets, group, topic)
        if qid not in offsets:
            raise V2Error(v2.OFFSET_NOT_FOUND, f"group {group!r} has committed no offset for {topic!r} queue {qid}")
        return v2s.GetOffsetResponse(status=ok(), offset=offsets[qid])

    @v2_rpc("QueryOffset")
    async def QueryOffset(self, request: v2s.QueryOffsetRequest, context):  # noqa: N802
        topic, qid = self._queue(request.message_queue)
        store = self.node.store
        policy = request.query_offset_policy
        if policy == v2.BEGINNING:
            offset = store.min_offset_in_queue(topic, qid)
        elif policy == v2.END:
            offset = store.max_offset_in_queue(topic, qid)
        elif policy == v2.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise V2Error(v2.BAD_REQUEST, "query offset by TIMESTAMP needs a timestamp")
            offset = await self.node.run_blocking(store.get_offset_by_time, topic, qid,
                                                  request.timestamp.ToMilliseconds())
        else:
            raise V2Error(v2.BAD_REQUEST, f"unknown query offset policy {policy}; use BEGINNING, END or TIMESTAMP")
        return v2s.QueryOffsetResponse(status=ok(), offset=offset)

