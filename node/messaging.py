"""MessagingService: produce, pull (with long polling), query, offsets.

Why this shape: puts go to the write path as one list per request and are awaited as futures (group commit
happens behind it, no lock here); store reads run on a small thread pool so a page fault never stalls the event
loop; a pull at the end of its queue parks on the long-poll registry (a future, not a thread).
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import logging
import string
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from raftmq.node import convert, pull_stream, send_stream
from raftmq.node.consumer_groups import MAX_CLIENT_ID_LENGTH
from raftmq.node.errors import invalid, not_found
from raftmq.node.loop_bridge import LoopBridge
from raftmq.node.pop_service import PopRpcs, queue_for_message_group
from raftmq.node.rpc import rpc_handler
from raftmq.node.validation import (
    check_consumable_topic,
    check_group_name,
    check_message_type,
    check_topic_name,
    message_type_of,
)
from raftmq.store.sql_filter import SqlFilter
from raftmq.store.tag_filter import TagFilter
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

DEFAULT_MAX_COUNT = 32
DEFAULT_MAX_BYTES = 4 << 20
MAX_PULL_COUNT = 1024  # bounds one pull's memory and store time; a consumer simply pulls again
MAX_PULL_BYTES = 32 << 20  # below the server's send limit (see node.server.Broker._make_grpc_server)
QUERY_DEFAULT_MAX = 32
QUERY_MAX = 64  # RocketMQ's per-call cap
_HEX = frozenset(string.hexdigits)


class PendingSend:
    """A send handed to the write path: its store messages, the write's future, when it was submitted."""

    __slots__ = ("msgs", "put", "started")

    def __init__(self, msgs: list, put: Future, started: float):
        self.msgs = msgs
        self.put = put
        self.started = started


class MessagingService(PopRpcs, pb_grpc.MessagingServiceServicer):
    def __init__(self, node: BrokerCore):
        self.node = node
        self._round_robin: dict[str, itertools.count] = {}
        self._bridge: LoopBridge | None = None

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
        async for response in send_stream.serve(self, request_iterator, context):
            yield response

    @rpc_handler("PullStream", long_lived=True)
    async def PullStream(self, request: pb.PullStreamRequest, context):  # noqa: N802
        """issue 17: streaming consume (see node.pull_stream)."""
        async for response in pull_stream.serve(self.node, request, context):
            yield response

    async def _send(self, messages: list[pb.Message], context) -> tuple[list, list]:
        """Store messages and their results; raises for anything that was not stored."""
        # the real client, also when a follower relayed the call (issue 11 forwarding)
        pending = await self.submit(messages, _peer_host(self.node.forwarder.client_peer(context)))
        return pending.msgs, await self.complete(pending)

    async def submit(self, messages: list[pb.Message], born_host: tuple[str, int]) -> PendingSend:
        """Check and convert one send and hand it to the write path; does not wait for the write."""
        msgs = await self.prepare(messages, born_host)
        return PendingSend(msgs, self.node.write_path.put(msgs), time.perf_counter())

    def submit_prepared(self, prepared: list[list]) -> list[PendingSend]:
        """Hand several prepared sends to the write path together: one group commit (one Raft entry) for all
        of them when they fit, each with its own outcome."""
        if not prepared:
            return []
        now = time.perf_counter()
        puts = self.node.write_path.put_many(prepared)
        return [PendingSend(msgs, put, now) for msgs, put in zip(prepared, puts, strict=True)]

    async def prepare(self, messages: list[pb.Message], born_host: tuple[str, int],
                      message_type: str | None = None) -> list:
        """The store messages of one send, checked and converted; raises for what cannot be stored.

        The one write path of every produce RPC (SendMessage, SendBatch, SendStream - which runs the same three
        steps, the topic's checks once per request): it suspends only to auto-create a topic. ``message_type``:
        the kind of every message of the send as the caller's protocol declared it (RocketMQ 5), else each
        message's kind follows from its fields."""
        topic = self.send_topic(messages)
        cfg = await self.writable_topic_for_send(topic, message_type or message_type_of(messages[0])[0])
        return self.convert_send(cfg, messages, born_host, message_type)

    @staticmethod
    def send_topic(messages: list[pb.Message]) -> str:
        """The one topic of a send (a batch goes to one topic)."""
        topic = messages[0].topic
        for m in messages[1:]:
            if m.topic != topic:
                raise invalid(f"a batch goes to one topic; found {topic!r} and {m.topic!r} - send separate batches")
        return topic

    async def writable_topic_for_send(self, topic: str, message_type: str):
        """The topic's config when this node may take a send to it now; raises otherwise. ``message_type``: the
        kind of the send's messages (a topic auto-created for it takes that kind)."""
        check_topic_name(topic)
        # only the leader writes, and only its topic table is current: a follower may not have applied a topic
        # created a moment ago, so it redirects rather than answering NOT_FOUND from a stale table
        self.node.check_leader()
        return await self.node.writable_topic(topic, message_type)

    def convert_send(self, cfg, messages: list[pb.Message], born_host: tuple[str, int],
                     message_type: str | None = None) -> list:
        """The store messages of one send to the topic of ``cfg``: its queue chosen, fields checked, each
        message's kind taken by the topic (``message_type``: as in ``prepare``). A malformed message is named
        before a kind the topic does not take."""
        out = self.node.converter.to_store_messages(messages, self._queue_for(cfg, messages), born_host)
        for m in messages:
            kind, why = (message_type, "") if message_type else message_type_of(m)
            check_message_type(cfg, kind, why)
        return out

    async def complete(self, pending: PendingSend, *, record: bool = True) -> list:
        """Wait for a submitted send; its store results, or raises for anything that was not stored.
        ``record=False``: the caller counts the stored sends itself, all at once (``record_stored``)."""
        put = pending.put
        # a lone put on a single node is applied before put() returns: no wake-up from another thread needed
        if put.done():
            results = put.result()
        else:
            bridge = self._bridge
            if bridge is None:
                bridge = self._bridge = LoopBridge(asyncio.get_running_loop())
            results = await bridge.wait(put)
        self.node.metrics.put_latency.observe(time.perf_counter() - pending.started)
        convert.check_put_results(results)
        if record:
            self.record_stored([pending])
        return results

    def record_stored(self, sends: list[PendingSend]) -> None:
        """Count stored sends in the per-topic message and byte counters, once per topic."""
        counts: dict[str, list[int]] = {}
        for s in sends:
            msgs = s.msgs
            c = counts.get(msgs[0].topic)
            if c is None:
                c = counts[msgs[0].topic] = [0, 0]
            c[0] += len(msgs)
            c[1] += sum(len(m.body) for m in msgs)
        for topic, (n, nbytes) in counts.items():
            self.node.metrics.record_put(topic, n, nbytes)

    def _queue_for(self, cfg, messages: list[pb.Message]) -> int:
        """The request's queue (all messages must agree) or the next writable queue, round robin."""
        nqueues = cfg.write_queue_nums
        chosen = {m.queue_id for m in messages if m.HasField("queue_id")}
        if len(chosen) > 1:
            raise invalid(f"a batch goes to one queue; found queue ids {sorted(chosen)} - send separate batches")
        if chosen and sum(m.HasField("queue_id") for m in messages) != len(messages):
            raise invalid("give the queue (--queue; SDK: queue_id) for every message of the batch or for none (then the "
                          "broker picks one)")
        groups = {m.message_group for m in messages}
        if groups != {""} and not chosen:  # FIFO: a message group always goes to one queue (a client that picks
            if len(groups) > 1:           # the queue itself, as RocketMQ 5's do, keeps its choice)
                raise invalid(f"a batch goes to one message group; found {sorted(groups)} - send separate batches")
            return queue_for_message_group(groups.pop(), nqueues)
        if chosen:
            qid = chosen.pop()
            if not 0 <= qid < nqueues:
                raise not_found(
                    f"topic {cfg.topic_name!r} has {nqueues} write queues (0..{nqueues - 1}); queue {qid} does not "
                    "exist - drop --queue (SDK: queue_id=None) to let the broker pick one"
                )
            return qid
        counter = self._round_robin.get(cfg.topic_name)
        if counter is None:
            counter = self._round_robin[cfg.topic_name] = itertools.count()
        return next(counter) % nqueues

    # ------------------------------------------------------------------ pull
    @rpc_handler("PullMessage")
    async def PullMessage(self, request: pb.PullMessageRequest, context) -> pb.PullMessageResponse:  # noqa: N802
        node = self.node
        topic, qid, offset = request.topic, request.queue_id, request.offset
        check_topic_name(topic, allow_system=True)
        check_consumable_topic(topic)
        cfg = node.readable_topic(topic)
        node.check_read_queue(cfg, qid)
        if offset < 0:
            raise invalid(f"offset {offset} is negative; queue offsets start at 0 (`raftmq offsets TOPIC` gives the range)")
        if request.max_count < 0 or request.max_bytes < 0:
            raise invalid("max_count and max_bytes must be >= 0 (0 means the default: 32 messages, 4 MiB)")
        if request.long_poll_timeout_ms < 0:
            raise invalid(f"long_poll_timeout_ms {request.long_poll_timeout_ms} is negative; use 0 for no wait")
        if request.consumer_group:
            check_group_name(request.consumer_group)
        tag_filter = TagFilter.parse(request.tag_expression)
        sql_filter = SqlFilter.parse(request.sql_expression) if request.sql_expression else None
        if request.from_leader:
            node.check_leader()
        max_count = min(request.max_count or DEFAULT_MAX_COUNT, MAX_PULL_COUNT)
        max_bytes = min(request.max_bytes or DEFAULT_MAX_BYTES, MAX_PULL_BYTES)
        loop = asyncio.get_running_loop()
        wait = request.long_poll_timeout_ms / 1000.0
        remaining = context.time_remaining()
        if remaining is not None:  # answer NO_NEW_MSG before the caller's own deadline cuts the call
            wait = min(wait, max(0.0, remaining - 0.05))
        deadline = loop.time() + wait
        store = node.store
        timed_out = False
        while True:
            t0 = time.perf_counter()
            got = await node.run_blocking(store.get_messages, topic, qid, offset, max_count, max_bytes, tag_filter,
                                          sql_filter)
            node.metrics.get_latency.observe(time.perf_counter() - t0)
            response = convert.pull_response(got, offset)
            if (response is not None and response.status == pb.NO_MATCHED_MSG and not timed_out and node.serving
                    and deadline > loop.time()):
                offset = response.next_offset  # nothing for this subscription yet: keep waiting past it
                continue
            if response is not None:
                if response.messages:
                    node.metrics.record_pull(topic, request.consumer_group, len(response.messages),
                                             sum(len(m.body) for m in response.messages))
                return response
            left = deadline - loop.time()
            if left <= 0 or not node.serving or timed_out:
                return convert.no_new_message(got, offset)
            woke = await node.long_polls.wait(topic, qid, left,
                                              lambda o=offset: store.max_offset_in_queue(topic, qid) > o)
            if woke:
                node.metrics.long_poll_wakeups.inc()
            else:
                timed_out = True  # read once more (a last-moment arrival), then answer

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


def _peer_host(peer: str) -> tuple[str, int]:
    """gRPC peer ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` -> (ip, port); anything else (unix sockets) -> 127.0.0.1:0."""
    kind, _, rest = peer.partition(":")
    try:
        if kind == "ipv4":
            host, _, port = rest.rpartition(":")
            return host, int(port)
        if kind == "ipv6":
            host, _, port = rest.rpartition(":")
            host = host.strip("[]").split("%", 1)[0]
            ipaddress.ip_address(host)
            return host, int(port)
    except ValueError:
        pass
    return "127.0.0.1", 0

