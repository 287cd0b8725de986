"""The common part of the SDK's asyncio twins that run a blocking client in worker threads of their own
(``AsyncSimpleConsumer``, ``AsyncPullConsumer``, ``AsyncTransactionProducer``), and the check that a callback
they await is a coroutine function.

Why threads of their own and not the loop's default executor: their calls include long polls and streams that
wait for seconds; in a shared executor they would starve the application's other ``run_in_executor`` work.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

from raftmq.client import errors

T = TypeVar("T")


def is_async_callable(fn: Any) -> bool:
    """An ``async def`` function (or a partial of one), or an object whose ``__call__`` is one."""
    return callable(fn) and (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__))


class ThreadedAsyncClient:
    """``_call`` runs one of the blocking client's calls in this object's threads; ``aclose`` waits for the calls
    in flight, then ``_close_client``; ``async with`` closes."""

    def __init__(self, workers: int, thread_name: str):
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name)
        self._closed = False

    def _close_client(self) -> None:
        """Close the blocking client (in a thread, after the calls in flight)."""
        raise NotImplementedError

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._submit(fn, *args)

    def _submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        if self._closed:
            raise errors.RaftmqError(f"this {type(self).__name__} is closed")
        return asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._close_blocking)

    def _close_blocking(self) -> None:
        self._threads.shutdown(wait=True)
        self._close_client()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
