"""Pulls parked at the end of a queue, woken when the reput thread dispatches to that queue.

Why futures on the event loop: a waiter costs one asyncio future, not a thread, and nothing polls. The store calls
``on_arrival`` from its reput thread once per (topic, queue) per dispatch pass; it only hands the wake-up to the
loop when someone waits on that queue, so a busy broker with no long polls pays a dict lookup per queue per pass.

No lost wake-ups: a waiter registers *before* it re-reads the queue's max offset, and the reput thread publishes
the new max offset *before* it calls the listener. Either the waiter sees the new offset, or the listener sees the
waiter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class LongPollRegistry:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        self._closed = False

    def __len__(self) -> int:
        return sum(len(s) for s in self._waiters.values())

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener; runs on the reput thread and must not block."""
        if (topic, queue_id) in self._waiters:
            self._loop.call_soon_threadsafe(self._wake, (topic, queue_id))

    def _wake(self, key: tuple[str, int]) -> None:
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(True)

    async def wait(self, topic: str, queue_id: int, timeout: float, ready: Callable[[], bool]) -> bool:
        """Wait until a message is dispatched to the queue, ``timeout`` passes, or the registry closes.

        ``ready()`` is checked after registering, so an arrival between the caller's last read and this call is
        not missed. Returns True when woken (the queue probably has something new), False on timeout.
        """
        if self._closed or timeout <= 0:
            return ready()
        key = (topic, queue_id)
        fut = self._loop.create_future()
        self._waiters.setdefault(key, set()).add(fut)
        try:
            if ready():
                return True
            try:
                return await asyncio.wait_for(fut, timeout)
            except TimeoutError:
                return False
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self._waiters[key]

    def close(self) -> None:
        """Release every waiter (shutdown): they re-read their queue and answer at once."""
        self._closed = True
        for key in list(self._waiters):
            self._wake(key)
