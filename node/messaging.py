"""MessagingService: produce, pull (with long polling), query, offsets, consumer-group membership.

The RPCs are the request and answer shapes only: a send takes the node's one prepared write path
(node/send_path.py), a pull its one read path (node/read_path.py), a receive its one receive path
(node/receive_path.py, through node/pop_service.py); store reads run on the node's blocking pool.
"""

from __future__ import annotations

import logging
import string
import time
from typing import TYPE_CHECKING

from raftmq.node import convert, pull_stream, send_stream
from raftmq.node.consumer_groups import MAX_CLIENT_ID_LENGTH
from raftmq.node.errors import invalid, not_found
from raftmq.node.pop_service import PopRpcs
from raftmq.node.read_path import ReadPath
from raftmq.node.receive_path import ReceivePath
from raftmq.node.rpc import rpc_handler
from raftmq.node.send_path import SendPath, peer_host
from raftmq.node.validation import (
    check_consumable_topic,
    check_group_name,
    check_topic_name,
)
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

QUERY_DEFAULT_MAX = 32
QUERY_MAX = 64  # RocketMQ's per-call cap
_HEX = frozenset(string.hexdigits)


class MessagingService(PopRpcs, pb_grpc.MessagingServiceServicer):
    """raftmq's MessagingService: sends through the node's one prepared write path (``sends``), pulls through its
    one read path (``reads``), pop through its one receive path (``receives``, node.pop_service)."""

    def __init__(self, node: BrokerCore, sends: SendPath, reads: ReadPath, receives: ReceivePath):
        self.node = node
        self.sends = sends
        self.reads = reads
        self.receives = receives

    # ------------------------------------------------------------------ produce
    @rpc_handler("SendMessage")
    async def SendMessage(self, request: pb.SendMessageRequest, context) -> pb.SendMessageResponse:  # noqa: N802
        msgs, results = await self._send([request.message], context)
        return pb.SendMessageResponse(result=convert.send_result(results[0], msgs[0]))

    @rpc_handler("SendBatch")
    async def SendBatch(self, request: pb.SendBatchRequest, context) -> pb.SendBatchResponse:  # noqa: N802
        if not request.messages:
            raise invalid("the batch is empty; send at least one message")
        msgs, results = await self._send(list(request.messages), context)
        response = pb.SendBatchResponse()
        convert.add_send_results(response.results, results, msgs)
        return response

    @rpc_handler("SendStream", long_lived=True)
    async def SendStream(self, request_iterator, context):  # noqa: N802
        """issue 17: streaming produce (see node.send_stream); errors of the stream itself end it with a status."""
        async for response in send_stream.serve(self.node, self.sends, request_iterator, context):
            yield response

    async def _send(self, messages: list[pb.Message], context) -> tuple[list, list]:
        """Store messages and their results; raises for anything that was not stored."""
        # the real client, also when a follower relayed the call (issue 11 forwarding)
        pending = await self.sends.submit(messages, peer_host(self.node.forwarder.client_peer(context)))
        return pending.msgs, await self.sends.complete(pending)

    # ------------------------------------------------------------------ pull (node/read_path.py)
    @rpc_handler("PullMessage")
    async def PullMessage(self, request: pb.PullMessageRequest, context) -> pb.PullMessageResponse:  # noqa: N802
        reads = self.reads
        sub = reads.subscribe(request.topic, request.consumer_group, tag_expression=request.tag_expression,
                              sql_expression=request.sql_expression, max_count=request.max_count,
                              max_bytes=request.max_bytes, from_leader=request.from_leader)
        reads.check_queue(sub, request.queue_id, request.offset)
        if request.long_poll_timeout_ms < 0:
            raise invalid(f"long_poll_timeout_ms {request.long_poll_timeout_ms} is negative; use 0 for no wait")
        wait = request.long_poll_timeout_ms / 1000.0
        remaining = context.time_remaining()
        if remaining is not None:  # answer NO_NEW_MSG before the caller's own deadline cuts the call
            wait = min(wait, max(0.0, remaining - 0.05))
        pulled = await reads.pull(sub, request.queue_id, request.offset, wait)
        return (convert.pull_response(pulled.result, pulled.offset)
                or convert.no_new_message(pulled.result, pulled.offset))

    @rpc_handler("PullStream", long_lived=True)
    async def PullStream(self, request: pb.PullStreamRequest, context):  # noqa: N802
        """issue 17: streaming consume (see node.pull_stream)."""
        async for response in pull_stream.serve(self.node, self.reads, request, context):
            yield response

    # ------------------------------------------------------------------ queries
    @rpc_handler("QueryMessageByKey")
    async def QueryMessageByKey(self, request: pb.QueryMessageByKeyRequest, context):  # noqa: N802
        node = self.node
        check_topic_name(request.topic, allow_system=True)
        node.existing_topic(request.topic)
        if not request.key:
            raise invalid("key is empty; give the message key (or UNIQ_KEY) to look up")
        if request.max_num < 0:
            raise invalid(f"the result limit (--max; SDK: max_num) {request.max_num} is negative; leave it unset for "
                          f"the default ({QUERY_DEFAULT_MAX})")
        if request.begin_timestamp < 0 or request.end_timestamp < 0:
            raise invalid("begin_timestamp and end_timestamp are ms since the epoch and must be >= 0")
        end = request.end_timestamp or int(time.time() * 1000)
        if end < request.begin_timestamp:
            raise invalid(f"end_timestamp {end} is before begin_timestamp {request.begin_timestamp}")
        max_num = min(request.max_num or QUERY_DEFAULT_MAX, QUERY_MAX)
        found = await node.run_blocking(node.store.query_messages, request.topic, request.key, max_num,
                                        request.begin_timestamp, end)
        found = sorted(found, key=lambda m: (m.store_timestamp, m.physical_offset))
        return pb.QueryMessageByKeyResponse(messages=[convert.message_view(m) for m in found])

    @rpc_handler("ViewMessage")
    async def ViewMessage(self, request: pb.ViewMessageRequest, context) -> pb.ViewMessageResponse:  # noqa: N802
        node = self.node
        msg_id = request.msg_id.strip()
        if not msg_id:
            raise invalid("the message id is empty; give an offset message id (or a UNIQ_KEY with its topic: "
                          "`raftmq view KEY --topic TOPIC`)")
        is_offset_id = len(msg_id) in (32, 56) and all(c in _HEX for c in msg_id)
        found = None
        if request.topic:
            check_topic_name(request.topic, allow_system=True)
            candidates = await node.run_blocking(node.store.query_messages, request.topic, msg_id, QUERY_MAX, 0,
                                                 int(time.time() * 1000))
            matching = [m for m in candidates if m.uniq_key == msg_id]
            if matching:
                found = min(matching, key=lambda m: m.physical_offset)
        elif not is_offset_id:
            raise invalid(
                f"{msg_id!r} is not an offset message id (32 or 56 hex characters); to look up a UNIQ_KEY, "
                "give its topic too: `raftmq view KEY --topic TOPIC` (SDK: view_message(key, topic=...))"
            )
        if found is None and is_offset_id:
            found = await node.run_blocking(node.store.view_message_by_id, msg_id.upper())
            if found is not None and request.topic and found.topic != request.topic:
                found = None
        if found is None:
            where = f" in topic {request.topic!r}" if request.topic else ""
            raise not_found(f"no message with id {msg_id!r}{where} (removed by retention, or never stored)")
        return pb.ViewMessageResponse(message=convert.message_view(found))

    # ------------------------------------------------------------------ offsets
    @rpc_handler("GetQueueOffsets")
    async def GetQueueOffsets(self, request: pb.GetQueueOffsetsRequest, context):  # noqa: N802
        node = self.node
        check_topic_name(request.topic, allow_system=True)
        cfg = node.existing_topic(request.topic)
        queues = await node.run_blocking(node.queue_offsets, request.topic, cfg.read_queue_nums)
        return pb.GetQueueOffsetsResponse(queues=queues)

    @rpc_handler("SearchOffset")
    async def SearchOffset(self, request: pb.SearchOffsetRequest, context) -> pb.SearchOffsetResponse:  # noqa: N802
        node = self.node
        check_topic_name(request.topic, allow_system=True)
        cfg = node.existing_topic(request.topic)
        node.check_read_queue(cfg, request.queue_id)
        if request.timestamp < 0:
            raise invalid(f"timestamp {request.timestamp} is negative; give ms since the Unix epoch")
        offset = await node.run_blocking(node.store.get_offset_by_time, request.topic, request.queue_id,
                                         request.timestamp)
        return pb.SearchOffsetResponse(offset=offset)

    @rpc_handler("CommitOffset")
    async def CommitOffset(self, request: pb.CommitOffsetRequest, context) -> pb.CommitOffsetResponse:  # noqa: N802
        node = self.node
        check_group_name(request.group)
        check_topic_name(request.topic, allow_system=True)
        cfg = node.existing_topic(request.topic)
        if not request.offsets:
            raise invalid("offsets is empty; give {queue_id: next offset to consume}")
        for qid, off in request.offsets.items():
            node.check_read_queue(cfg, qid)
            if off < 0:
                raise invalid(f"offset {off} for queue {qid} is negative; commit the next offset to consume (>= 0)")
        await node.run_blocking(node.write_path.commit_offsets, request.group, request.topic, dict(request.offsets))
        return pb.CommitOffsetResponse()

    @rpc_handler("FetchOffset")
    async def FetchOffset(self, request: pb.FetchOffsetRequest, context) -> pb.FetchOffsetResponse:  # noqa: N802
        node = self.node
        check_group_name(request.group)
        check_topic_name(request.topic, allow_system=True)
        offsets = await node.run_blocking(node.group_offsets, request.group, request.topic)
        return pb.FetchOffsetResponse(offsets=offsets)

    # ------------------------------------------------------------------ consumer groups (see node.consumer_groups)
    @rpc_handler("ConsumerHeartbeat")
    async def ConsumerHeartbeat(self, request: pb.ConsumerHeartbeatRequest, context):  # noqa: N802
        node = self.node
        _check_member(request.group, request.topic, request.client_id)
        cfg = node.readable_topic(request.topic)
        if request.heartbeat_interval_ms < 0:
            raise invalid(f"heartbeat_interval_ms {request.heartbeat_interval_ms} is negative; use 0 for 5000")
        node.check_leader()  # membership lives on the leader: every consumer must see the same table
        node.consumer_groups.start_term(node.leader_term())
        m = node.consumer_groups.heartbeat(request.group, request.topic, request.client_id,
                                           request.heartbeat_interval_ms / 1000.0)
        return pb.ConsumerHeartbeatResponse(client_ids=m.client_ids, generation=m.generation,
                                            read_queue_nums=cfg.read_queue_nums)

    @rpc_handler("UnregisterConsumer")
    async def UnregisterConsumer(self, request: pb.UnregisterConsumerRequest, context):  # noqa: N802
        node = self.node
        _check_member(request.group, request.topic, request.client_id)
        node.check_leader()
        node.consumer_groups.start_term(node.leader_term())
        m = node.consumer_groups.unregister(request.group, request.topic, request.client_id)
        return pb.UnregisterConsumerResponse(client_ids=m.client_ids, generation=m.generation)


def _check_member(group: str, topic: str, client_id: str) -> None:
    check_group_name(group)
    check_topic_name(topic, allow_system=True)
    check_consumable_topic(topic)
    if not client_id.strip():
        raise invalid("client_id is empty; give a unique id per consumer instance, e.g. host@pid@random")
    if len(client_id) > MAX_CLIENT_ID_LENGTH or not client_id.isprintable():
        raise invalid(f"client_id must be 1-{MAX_CLIENT_ID_LENGTH} printable characters, got {client_id!r:.80}")

