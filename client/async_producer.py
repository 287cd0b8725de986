"""The producer for asyncio applications: ``await producer.send(...)`` never blocks the event loop.

Why: a blocking ``Producer.send`` called from a coroutine stalls every other task of the loop for a whole
Raft round trip, and handing it to a thread pool pays a thread wake-up twice per send. Here the send
accumulator (``client.accumulator``) runs on the application's own loop: sends from many tasks coalesce into
one ``SendStream`` exactly as sends from many threads do for ``Producer``, and each task awaits its own
outcome - a future of that loop, so no thread is woken at all.

Everything else is ``Producer``'s: the same arguments and checks, UNIQ_KEYs, outcomes and retry rules (see
``client.producer``). The rare sends that take the unary way - re-sent after "not the leader" / "not ready" /
"busy", an unknown outcome re-sent under ``unknown_outcome_retries``, ``linger_ms=0``, a broker without
SendStream, a leader out of reach - run ``Producer``'s blocking path in a worker thread, so its redirects and
back-off are the same code.

One ``AsyncProducer`` belongs to the event loop of its first send; ``aclose()`` it (or use ``async with``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import datetime

from raftmq.client import errors
from raftmq.client.accumulator import Resend, SendAccumulator
from raftmq.client.connection import ServerPool
from raftmq.client.producer import DEFAULT_LINGER_MS, DEFAULT_STREAM_WINDOW, Producer, check_stream_options
from raftmq.client.security import ClientSecurity
from raftmq.client.types import Message, SendResult
from raftmq.v1 import raftmq_pb2 as pb


class AsyncProducer:
    """Sends messages from coroutines: ``async with AsyncProducer(servers) as p: await p.send(topic, body)``."""

    def __init__(self, servers: str | Iterable[str] | None = None, *, timeout: float = 10.0,
                 retry_timeout: float = 15.0, unknown_outcome_retries: int | None = None,
                 linger_ms: float = DEFAULT_LINGER_MS, stream_window: int = DEFAULT_STREAM_WINDOW,
                 security: ClientSecurity | None = None):
        check_stream_options(linger_ms, stream_window)
        # the unary path and the message building; its own accumulator stays off (linger_ms=0)
        self._producer = Producer(servers, timeout=timeout, retry_timeout=retry_timeout,
                                  unknown_outcome_retries=unknown_outcome_retries, linger_ms=0,
                                  stream_window=stream_window, security=security)
        self._linger_s = linger_ms / 1000.0
        self._window = stream_window
        self._accumulators: dict[str, SendAccumulator] = {}  # group ("": the servers given) -> its stream
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def servers(self) -> list[str]:
        return self._producer.servers

    @property
    def leader(self) -> str | None:
        """The leader's address as last learned (a redirect hint or a successful write), if any."""
        return self._producer.leader

    async def send(self, topic: str, body: bytes | str, *, tags: str | None = None,
                   keys: list[str] | str | None = None, properties: Mapping[str, str] | None = None,
                   queue_id: int | None = None, delay_level: int = 0, message_group: str = "",
                   deliver_at: datetime | int | float | None = None, broker: str | None = None) -> SendResult:
        """``Producer.send``, awaited: where the message was stored once a majority has it."""
        self._check_open()
        m = self._producer._message(topic, body, tags, keys, properties, queue_id, delay_level, message_group,
                                    deliver_at)
        return SendResult.from_pb((await self._deliver([m], broker, batch=False))[0])

    async def send_batch(self, topic: str, messages: Iterable[Message | bytes | str], *,
                         queue_id: int | None = None, broker: str | None = None) -> list[SendResult]:
        """``Producer.send_batch``, awaited: one atomic, contiguous batch in one queue; results in input order."""
        self._check_open()
        items = self._producer._batch(topic, messages, queue_id)
        if not items:
            return []
        return [SendResult.from_pb(r) for r in await self._deliver(items, broker, batch=True)]

    async def _deliver(self, items: list[pb.Message], broker: str | None, *, batch: bool) -> list[pb.SendResult]:
        """``Producer._deliver`` on this loop: the group's stream, else the unary call in a thread."""
        producer = self._producer
        router = producer._router  # asking for a route blocks: in a thread, unless it is known already
        placement = (router.place(items, broker) if router.knows(items[0].topic)
                     else await asyncio.to_thread(router.place, items, broker))
        while True:
            pool, group = placement.apply()
            try:
                results, attempts = ((None, 0) if placement.relayed else
                                     await self._stream_send(items, group, pool))
                if results is not None:
                    return results
                if batch:
                    return await asyncio.to_thread(producer._send_batch_unary_pb, items, attempts, pool)
                return [await asyncio.to_thread(producer._send_unary_pb, items[0], attempts, pool)]
            except errors.RaftmqError as e:
                if not placement.retry(e):
                    raise placement.named(e) from e

    async def _stream_send(self, items: list[pb.Message], group: str,
                           pool: ServerPool) -> tuple[list[pb.SendResult] | None, int]:
        """``Producer._stream_send`` on this loop's accumulator of the group."""
        acc = self._accumulator_for_this_loop(group, pool)
        if not self._producer._stream_usable(acc, pool):
            return None, 0
        assert acc is not None
        try:
            return await acc.send_async(items, pool.timeout), 0
        except (Resend, errors.UnknownOutcomeError) as e:
            return None, self._producer._attempts_after(e)

    def _accumulator_for_this_loop(self, group: str, pool: ServerPool) -> SendAccumulator | None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise errors.RaftmqError("this AsyncProducer belongs to the event loop of its first send; "
                                     "make one AsyncProducer per event loop")
        acc = self._accumulators.get(group)
        if acc is None and self._linger_s > 0:
            acc = self._accumulators[group] = SendAccumulator(pool, linger_s=self._linger_s, window=self._window,
                                                              loop=loop)
        return acc

    def _check_open(self) -> None:
        if self._closed:
            raise errors.RaftmqError("producer is closed")

    async def aclose(self) -> None:
        """Stop taking sends, let the broker answer those in flight, close the connections."""
        if self._closed:
            return
        if self._accumulators:
            if asyncio.get_running_loop() is self._loop:
                for acc in self._accumulators.values():
                    await acc.aclose()
            elif self._loop is not None and not self._loop.is_closed():
                raise errors.RaftmqError("this AsyncProducer belongs to another running event loop; aclose() it "
                                         "there")
            # else its loop is closed: its stream and tasks ended with it
        self._closed = True
        self._producer.close()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
