"""The one receive path: how raftmq's ReceiveMessage and RocketMQ 5's ReceiveMessage hand out messages (pop).

A receive asks PopCore (the leader's replicated decisions, on the blocking pool) for visible messages; when none
is visible and the caller long-polls, it waits for what can make one visible and asks again:

* a message arriving on one of the queues the group receives from (the topic's and its retry topic's), past
  where the group's receiving stands: the long-poll registry wakes it, as it wakes a pull;
* the group's earliest in-flight message coming due (a nack's back-off, an invisible time running out);
* an ack, nack, dead-letter forward or reset of the group on this member (``changed``), which can make room in
  a queue's in-flight window or release the next message of a FIFO message group.

``SAFETY_NET_S`` bounds a wait anyway (a change made on another member reaches this one through replication
without a signal), so a receive never sleeps through a state it could not see coming.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftmq.node.errors import invalid
from raftmq.node.pop_core import Delivery, PopError
from raftmq.node.read_path import GROUP, ReadPath, ReadRefused, Subscription
from raftmq.node.validation import ValidationError, check_group_name

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

SAFETY_NET_S = 1.0


class ReceivePath:
    """The node's one receive loop; one per node, shared by both APIs."""

    def __init__(self, node: BrokerCore, reads: ReadPath):
        self.node = node
        self.reads = reads  # a receive checks its topic, group and filters as a pull does
        self._changed: dict[tuple[str, str], asyncio.Event] = {}  # (group, topic) -> set on a change, while waited on

    def subscribe(self, group: str, topic: str, *, tag_expression: str = "",
                  sql_expression: str = "") -> Subscription:
        """A receive's checks: a consumer group (required), the topic and filters exactly as a pull checks them
        (node/read_path.py: a refusal is a ReadRefused), and leadership (pop decisions are the leader's)."""
        try:
            check_group_name(group)
        except ValidationError as e:
            raise ReadRefused(GROUP, invalid(str(e))) from None
        sub = self.reads.subscribe(topic, group, tag_expression=tag_expression, sql_expression=sql_expression)
        self.node.check_leader()
        return sub

    async def receive(self, sub: Subscription, *, max_messages: int, invisible_ms: int, fifo: bool,
                      wait_s: float) -> list[Delivery]:
        """Up to ``max_messages`` deliveries, waiting up to ``wait_s`` for one to become visible (0: answer at
        once). PopError (a bad handle, ...) passes through for the caller's protocol to answer."""
        node = self.node
        pop = node.pop
        group, topic, tag_filter, sql_filter = sub.group, sub.topic, sub.tag_filter, sub.sql_filter
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait_s)
        while True:
            changed = self._event(group, topic)  # before the receive: a change during it is not missed
            got = await node.run_blocking(lambda: pop.receive(
                group, topic, max_messages=max_messages, invisible_ms=invisible_ms, tag_filter=tag_filter,
                sql_filter=sql_filter, fifo=fifo))
            left = deadline - loop.time()
            if got or left <= 0 or not node.serving:
                self.reads.record(sub, [d.message for d in got])
                return got
            await self._wait(group, topic, changed, min(left, self._until_due(group, topic)))

    async def decide(self, fn: Callable[..., Any], group: str, topic: str, *args: Any,
                     refused: Callable[[PopError], Exception], **kwargs: Any) -> Any:
        """A PopCore decision that changes the group's state of ``topic`` (ack, nack, dead-letter forward, send
        back, reset): ``fn(group, topic, *args, **kwargs)`` off the event loop; a PopError is raised as
        ``refused(error)`` (the caller's protocol's answer); waiting receives look again afterwards."""
        try:
            return await self.node.run_blocking(lambda: fn(group, topic, *args, **kwargs))
        except PopError as e:
            raise refused(e) from None
        finally:
            self.changed(group, topic)

    def changed(self, group: str, topic: str) -> None:
        """The group's pop state of ``topic`` changed on this member (an ack, nack, forward, reset): waiting
        receives look again. Event-loop thread only."""
        event = self._changed.pop((group, topic), None)
        if event is not None:
            event.set()

    def _event(self, group: str, topic: str) -> asyncio.Event:
        event = self._changed.get((group, topic))
        if event is None:
            event = self._changed[(group, topic)] = asyncio.Event()
        return event

    def _until_due(self, group: str, topic: str) -> float:
        """Seconds until the group's earliest in-flight message becomes visible, at most SAFETY_NET_S."""
        due_ms = self.node.pop.next_visible_ms(group, topic)
        if due_ms is None:
            return SAFETY_NET_S
        return min(SAFETY_NET_S, max(0.0, due_ms / 1000.0 - time.time()))

    async def _wait(self, group: str, topic: str, changed: asyncio.Event, timeout: float) -> None:
        """Until a message arrives on one of the group's sources, its pop state changes here, or ``timeout``."""
        node, pop = self.node, self.node.pop
        waits = [asyncio.ensure_future(node.long_polls.wait(t, q, timeout,
                                                            lambda t=t, q=q: pop.has_new(group, t, q)))
                 for t, q in pop.sources(group, topic)]
        waits.append(asyncio.ensure_future(changed.wait()))
        try:
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if any(not t.cancelled() and t.exception() is None and t.result() for t in done):
                node.metrics.long_poll_wakeups.inc()
        finally:
            for t in waits:
                t.cancel()

