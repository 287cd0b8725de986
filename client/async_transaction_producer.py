"""The transactional producer for asyncio applications: the local transaction and the check-back are coroutines on
the application's own event loop.

Why: an asyncio service runs its database transaction on its loop (an async driver), so ``local_tx`` must be
awaited there, and so must the broker's check-back question ("did that transaction commit?"), which reads the same
database. The gRPC calls are ``TransactionProducer``'s (same retries, same idempotent end, same check stream that
follows the leader), run in worker threads; a check arriving on the stream's thread is handed to the loop and its
answer awaited there, with a deadline, so a loop that is gone or stuck answers UNKNOWN (the broker asks again)
instead of blocking the stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from raftmq.client import errors
from raftmq.client.security import ClientSecurity
from raftmq.client.threaded_async import ThreadedAsyncClient, is_async_callable
from raftmq.client.transaction_producer import (
    HalfResult,
    TransactionProducer,
    TransactionResult,
    TransactionState,
)
from raftmq.client.types import MessageView, SendResult

log = logging.getLogger(__name__)

AsyncChecker = Callable[[MessageView], Awaitable[TransactionState]]
AsyncLocalTx = Callable[[HalfResult], Awaitable[TransactionState]]
CHECK_ANSWER_TIMEOUT_S = 30.0  # a check the loop has not answered by then is answered UNKNOWN (asked again later)



class AsyncTransactionProducer(ThreadedAsyncClient):
    """``async with AsyncTransactionProducer(servers, group=G, checker=check) as p:`` then ``r = await
    p.send_in_transaction(topic, body, local_tx=save)``, where ``save(half)`` and ``check(view)`` are ``async
    def`` functions returning a ``TransactionState``. Create it inside the event loop that runs them."""

    def __init__(self, servers: str | Iterable[str] | None = None, *, group: str,
                 checker: AsyncChecker | None = None, timeout: float = 10.0, retry_timeout: float = 15.0,
                 security: ClientSecurity | None = None, concurrency: int = 4):
        if checker is not None and not is_async_callable(checker):
            raise errors.InvalidArgumentError("checker must be an async function (async def) returning "
                                              "TransactionState; for a plain function use TransactionProducer")
        if concurrency < 1:
            raise errors.InvalidArgumentError(f"concurrency must be at least 1, got {concurrency}")
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise errors.InvalidArgumentError("create AsyncTransactionProducer inside the event loop that runs "
                                              "its local transactions and checker (in async code)") from None
        self._checker = checker
        self._producer = TransactionProducer(servers, group=group, timeout=timeout, retry_timeout=retry_timeout,
                                             security=security,
                                             checker=self._answer_check if checker is not None else None)
        super().__init__(concurrency, "raftmq-async-tx")

    @property
    def group(self) -> str:
        return self._producer.group

    async def send_half(self, topic: str, body: bytes | str, *, tags: str | None = None,
                        keys: list[str] | str | None = None, properties: Mapping[str, str] | None = None,
                        queue_id: int | None = None, broker: str | None = None) -> HalfResult:
        """Store a half message (invisible to consumers until committed); ``broker``: in that group."""
        return await self._call(lambda: self._producer.send_half(topic, body, tags=tags, keys=keys,
                                                                 properties=properties, queue_id=queue_id,
                                                                 broker=broker))

    async def end(self, half: HalfResult, state: TransactionState) -> SendResult | None:
        """Commit or roll back (idempotent per outcome, as ``TransactionProducer.end``)."""
        return await self._call(lambda: self._producer.end(half, state))

    async def send_in_transaction(self, topic: str, body: bytes | str, *, local_tx: AsyncLocalTx,
                                  tags: str | None = None, keys: list[str] | str | None = None,
                                  properties: Mapping[str, str] | None = None,
                                  queue_id: int | None = None, broker: str | None = None) -> TransactionResult:
        """Half message, then ``await local_tx(half)``, then its outcome; UNKNOWN or an exception in ``local_tx``
        leaves it to the check-back (as does cancelling this call once the half message is stored)."""
        if not is_async_callable(local_tx):
            raise errors.InvalidArgumentError("local_tx must be an async function (async def) returning "
                                              "TransactionState")
        half = await self.send_half(topic, body, tags=tags, keys=keys, properties=properties, queue_id=queue_id,
                                    broker=broker)
        try:
            state = await local_tx(half)
            if not isinstance(state, TransactionState):
                raise TypeError(f"local_tx returned {state!r}, not a TransactionState")
        except Exception:
            log.exception("local transaction of %s failed; its outcome is left to the check-back",
                          half.transaction_id)
            state = TransactionState.UNKNOWN
        if state == TransactionState.UNKNOWN:
            return TransactionResult(state, half)
        try:
            committed = await self.end(half, state)
        except errors.RaftmqError as e:
            return TransactionResult(state, half, None, str(e))
        return TransactionResult(state, half, committed)

    def _answer_check(self, view: MessageView) -> TransactionState:
        """On the check stream's thread: run the checker on the loop and wait for its answer (bounded)."""
        assert self._checker is not None
        try:
            future = asyncio.run_coroutine_threadsafe(self._checker(view), self._loop)
        except RuntimeError:  # the loop is closed
            return TransactionState.UNKNOWN
        try:
            return future.result(CHECK_ANSWER_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            log.error("transaction checker did not answer about %s within %.0fs (is the event loop blocked?); "
                      "answering UNKNOWN", view.uniq_key, CHECK_ANSWER_TIMEOUT_S)
            return TransactionState.UNKNOWN
        # any other exception is the checker's: TransactionProducer logs it and answers UNKNOWN

    async def aclose(self) -> None:
        """Close the check stream and the connections (waits for calls in flight)."""
        await super().aclose()

    def _close_client(self) -> None:
        self._producer.close()
