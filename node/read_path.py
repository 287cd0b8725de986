"""The one read path: how every pull API reads a queue (raftmq's PullMessage and PullStream, RocketMQ 5's
PullMessage).

Each pull goes through the same five steps, here and nowhere else:

1. **validate** (``subscribe``, ``check_queue``): the topic's name, that it is for consumers (not a system
   topic), that it exists here and is readable, the consumer group's name, the queue, the offset, the size
   limits; a refusal is a ``ReadRefused`` naming what was wrong, so each protocol answers it with its own code
   and the same words;
2. **filter**: the tag expression and the SQL92 expression, parsed once per pull (or stream);
3. **read** (``read``): ``MessageStore.get_messages`` on the node's blocking pool (its consume-queue unit checks
   and damage handling included: a damaged record fails the read with DATA_LOSS and starts its repair);
4. **long-poll** (``pull``, ``wait_any``): a pull at the end of its queue parks on the long-poll registry
   (woken by the reput's arrivals) until a message comes or the wait ends, skipping past messages its filter
   drops meanwhile, and reads once more at the deadline;
5. **metrics**: the store read time (``raftmq_get_latency_seconds``), the messages and bytes pulled per topic and
   group, the long-poll wake-ups.

What each API does itself is only the shape of its request and answer (node/messaging.py, pull_stream.py,
rocketmq5/consumer.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftmq.node.errors import RpcError, invalid, to_rpc_error
from raftmq.node.validation import check_consumable_topic, check_group_name, check_topic_name
from raftmq.store.message_store import GetStatus
from raftmq.store.sql_filter import SqlFilter
from raftmq.store.tag_filter import TagFilter

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore
    from raftmq.store.message_store import GetResult
    from raftmq.store.topic_config import TopicConfig

DEFAULT_MAX_COUNT = 32
DEFAULT_MAX_BYTES = 4 << 20
MAX_PULL_COUNT = 1024  # bounds one pull's memory and store time; a consumer simply pulls again
MAX_PULL_BYTES = 32 << 20  # below the server's send limit (see node.server.Broker._make_grpc_server)
# what a subject of a refusal is: the part of the request a protocol names in its own code
TOPIC, GROUP, FILTER, QUEUE, OFFSET, SIZE = "topic", "group", "filter", "queue", "offset", "size"
_WAIT_PAST = frozenset({GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MATCHED_MESSAGE})


class ReadRefused(RpcError):
    """A pull the read path refuses; ``subject`` (TOPIC, GROUP, ...) says which part of the request is wrong."""

    def __init__(self, subject: str, err: RpcError):
        super().__init__(err.code, err.message, leader=err.leader)
        self.subject = subject


@contextlib.contextmanager
def _about(subject: str) -> Iterator[None]:
    try:
        yield
    except ReadRefused:
        raise
    except Exception as exc:
        err = to_rpc_error(exc)
        if err is None:
            raise
        raise ReadRefused(subject, err) from None


@dataclass(frozen=True)
class Subscription:
    """A validated pull (or stream of pulls): what to read and how much at a time."""

    topic: str
    config: TopicConfig
    group: str  # "" when the caller names none (metrics then count it without a group)
    tag_filter: TagFilter | None  # None: every tag
    sql_filter: SqlFilter | None
    max_count: int
    max_bytes: int


@dataclass(frozen=True)
class Pulled:
    """What a pull found: the store's answer at ``offset`` (where the pull ended up after skipping past messages
    its filter drops), and whether it waited until its deadline."""

    result: GetResult
    offset: int
    timed_out: bool


class ReadPath:
    """The node's one read path; one per node, shared by every pull API."""

    def __init__(self, node: BrokerCore):
        self.node = node

    # ------------------------------------------------------------------ validate and filter
    def subscribe(self, topic: str, group: str = "", *, tag_expression: str = "", sql_expression: str = "",
                  max_count: int = 0, max_bytes: int = 0, from_leader: bool = False) -> Subscription:
        """Check a pull's topic, group, limits and filters (``max_count``/``max_bytes`` 0: the defaults)."""
        node = self.node
        with _about(TOPIC):
            check_topic_name(topic, allow_system=True)
            check_consumable_topic(topic)
            cfg = node.readable_topic(topic)
        if group:
            with _about(GROUP):
                check_group_name(group)
        with _about(SIZE):
            if max_count < 0 or max_bytes < 0:
                raise invalid("max_count and max_bytes must be >= 0 (0 means the default: 32 messages, 4 MiB)")
        try:
            tags = TagFilter.parse(tag_expression)
            sql = SqlFilter.parse(sql_expression) if sql_expression.strip() else None
        except Exception as exc:
            err = to_rpc_error(exc)
            if err is None:
                raise
            text = sql_expression.strip() or tag_expression.strip()
            raise ReadRefused(FILTER, invalid(f"filter expression {text!r}: {err.message}")) from None
        if from_leader:
            node.check_leader()
        return Subscription(topic, cfg, group, None if tags.is_all else tags, sql,
                            min(max_count or DEFAULT_MAX_COUNT, MAX_PULL_COUNT),
                            min(max_bytes or DEFAULT_MAX_BYTES, MAX_PULL_BYTES))

    def check_queue(self, sub: Subscription, queue_id: int, offset: int) -> None:
        """The queue exists for reading and the offset is not negative."""
        with _about(QUEUE):
            self.node.check_read_queue(sub.config, queue_id)
        if offset < 0:
            raise ReadRefused(OFFSET, invalid(f"offset {offset} for queue {queue_id} is negative; queue offsets "
                                              "start at 0 (`raftmq offsets TOPIC` gives the range)"))

    # ------------------------------------------------------------------ read
    async def read(self, sub: Subscription, queue_id: int, offset: int) -> GetResult:
        """One store read at ``offset``, off the event loop, timed."""
        node = self.node
        t0 = time.perf_counter()
        got = await node.run_blocking(node.store.get_messages, sub.topic, queue_id, offset, sub.max_count,
                                      sub.max_bytes, sub.tag_filter, sub.sql_filter)
        node.metrics.get_latency.observe(time.perf_counter() - t0)
        return got

    # ------------------------------------------------------------------ long-poll
    async def pull(self, sub: Subscription, queue_id: int, offset: int, wait_s: float) -> Pulled:
        """Read at ``offset``; when there is nothing new for this subscription yet, wait up to ``wait_s`` for it
        (0: answer at once), then read once more (a last-moment arrival)."""
        node = self.node
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait_s)
        timed_out = False
        while True:
            got = await self.read(sub, queue_id, offset)
            if got.messages or not self._nothing_yet(got, offset) or timed_out or not node.serving:
                break
            if got.status == GetStatus.NO_MATCHED_MESSAGE and got.next_begin_offset > offset:
                offset = got.next_begin_offset  # nothing for this subscription there: go on past it
                if deadline > loop.time():
                    continue
            left = deadline - loop.time()
            if left <= 0:
                break
            if not await self.wait(sub.topic, queue_id, offset, left):
                timed_out = True  # read once more, then answer
        self.record(sub, got.messages)
        return Pulled(got, offset, timed_out)

    @staticmethod
    def _nothing_yet(got: GetResult, offset: int) -> bool:
        """The queue has no message at ``offset`` for this subscription yet (rather than an answer: a moved
        offset, an offset out of range)."""
        if got.status in _WAIT_PAST:
            return True
        return got.status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE) and offset == 0

    async def wait(self, topic: str, queue_id: int, offset: int, timeout: float) -> bool:
        """Park until the queue holds a message past ``offset`` (True) or ``timeout`` passes (False)."""
        store = self.node.store
        woke = await self.node.long_polls.wait(topic, queue_id, timeout,
                                               lambda: store.max_offset_in_queue(topic, queue_id) > offset)
        if woke:
            self.node.metrics.long_poll_wakeups.inc()
        return woke

    async def wait_any(self, topic: str, offsets: dict[int, int], timeout: float) -> bool:
        """Park until any of the queues holds a message past its offset (True) or ``timeout`` passes."""
        store = self.node.store
        waits = [asyncio.ensure_future(self.node.long_polls.wait(
            topic, qid, timeout, lambda q=qid, o=off: store.max_offset_in_queue(topic, q) > o))
            for qid, off in offsets.items()]
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            woke = any(not t.cancelled() and t.exception() is None and t.result() for t in done)
        finally:
            for t in waits:
                t.cancel()
        if woke:
            self.node.metrics.long_poll_wakeups.inc()
        return woke

    # ------------------------------------------------------------------ metrics
    def record(self, sub: Subscription, messages: list) -> None:
        """Count the messages a pull or receive hands out (per topic and group)."""
        if messages:
            self.node.metrics.record_pull(sub.topic, sub.group, len(messages), sum(len(m.body) for m in messages))

