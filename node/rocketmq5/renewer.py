"""Auto-renew: keep a PushConsumer's received messages invisible while it processes them (``auto_renew``).

Why: a PushConsumer receives without an invisible duration and leaves the server to keep its messages hidden until
it acks or nacks them, however long its listener takes (the RocketMQ 5 proxy renews them in the background).
Each tracked receipt is extended (PopCore.renew: same handle, new deadline, one replicated decision) when a third
of its invisible time is left, until it is acked, nacked, dead-lettered, its client says goodbye, or
``MAX_RENEW_MS`` has passed since it was received (then it becomes visible again and is redelivered, as a stuck
listener's message should be).

Receipts of a client the registry no longer knows (it said goodbye, or was silent for its expiry) are dropped.
Only the leader that handed a message out renews it. After a failover nobody does: the message comes back when
its last deadline passes and is delivered again (at-least-once; the old handle is then refused as stale).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

TICK_S = 0.25  # well inside the third of an invisible time (>= 1 s) a renewal may start in
MAX_RENEW_MS = 3 * 3600_000  # the RocketMQ 5 proxy's default renew limit


@dataclass
class _Receipt:
    group: str
    topic: str
    client_id: str
    invisible_ms: int
    received_ms: int
    due_ms: int  # renew at this time (a third of the invisible time before the deadline)


class Renewer:
    def __init__(self, node: BrokerCore, is_live: Callable[[str], bool]):
        """``is_live(client_id)``: whether that client is still connected or heartbeating."""
        self.node = node
        self._is_live = is_live
        self._receipts: dict[str, _Receipt] = {}

    def __len__(self) -> int:
        return len(self._receipts)

    def track(self, group: str, topic: str, handle: str, client_id: str, invisible_ms: int) -> None:
        now = _now_ms()
        self._receipts[handle] = _Receipt(group, topic, client_id, invisible_ms, now, now + invisible_ms * 2 // 3)

    def forget(self, handle: str) -> None:
        self._receipts.pop(handle, None)

    def forget_client(self, client_id: str) -> None:
        """The client said goodbye: its unacked messages come back when their current deadline passes."""
        for h in [h for h, r in self._receipts.items() if r.client_id == client_id]:
            del self._receipts[h]

    async def run(self) -> None:
        while not self.node.stopping:
            await asyncio.sleep(TICK_S)
            try:
                await self.renew_due()
            except Exception:  # never let one bad tick stop the renewals
                log.exception("renewing received messages failed")

    async def renew_due(self) -> int:
        """Renew every receipt that is due; returns how many were renewed."""
        now = _now_ms()
        due = [(h, r) for h, r in self._receipts.items() if r.due_ms <= now]
        renewed = 0
        for handle, r in due:
            if r.client_id and not self._is_live(r.client_id):
                self.forget(handle)
                continue
            if now - r.received_ms >= MAX_RENEW_MS:
                log.warning("group %s: a message received %d s ago is still not acked; no longer keeping it "
                            "invisible (it will be delivered again)", r.group, (now - r.received_ms) // 1000)
                self.forget(handle)
                continue
            pop = self.node.pop
            try:
                await self.node.run_blocking(pop.renew, r.group, r.topic, handle, r.invisible_ms)
            except Exception as e:  # acked meanwhile, stale, or this member no longer leads: stop renewing it
                log.debug("group %s: stopped renewing a receipt: %s", r.group, e)
                self.forget(handle)
                continue
            if handle in self._receipts:  # not acked while the renewal ran
                r.due_ms = _now_ms() + r.invisible_ms * 2 // 3
            renewed += 1
            self.node.metrics.rocketmq5_renewals.inc()
        return renewed


def _now_ms() -> int:
    return int(time.time() * 1000)
