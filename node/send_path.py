"""The one prepared write path: how every write of the node reaches ``WritePath.put`` (node/ calls it nowhere else).

A client's send (raftmq's SendMessage, SendBatch and SendStream, RocketMQ 5's SendMessage, a transaction's half
message) goes through three steps:

1. **prepare**: the send's one topic, its checks (name, leadership, writable, auto-create), the queue it goes to
   (routing: ``queue_for``), its messages converted and each one's kind checked against the topic;
2. **submit**: handed to the write path without waiting (several sends at once share one group commit, one Raft
   entry); only the event loop's auto-create of a topic suspends before this;
3. **complete**: wait for the write, check each result, count the latency and the messages stored.

The node's own writes of messages it built itself (a transaction's outcome and renewed halves, dead letters
and retries of pop consumption, delayed and timer messages coming due) skip step 1 but take the same submit and
result checks: ``submit_internal``, ``put_internal`` and ``put_internal_blocking``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from raftmq.node import convert
from raftmq.node.errors import invalid, not_found
from raftmq.node.loop_bridge import LoopBridge
from raftmq.node.validation import check_message_type, check_topic_name, message_type_of
from raftmq.store.java import java_string_hash
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore
    from raftmq.store.message import Message
    from raftmq.store.topic_config import TopicConfig


class PendingSend:
    """A send handed to the write path: its store messages, the write's future, when it was submitted."""

    __slots__ = ("msgs", "put", "started")

    def __init__(self, msgs: list, put: Future, started: float):
        self.msgs = msgs
        self.put = put
        self.started = started


def queue_for_message_group(group: str, nqueues: int) -> int:
    """The queue of a FIFO message group: stable across restarts and members (Java String.hashCode)."""
    return java_string_hash(group) % nqueues


def peer_host(peer: str) -> tuple[str, int]:
    """gRPC peer ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` -> (ip, port): a message's born host; anything else (unix
    sockets) -> 127.0.0.1:0."""
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


class SendPath:
    """The node's one way into its write path; one per node, shared by every API that stores messages."""

    def __init__(self, node: BrokerCore):
        self.node = node
        self._round_robin: dict[str, itertools.count] = {}
        self._bridge: LoopBridge | None = None

    # ------------------------------------------------------------------ prepare
    async def prepare(self, messages: list[pb.Message], born_host: tuple[str, int],
                      message_type: str | None = None) -> list:
        """The store messages of one send, checked and converted; raises for what cannot be stored.

        It suspends only to auto-create a topic. ``message_type``: the kind of every message of the send as the
        caller's protocol declared it (RocketMQ 5, a transaction's half), else each message's kind follows from
        its fields."""
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

    async def writable_topic_for_send(self, topic: str, message_type: str) -> TopicConfig:
        """The topic's config when this node may take a send to it now; raises otherwise. ``message_type``: the
        kind of the send's messages (a topic auto-created for it takes that kind)."""
        check_topic_name(topic)
        # only the leader writes, and only its topic table is current: a follower may not have applied a topic
        # created a moment ago, so it redirects rather than answering NOT_FOUND from a stale table
        self.node.check_leader()
        return await self.node.writable_topic(topic, message_type)

    def convert_send(self, cfg: TopicConfig, messages: list[pb.Message], born_host: tuple[str, int],
                     message_type: str | None = None, why: str = "") -> list:
        """The store messages of one send to the topic of ``cfg``: its queue chosen, fields checked, each
        message's kind taken by the topic (``message_type``: as in ``prepare``, ``why`` it has that kind). A
        malformed message is named before a kind the topic does not take."""
        out = self.node.converter.to_store_messages(messages, self.queue_for(cfg, messages), born_host)
        for m in messages:
            kind, reason = (message_type, why) if message_type else message_type_of(m)
            check_message_type(cfg, kind, reason)
        return out

    def queue_for(self, cfg: TopicConfig, messages: list[pb.Message]) -> int:
        """Routing: the request's queue (all messages must agree), a FIFO message group's queue, or the next
        writable queue, round robin."""
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

    # ------------------------------------------------------------------ submit
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

    # ------------------------------------------------------------------ complete
    async def complete(self, pending: PendingSend, *, record: bool = True) -> list:
        """Wait for a submitted send; its store results, or raises for anything that was not stored.
        ``record=False``: the caller counts the stored sends itself, all at once (``record_stored``)."""
        results = await self._wait(pending.put)
        self.node.metrics.put_latency.observe(time.perf_counter() - pending.started)
        convert.check_put_results(results)
        if record:
            self.record_stored([pending])
        return results

    async def _wait(self, put: Future) -> list:
        # a lone put on a single node is applied before put() returns: no wake-up from another thread needed
        if put.done():
            return put.result()
        bridge = self._bridge
        if bridge is None:
            bridge = self._bridge = LoopBridge(asyncio.get_running_loop())
        return await bridge.wait(put)

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

    # ------------------------------------------------------------------ the node's own writes
    def submit_internal(self, msgs: list[Message]) -> Future:
        """Messages the node built itself, into the write path (the future resolves to list[PutResult]): what
        delayed and timer delivery re-put (store.schedule, store.timer take it as their ``put``)."""
        return self.node.write_path.put(msgs)

    async def put_internal(self, msgs: list[Message]) -> list[Any]:
        """``submit_internal`` and wait on the event loop; raises unless every message was stored."""
        results = await self._wait(self.submit_internal(msgs))
        convert.check_put_results(results)
        return results

    def put_internal_blocking(self, msgs: list[Message], timeout: float = 30.0) -> list[Any]:
        """``submit_internal`` and wait in a worker thread (pop decisions); raises unless every message was
        stored."""
        results = self.submit_internal(msgs).result(timeout)
        convert.check_put_results(results)
        return results
