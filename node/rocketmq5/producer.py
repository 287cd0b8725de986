"""The producer half of the RocketMQ 5 API: SendMessage, EndTransaction and transaction checks over Telemetry.

Sends take raftmq's ONE write path: ``MessagingService.prepare`` (topic checks, leader check, queue choice: a
FIFO message group picks its queue by hash exactly as raftmq's own API does) and ``submit_prepared``/``complete``
(group commit through Raft). Transactional sends take the transaction machinery of node.transaction_service
(the same half-message log, commit/rollback path and check loop). The producer group of a v2 transaction is its
topic (RocketMQ 5 clients have no producer group; the Java proxy does the same), so orphan checks go to any
producer that publishes to the topic, through its Telemetry stream.

Ids: a v2 message keeps the client's id as UNIQ_KEY (raftmq's API and CLI show and find the same id). A
transaction id is the half message's offset message id (what raftmq's end-transaction needs to find it).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import grpc

from raftmq.node.errors import RpcError
from raftmq.node.rocketmq5 import convert
from raftmq.node.rocketmq5.calls import v2_rpc
from raftmq.node.rocketmq5.status import V2Error, ok
from raftmq.node.rocketmq5.telemetry import TelemetryStream
from raftmq.node.send_path import peer_host
from raftmq.node.validation import MessageTypeError, ValidationError, check_topic_name
from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2 as v2s
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore
    from raftmq.node.send_path import SendPath
    from raftmq.node.transaction_service import TransactionService

MAX_MESSAGES_PER_SEND = 1024


class _TelemetryCheckSink:
    """The queue of a v2 checker: turns raftmq's TransactionCheck into a recover-orphaned-transaction command
    pushed on the producer's Telemetry stream."""

    def __init__(self, stream: TelemetryStream, topic: str):
        self.stream = stream
        self.topic = topic

    def put_nowait(self, check: pb.TransactionCheck | None) -> None:
        if check is None:  # this member stopped leading; the stream stays (it may lead again)
            return
        message = convert.to_v2_message(check.message, topic=self.topic)
        # the client answers with message_id = the UNIQ_KEY and transaction_id = this (renewed) half's msg id
        message.system_properties.message_id = check.transaction_id
        self.stream.push(v2s.TelemetryCommand(recover_orphaned_transaction_command=v2s.RecoverOrphanedTransactionCommand(
            message=message, transaction_id=check.msg_id)))


class TelemetryTransactionChecker:
    """A RocketMQ 5 producer as a transaction checker of node.transaction_service (one per stream and topic)."""

    def __init__(self, stream: TelemetryStream, topic: str):
        self.group = topic
        self.close_reason: RpcError | None = None
        self.queue = _TelemetryCheckSink(stream, topic)


class ProducerRpcs:
    """Mixin of RocketMQ5Service: the producer's RPCs."""

    node: BrokerCore
    sends: SendPath
    transactions: TransactionService

    # ------------------------------------------------------------------ send
    @v2_rpc("SendMessage")
    async def SendMessage(self, request: v2s.SendMessageRequest, context) -> v2s.SendMessageResponse:  # noqa: N802
        node = self.node
        if not request.messages:
            raise V2Error(v2.BAD_REQUEST, "the send has no message; send at least one")
        if len(request.messages) > MAX_MESSAGES_PER_SEND:
            raise V2Error(v2.BAD_REQUEST, f"a send holds at most {MAX_MESSAGES_PER_SEND} messages; send fewer at once")
        now_ms = int(time.time() * 1000)
        max_delay_ms = int(node.config.node.rocketmq5_max_delay_seconds * 1000)
        outgoing = [convert.to_outgoing(m, max_body_size=node.store_config.max_message_size,
                                        max_delay_ms=max_delay_ms, now_ms=now_ms) for m in request.messages]
        topic = outgoing[0].message.topic
        try:
            check_topic_name(topic)
        except ValidationError as e:
            raise V2Error(v2.ILLEGAL_TOPIC, str(e)) from None
        born_host = peer_host(node.forwarder.client_peer(context))
        if any(o.message_type == v2.TRANSACTION for o in outgoing):
            if len(outgoing) > 1:
                raise V2Error(v2.BAD_REQUEST, "a transactional message is sent alone; send one per transaction")
            return await self._send_half(outgoing[0], born_host)
        if len({o.message.topic for o in outgoing}) > 1:
            raise V2Error(v2.BAD_REQUEST, "the messages of one send go to one topic; send separate batches")
        if len({o.message_type for o in outgoing}) > 1:
            raise V2Error(v2.BAD_REQUEST, "the messages of one send are of one type (NORMAL, FIFO or DELAY); send "
                          "separate batches")
        try:
            msgs = await self.sends.prepare([o.message for o in outgoing], born_host,
                                                v2.MessageType.Name(outgoing[0].message_type))
        except RpcError as e:
            raise as_topic_not_found(e, topic, node) from None
        except MessageTypeError as e:
            raise V2Error(v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, str(e)) from None
        for o, m in zip(outgoing, msgs, strict=True):
            m.properties.update(o.system_properties)
            if o.deliver_at_ms is not None and o.deliver_at_ms > now_ms:
                m.properties[convert.PROPERTY_TIMER_DELIVER_MS] = str(o.deliver_at_ms)
        pending = self.sends.submit_prepared([msgs])[0]
        results = await self.sends.complete(pending)
        return v2s.SendMessageResponse(status=ok(), entries=[
            v2s.SendResultEntry(status=ok(), message_id=o.message_id, offset=r.queue_offset)
            for o, r in zip(outgoing, results, strict=True)])

    async def _send_half(self, o: convert.Outgoing, born_host: tuple[str, int]) -> v2s.SendMessageResponse:
        node = self.node
        node.check_leader()  # a follower relays the send (node.rocketmq5.calls)
        try:
            result, _half = await self.transactions.store_half(o.message, o.message.topic, born_host,
                                                               o.system_properties)
        except RpcError as e:
            raise as_topic_not_found(e, o.message.topic, node) from None
        except MessageTypeError as e:
            raise V2Error(v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, str(e)) from None
        return v2s.SendMessageResponse(status=ok(), entries=[v2s.SendResultEntry(
            status=ok(), message_id=o.message_id, transaction_id=result.msg_id, offset=result.queue_offset)])

    # ------------------------------------------------------------------ transactions
    @v2_rpc("EndTransaction")
    async def EndTransaction(self, request: v2s.EndTransactionRequest, context):  # noqa: N802
        topic = request.topic.name
        if not topic:
            raise V2Error(v2.ILLEGAL_TOPIC, "the topic is empty; end a transaction on the topic its message was "
                          "sent to")
        if not request.transaction_id:
            raise V2Error(v2.INVALID_TRANSACTION_ID, "the transaction id is empty; pass the one the send returned")
        if request.resolution == v2.COMMIT:
            resolution = pb.TX_COMMIT
        elif request.resolution == v2.ROLLBACK:
            resolution = pb.TX_ROLLBACK
        else:
            raise V2Error(v2.BAD_REQUEST, "the resolution must be COMMIT or ROLLBACK")
        end = pb.EndTransactionRequest(producer_group=topic, transaction_id=request.message_id,
                                       msg_id=request.transaction_id, resolution=resolution)
        try:
            await self.transactions.end(end)
        except RpcError as e:
            if e.leader:  # not the leader: relayed by v2_rpc
                raise
            if e.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
                          grpc.StatusCode.FAILED_PRECONDITION):
                raise V2Error(v2.INVALID_TRANSACTION_ID, e.message) from None
            raise
        except ValidationError as e:
            raise V2Error(v2.INVALID_TRANSACTION_ID, str(e)) from None
        return v2s.EndTransactionResponse(status=ok())

    # ------------------------------------------------------------------ Telemetry hooks (service.py calls them)
    def producer_settings_applied(self, stream: TelemetryStream) -> None:
        """A producer's settings arrived: it becomes a transaction checker of every topic it publishes to."""
        self.producer_stream_closed(stream)
        checkers = [TelemetryTransactionChecker(stream, t) for t in dict.fromkeys(stream.publishing_topics()) if t]
        self._checkers[stream.stream_id] = checkers
        for c in checkers:
            self.transactions.add_checker(c)

    def producer_stream_closed(self, stream: TelemetryStream) -> None:
        for c in self._checkers.pop(stream.stream_id, []):
            self.transactions.remove_checker(c)


def as_topic_not_found(e: RpcError, topic: str, node: BrokerCore) -> Exception:
    """raftmq's unknown-topic refusal as TOPIC_NOT_FOUND; anything else unchanged."""
    if e.code == grpc.StatusCode.NOT_FOUND and not e.leader and node.topic_config(topic) is None:
        return V2Error(v2.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist; create it first (`raftmq topic create "
                       f"{topic}`) or turn on node.auto_create_topics")
    return e
