"""Hand write-path futures (resolved on the committer / Raft completion thread) back to the event loop.

Why not ``asyncio.wrap_future``: it wakes the loop once per future (a self-pipe write and a loop iteration
each), and a group commit resolves dozens to thousands of futures at once. Here the first completion of a burst
schedules one drain on the loop and the rest ride along, so a group commit costs one wake-up, not one per
request.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any


class LoopBridge:
    """``await bridge.wait(future)`` from the loop that created the bridge; thread-safe completion."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._ready: list[tuple[asyncio.Future, Future]] = []
        self._lock = threading.Lock()
        self._scheduled = False

    def wait(self, fut: Future) -> asyncio.Future:
        waiter = self._loop.create_future()
        fut.add_done_callback(lambda f: self._completed(waiter, f))
        return waiter

    def _completed(self, waiter: asyncio.Future, fut: Future) -> None:
        with self._lock:
            self._ready.append((waiter, fut))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed (shutdown): nobody waits any more
            pass

    def _drain(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
            self._scheduled = False
        for waiter, fut in ready:
            if waiter.done():  # the awaiting task was cancelled
                continue
            if fut.cancelled():
                waiter.cancel()
                continue
            exc: Any = fut.exception()
            if exc is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(fut.result())
