"""The pull consumer for asyncio applications: ``async for message in consumer`` never blocks the event loop.

Why one worker thread per consumer: ``PullConsumer`` keeps positions, a buffer and a heartbeat of its own, and a
poll is a long wait at the server; running its calls one at a time in a thread of this consumer's own keeps them
in the order the application made them (a commit after the poll that handed the messages out) and keeps the
loop's default executor free. A commit waits for a poll in progress to end (at most its timeout).

Cancelling a ``poll`` or ``receive`` loses nothing: the thread finishes the call, and what it took (this consumer's
positions have moved past it) is handed out first by the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from raftmq.client.consumer import PullConsumer
from raftmq.client.threaded_async import ThreadedAsyncClient
from raftmq.client.types import MessageView, SendResult


class AsyncPullConsumer(ThreadedAsyncClient):
    """``PullConsumer`` for coroutines: ``async with AsyncPullConsumer(group, topic, servers) as c: async for m in
    c: ...``, or ``await c.poll()`` and ``await c.commit()``. Takes ``PullConsumer``'s arguments."""

    def __init__(self, group: str, topic: str, servers: str | Iterable[str] | None = None, **options: Any):
        self._consumer = PullConsumer(group, topic, servers, **options)
        super().__init__(1, "raftmq-async-pull")
        self._unclaimed: list[MessageView] = []  # taken by a cancelled poll or receive: handed out next

    @property
    def group(self) -> str:
        return self._consumer.group

    @property
    def topic(self) -> str:
        return self._consumer.topic

    def assigned_queues(self) -> list[int]:
        return self._consumer.assigned_queues()

    def positions(self) -> dict[int, int]:
        return self._consumer.positions()

    async def start(self) -> AsyncPullConsumer:
        """Join the group and take this consumer's queues now (else the first poll does)."""
        await self._call(self._consumer.start)
        return self

    async def poll(self, timeout: float = 1.0) -> list[MessageView]:
        """Every message available within ``timeout`` seconds (possibly none), across this consumer's queues."""
        if self._unclaimed:
            got, self._unclaimed = self._unclaimed, []
            return got
        return await self._call_keeping(self._consumer.poll, timeout)

    async def receive(self, timeout: float = 1.0) -> MessageView | None:
        """The next message, or None if none arrives within ``timeout`` seconds."""
        if self._unclaimed:
            return self._unclaimed.pop(0)
        return await self._call_keeping(self._consumer.receive, timeout)

    async def __aiter__(self) -> AsyncIterator[MessageView]:
        """Messages as they arrive, until ``aclose()`` or ``break``."""
        while not self._closed:
            message = await self.receive(self._consumer.long_poll)
            if message is not None:
                yield message

    async def commit(self) -> None:
        """Commit the offsets of every message handed out so far (replicated)."""
        await self._call(self._consumer.commit)

    async def seek(self, queue_id: int, offset: int) -> None:
        await self._call(self._consumer.seek, queue_id, offset)

    async def send_back(self, message: MessageView, delay_level: int = 0) -> SendResult:
        """RocketMQ 4's sendMessageBack, as ``PullConsumer.send_back``."""
        return await self._call(self._consumer.send_back, message, delay_level)

    async def aclose(self) -> None:
        """Commit (with auto-commit), leave the group and close, after the call in progress."""
        await super().aclose()

    def _close_client(self) -> None:
        self._consumer.close()

    async def _call_keeping(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``_call`` for poll and receive: if the caller is cancelled, what the call took is kept for the next."""
        future = self._submit(fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(self._keep)
            raise

    def _keep(self, future: asyncio.Future) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        got = future.result()
        if isinstance(got, list):
            self._unclaimed.extend(got)
        elif got is not None:
            self._unclaimed.append(got)
