"""The pop consumer for asyncio applications: ``await consumer.receive()`` never blocks the event loop.

Why threads here and not the loop (as ``AsyncProducer``): a receive is a long poll that waits at the server for
up to ``await_duration``, and an ack is one call per batch, so a hand-off to a worker thread costs nothing next to
the call; what matters is that the loop keeps running meanwhile. The calls are ``SimpleConsumer``'s, so
leader-following, retries, outcomes and errors are the same code. The worker threads are this consumer's own
(``concurrency`` of them), so long polls never starve the loop's default executor.

Cancelling a ``receive`` does not take back what the server hands out in the meantime: those messages stay
invisible for their invisible duration and are then delivered again (``delivery_attempt + 1``), like any message
not acked in time. Nothing is lost.
"""

from __future__ import annotations

from collections.abc import Iterable

from raftmq.client import errors
from raftmq.client.security import ClientSecurity
from raftmq.client.simple_consumer import ReceivedMessage, SimpleConsumer
from raftmq.client.threaded_async import ThreadedAsyncClient
from raftmq.client.types import SendResult


class AsyncSimpleConsumer(ThreadedAsyncClient):
    """``SimpleConsumer`` for coroutines: ``async with AsyncSimpleConsumer(group, topic, servers) as c:``, then
    ``for m in await c.receive(): ... await c.ack(m)``. Same arguments as ``SimpleConsumer``, plus
    ``concurrency``: how many of its calls may run at once (receives and acks from many tasks)."""

    def __init__(self, group: str, topic: str, servers: str | Iterable[str] | None = None, *,
                 tags: str | Iterable[str] | None = None, sql: str = "", fifo: bool = False,
                 await_duration: float = 5.0, timeout: float = 10.0, retry_timeout: float = 15.0,
                 security: ClientSecurity | None = None, concurrency: int = 4):
        if concurrency < 1:
            raise errors.InvalidArgumentError(f"concurrency must be at least 1, got {concurrency}")
        self._consumer = SimpleConsumer(group, topic, servers, tags=tags, sql=sql, fifo=fifo,
                                        await_duration=await_duration, timeout=timeout,
                                        retry_timeout=retry_timeout, security=security)
        super().__init__(concurrency, "raftmq-async-consumer")

    @property
    def group(self) -> str:
        return self._consumer.group

    @property
    def topic(self) -> str:
        return self._consumer.topic

    async def receive(self, max_messages: int = 32, invisible_duration: float = 30.0) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages, each invisible to the group for ``invisible_duration`` seconds; waits
        at the server up to ``await_duration`` when nothing is visible."""
        return await self._call(self._consumer.receive, max_messages, invisible_duration)

    async def ack(self, messages: ReceivedMessage | Iterable[ReceivedMessage]) -> None:
        """Ack one message or a batch (one replicated command); StaleReceiptHandleError as ``SimpleConsumer``."""
        batch = messages if isinstance(messages, ReceivedMessage) else list(messages)
        await self._call(self._consumer.ack, batch)

    async def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> ReceivedMessage:
        """Move the message's deadline to now + ``seconds``; returns it with its new receipt handle."""
        return await self._call(self._consumer.change_invisible_duration, message, seconds)

    async def nack(self, message: ReceivedMessage) -> ReceivedMessage:
        """Give the message back: visible again after the group's retry back-off for its delivery attempt."""
        return await self._call(self._consumer.nack, message)

    async def forward_to_dead_letter_queue(self, message: ReceivedMessage) -> SendResult:
        """Give up on the message now: it moves to %DLQ%<group> and counts as consumed."""
        return await self._call(self._consumer.forward_to_dead_letter_queue, message)

    async def aclose(self) -> None:
        """Wait for calls in flight (a receive up to ``await_duration``), then close the connections."""
        await super().aclose()

    def _close_client(self) -> None:
        self._consumer.close()
