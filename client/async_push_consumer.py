"""The push consumer for asyncio applications: an ``async def`` listener runs on the application's own event loop
for every message, up to ``concurrency`` listeners at once.

Same contract as ``PushConsumer``: SUCCESS acks; FAILURE, an exception or a cancelled listener gives the message
back (nack: redelivered after the group's retry back-off, dead-lettered after its max attempts); a running
listener's message is kept invisible (extended a third of the invisible duration before its deadline) so a slow
listener is not raced by a redelivery; ``shutdown()`` stops receiving, lets the running listeners finish and acks
or nacks them, and gives back what was received but not started.

Why the listener runs on the loop and not in a thread: an asyncio service's handler awaits its own I/O (a
database, an HTTP call) on that loop. The consumer's gRPC calls are ``AsyncSimpleConsumer``'s, so a long poll
never blocks the loop.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from raftmq.client import errors
from raftmq.client.async_simple_consumer import AsyncSimpleConsumer
from raftmq.client.security import ClientSecurity
from raftmq.client.simple_consumer import KEPT_ERRORS, MAX_RECEIVE_BACKOFF_S, ConsumeResult, ReceivedMessage
from raftmq.client.threaded_async import is_async_callable

log = logging.getLogger(__name__)

AsyncListener = Callable[[ReceivedMessage], Awaitable[ConsumeResult]]


class _Running:
    """A message whose listener runs: its latest receipt handle (the renewer replaces it), and a lock that keeps a
    renewal and the listener's ack or nack apart (each would otherwise invalidate the other's handle)."""

    def __init__(self, handle: ReceivedMessage):
        self.handle = handle
        self.lock = asyncio.Lock()
        self.finished = False



class AsyncPushConsumer:
    """``async with AsyncPushConsumer(group, topic, listener, servers) as c:`` runs ``await listener(message)`` on
    every message of ``topic`` for ``group``; the listener returns ``ConsumeResult.SUCCESS`` or ``FAILURE``.
    Arguments as ``PushConsumer``; ``concurrency`` listeners run at once (default 16: they are tasks, not
    threads). ``errors`` holds the last receive, ack and renewal failures (the consumer keeps going; each is
    also logged)."""

    def __init__(self, group: str, topic: str, listener: AsyncListener, servers: str | Iterable[str] | None = None,
                 *, concurrency: int = 16, tags: str | Iterable[str] | None = None, sql: str = "",
                 fifo: bool = False, invisible_duration: float = 30.0, batch_size: int = 16,
                 await_duration: float = 2.0, timeout: float = 10.0, retry_timeout: float = 15.0,
                 security: ClientSecurity | None = None):
        if not is_async_callable(listener):
            raise errors.InvalidArgumentError(
                "listener must be an async function (async def) returning ConsumeResult; "
                "for a plain function use PushConsumer")
        if concurrency < 1:
            raise errors.InvalidArgumentError(f"concurrency must be at least 1, got {concurrency}")
        if batch_size < 1:
            raise errors.InvalidArgumentError(f"batch_size must be at least 1, got {batch_size}")
        if invisible_duration <= 0:
            raise errors.InvalidArgumentError(f"invisible_duration must be positive, got {invisible_duration}")
        self.listener = listener
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.invisible_duration = invisible_duration
        # one thread for the long poll and up to 8 for acks, nacks and renewals meanwhile
        self._consumer = AsyncSimpleConsumer(group, topic, servers, tags=tags, sql=sql, fifo=fifo,
                                             await_duration=await_duration, timeout=timeout,
                                             retry_timeout=retry_timeout, security=security,
                                             concurrency=min(concurrency, 8) + 1)
        self.errors: collections.deque[BaseException] = collections.deque(maxlen=KEPT_ERRORS)
        self._slots: asyncio.Semaphore | None = None
        self._stopping = False
        self._receiving = False  # the receive loop has messages in hand or coming (not waiting for a slot)
        self._receiver: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._listeners: set[asyncio.Task[None]] = set()
        self._running: dict[int, _Running] = {}

    @property
    def group(self) -> str:
        return self._consumer.group

    @property
    def topic(self) -> str:
        return self._consumer.topic

    async def start(self) -> AsyncPushConsumer:
        """Start receiving on the running event loop (``async with`` does this)."""
        if self._stopping:
            raise errors.RaftmqError("this AsyncPushConsumer was shut down; create a new one")
        if self._receiver is None:
            self._slots = asyncio.Semaphore(self.concurrency)
            self._receiver = asyncio.create_task(self._receive_loop(), name="raftmq-async-push-receive")
            self._renewer = asyncio.create_task(self._renew_loop(), name="raftmq-async-push-renew")
        return self

    async def _receive_loop(self) -> None:
        assert self._slots is not None
        backoff = 0.0
        while not self._stopping:
            await self._slots.acquire()
            free = 1
            while free < min(self.batch_size, self.concurrency) and not self._slots.locked():
                await self._slots.acquire()
                free += 1
            if self._stopping:
                break
            self._receiving = True
            try:
                got = await self._consumer.receive(free, self.invisible_duration)
                backoff = 0.0
            except errors.RaftmqError as e:
                self._note("receive", e)
                got = []
                backoff = min(MAX_RECEIVE_BACKOFF_S, max(0.5, backoff * 2))
            for _ in range(free - len(got)):
                self._slots.release()
            for m in got:
                if self._stopping:  # shutdown came during the long poll: nothing more starts
                    await self._give_back(m)
                    continue
                task = asyncio.create_task(self._consume(m))
                self._listeners.add(task)
                task.add_done_callback(self._listeners.discard)
            self._receiving = False
            if backoff and not self._stopping:
                await asyncio.sleep(backoff)

    async def _consume(self, m: ReceivedMessage) -> None:
        assert self._slots is not None
        running = _Running(m)
        self._running[id(running)] = running
        try:
            try:
                result = await self.listener(m)
            except asyncio.CancelledError:  # shutdown's timeout ran out: give the message back, do not lose it
                result = ConsumeResult.FAILURE
            except Exception:  # noqa: BLE001 - a listener exception is a FAILURE, as in RocketMQ
                log.exception("listener failed on message %s", m.message.msg_id)
                result = ConsumeResult.FAILURE
            async with running.lock:  # a renewal under way finishes first; none starts after this
                running.finished = True
                m = running.handle
            if result == ConsumeResult.SUCCESS:
                try:
                    await self._consumer.ack(m)
                except errors.RaftmqError as e:
                    self._note("ack", e)
            else:
                await self._give_back(m)
        finally:
            del self._running[id(running)]
            self._slots.release()

    async def _renew_loop(self) -> None:
        """Keep messages invisible while their listener runs: a third of the invisible duration before the
        deadline, extend it by a whole one."""
        while True:
            await asyncio.sleep(min(1.0, self.invisible_duration / 6))
            now_ms = time.time() * 1000
            due = [r for r in self._running.values()
                   if r.handle.invisible_until - now_ms < self.invisible_duration * 1000 / 3]
            for r in due:
                async with r.lock:
                    if r.finished:
                        continue
                    try:
                        r.handle = await self._consumer.change_invisible_duration(r.handle, self.invisible_duration)
                    except errors.RaftmqError as e:
                        self._note("renewal", e)

    async def _give_back(self, m: ReceivedMessage) -> None:
        try:
            await self._consumer.nack(m)
        except errors.RaftmqError as e:
            self._note("nack", e)

    def _note(self, what: str, e: errors.RaftmqError) -> None:
        self.errors.append(e)
        log.warning("%s failed for group %s on topic %s: %s", what, self.group, self.topic, e)

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Stop receiving; let running listeners finish for up to ``timeout`` seconds (then cancel them: their
        messages are given back), ack or nack them; give back messages received but not started; close."""
        if self._stopping:
            return
        self._stopping = True
        if self._receiver is not None:
            if self._receiving:
                await self._receiver  # its long poll ends within await_duration; it gives back what it got
            else:
                self._receiver.cancel()  # waiting for a free slot or backing off: nothing in hand
                await asyncio.gather(self._receiver, return_exceptions=True)
        if self._listeners:
            _, late = await asyncio.wait(set(self._listeners), timeout=timeout)
            for task in late:
                task.cancel()
            if late:
                _, stuck = await asyncio.wait(late, timeout=timeout)
                if stuck:
                    log.warning("%d listeners of group %s ignored cancellation; their messages come back after "
                                "their invisible time", len(stuck), self.group)
        if self._renewer is not None:
            self._renewer.cancel()
            await asyncio.gather(self._renewer, return_exceptions=True)
        await self._consumer.aclose()

    async def __aenter__(self) -> AsyncPushConsumer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()
