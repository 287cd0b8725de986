"""The producer: sends messages to the leader, one at a time or as an atomic batch.

Sends from all threads share one ``SendStream`` call (``client.accumulator``; ``linger_ms=0`` turns it off and
makes one unary call per send); the outcomes below are the same either way.

Retries, exactly. Every message gets a producer-side UNIQ_KEY before its first send and keeps it on every
resend. A send is re-sent automatically only when it cannot have been stored:

* the connection to an address could not be made (the request never left this process) - next address;
* the node is not the leader (FAILED_PRECONDITION) - the leader named in ``x-raftmq-leader``, else the next
  address;
* the node is not ready / has no leader / is shutting down (UNAVAILABLE from the server), or is busy
  (RESOURCE_EXHAUSTED) - back off and try again, until ``retry_timeout``.

When the outcome is unknown - the deadline passed, the connection broke mid-call, or the server answered
UNKNOWN - the message may or may not be stored. By default the producer re-sends it with the same UNIQ_KEYs
until it gets a definite answer or ``retry_timeout`` seconds have passed since the first unknown outcome, then
raises ``UnknownOutcomeError`` (with the UNIQ_KEYs). That is safe because the broker de-duplicates by UNIQ_KEY
(on by default, 2 minutes: docs/design/deduplication.md): a message that was stored is not stored again, and the
re-send gets the first send's result with ``SendResult.duplicate`` set; each message of a batch is judged alone.
``unknown_outcome_retries=N`` re-sends at most N times instead, and 0 raises at once. On a topic whose
de-duplication window is off (``raftmq topic update T --dedup-window 0``) a re-send can store the message twice:
two records with the same UNIQ_KEY, body and properties but different msgIds and queue offsets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from datetime import datetime

from raftmq.client import errors
from raftmq.client.accumulator import Resend, SendAccumulator
from raftmq.client.connection import ServerPool
from raftmq.client.routing import Router
from raftmq.client.security import ClientSecurity
from raftmq.client.types import Message, SendResult, epoch_ms
from raftmq.client.uniq_key import UniqKeyGenerator
from raftmq.v1 import raftmq_pb2 as pb

DEFAULT_LINGER_MS = 0.1  # only while earlier stream requests are unanswered: a lone send leaves at once
# stream requests unanswered at once: few, so sends that arrive meanwhile wait and leave together in one bigger
# request (64 threads of single sends, 3 members on 2 cores: 4 instead of 16 cut client CPU per send ~35% and
# the leader's ~25%, and raised throughput; batches of 32 saw no difference)
DEFAULT_STREAM_WINDOW = 4


def _body(body: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    raise TypeError(f"body must be bytes or str, got {type(body).__name__}")


def _keys(keys: list[str] | str | None) -> list[str]:
    if keys is None:
        return []
    if isinstance(keys, str):
        return keys.split()
    return [str(k) for k in keys]


def check_stream_options(linger_ms: float, stream_window: int) -> None:
    """The accumulator's settings: ValueError naming the one to fix."""
    if linger_ms < 0:
        raise ValueError(f"linger_ms must be >= 0 (0 turns the send accumulator off), got {linger_ms}")
    if stream_window < 1:
        raise ValueError(f"stream_window must be >= 1, got {stream_window}")


class Producer:
    """Sends messages. Thread-safe; use one per process and ``close()`` it (or use ``with``).
    asyncio applications use ``AsyncProducer`` (same sends, same outcomes, awaited)."""

    def __init__(self, servers: str | Iterable[str] | None = None, *, timeout: float = 10.0,
                 retry_timeout: float = 15.0, unknown_outcome_retries: int | None = None,
                 linger_ms: float = DEFAULT_LINGER_MS, stream_window: int = DEFAULT_STREAM_WINDOW,
                 security: ClientSecurity | None = None):
        check_stream_options(linger_ms, stream_window)
        if unknown_outcome_retries is not None and unknown_outcome_retries < 0:
            raise ValueError(f"unknown_outcome_retries must be >= 0 or None (until retry_timeout), got "
                             f"{unknown_outcome_retries}")
        self._pool = ServerPool(servers, timeout=timeout, retry_timeout=retry_timeout, security=security)
        # issue 37: a cluster of several groups: one pool per group, from the topic's route (client/routing.py)
        self._router = Router(self._pool, lambda addresses: ServerPool(
            addresses, timeout=timeout, retry_timeout=retry_timeout, security=self._pool.security))
        self._ids = UniqKeyGenerator()
        self.unknown_outcome_retries = unknown_outcome_retries
        # issue 17: sends from all threads share one SendStream (client/accumulator.py); linger_ms=0: unary calls;
        # one stream per group (each to its own leader)
        self._linger_s = linger_ms / 1000.0
        self._window = stream_window
        self._accumulators: dict[str, SendAccumulator] = {}
        self._accumulators_lock = threading.Lock()
        self._closed = False

    @property
    def servers(self) -> list[str]:
        return list(self._pool.addresses)

    @property
    def leader(self) -> str | None:
        """The leader's address as last learned (a redirect hint or a successful write), if any."""
        return self._pool.leader

    def _to_pb(self, topic: str, msg: Message, queue_id: int | None, born_ms: int) -> pb.Message:
        body = _body(msg.body)
        if msg.tags is not None and not isinstance(msg.tags, str):
            raise TypeError(f"tags must be a str, got {type(msg.tags).__name__}")
        for k, v in (msg.properties or {}).items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"property {k!r}: names and values must be str, got {type(v).__name__}")
        m = pb.Message(topic=topic, body=body, tags=msg.tags or "", keys=_keys(msg.keys),
                       properties=dict(msg.properties or {}), born_timestamp=born_ms,
                       uniq_key=self._ids.next(), delay_level=msg.delay_level,
                       message_group=msg.message_group, deliver_at_ms=msg.deliver_at_ms)
        if queue_id is not None:
            m.queue_id = queue_id
        return m

    def _accumulator_for(self, group: str, pool: ServerPool) -> SendAccumulator | None:
        """The send stream to ``group`` ("" : the servers given), made on first use; None with linger_ms=0."""
        if self._linger_s <= 0:
            return None
        with self._accumulators_lock:
            if self._closed:
                raise errors.RaftmqError("producer is closed")
            acc = self._accumulators.get(group)
            if acc is None:
                acc = self._accumulators[group] = SendAccumulator(pool, linger_s=self._linger_s, window=self._window)
            return acc

    def _write(self, call, uniq_keys: list[str], attempts: int = 0, pool: ServerPool | None = None):
        deadline = None if attempts == 0 else time.monotonic() + self._pool.retry_timeout
        while True:
            try:
                response, _ = (pool or self._pool).write(call, uniq_keys=uniq_keys)
                return response
            except errors.UnknownOutcomeError:
                if deadline is None:
                    deadline = time.monotonic() + self._pool.retry_timeout
                if not self._may_resend(attempts, deadline):
                    raise
                attempts += 1

    def _may_resend(self, attempts: int, deadline: float) -> bool:
        """After an unknown outcome: re-send (same UNIQ_KEYs) once more? See the module docstring."""
        if self.unknown_outcome_retries is None:
            return time.monotonic() < deadline
        return attempts < self.unknown_outcome_retries

    def send(self, topic: str, body: bytes | str, *, tags: str | None = None,
             keys: list[str] | str | None = None, properties: Mapping[str, str] | None = None,
             queue_id: int | None = None, delay_level: int = 0, message_group: str = "",
             deliver_at: datetime | int | float | None = None, broker: str | None = None) -> SendResult:
        """Send one message; returns where it was stored once a majority has it.

        ``keys`` (a list, or a space-separated string) are indexed for ``Admin.query_by_key``; ``queue_id``
        unset lets the broker pick a queue. ``delay_level`` N > 0 delivers the message after level N of the
        broker's ``store.message_delay_level`` (a higher level is clamped to the last; ``SendResult.note`` says so).
        ``message_group`` (FIFO) sends every message of the group to one queue, in send order.
        ``deliver_at`` (an aware ``datetime`` or ms since the epoch) makes it a timer message: invisible in its
        topic until then (at most the broker's ``store.timer_max_delay_seconds`` ahead; a past time delivers now).
        In a cluster of several groups (docs/design/scale-out.md) ``broker`` names the group to store it in;
        unset, sends go round robin over the groups that answer, a message group to its one group and queue.
        Raises a subclass of ``RaftmqError``.
        """
        m = self._message(topic, body, tags, keys, properties, queue_id, delay_level, message_group, deliver_at)
        return SendResult.from_pb(self._deliver([m], broker, batch=False)[0])

    def _deliver(self, items: list[pb.Message], broker: str | None, *, batch: bool) -> list[pb.SendResult]:
        """Send ``items`` (one send) to their group: through its stream, else the unary call."""
        placement = self._router.place(items, broker)
        while True:
            pool, group = placement.apply()
            try:
                acc = None if placement.relayed else self._accumulator_for(group, pool)
                results, attempts = self._stream_send(items, acc, pool)
                if results is not None:
                    return results
                if batch:
                    return list(self._send_batch_unary_pb(items, attempts, pool))
                return [self._send_unary_pb(items[0], attempts, pool)]
            except errors.RaftmqError as e:
                if not placement.retry(e):
                    raise placement.named(e) from e

    def _message(self, topic: str, body: bytes | str, tags: str | None, keys: list[str] | str | None,
                 properties: Mapping[str, str] | None, queue_id: int | None, delay_level: int, message_group: str,
                 deliver_at: datetime | int | float | None) -> pb.Message:
        """``send``'s arguments as one message with its UNIQ_KEY (TypeError for a bad one)."""
        msg = Message(body, tags, keys, dict(properties or {}), delay_level, message_group,
                      epoch_ms(deliver_at) if deliver_at is not None else 0)
        return self._to_pb(topic, msg, queue_id, time.time_ns() // 1_000_000)

    def _send_unary_pb(self, m: pb.Message, attempts: int, pool: ServerPool | None = None) -> pb.SendResult:
        req = pb.SendMessageRequest(message=m)  # the unary way (protobuf copies m: built only when needed)
        resp = self._write(lambda s, t: s.messaging.SendMessage(req, timeout=t), [m.uniq_key], attempts, pool)
        return resp.result

    def _stream_usable(self, acc: SendAccumulator | None, pool: ServerPool | None = None) -> bool:
        # while the leader is out of reach, followers forward unary calls to it (a stream is never forwarded)
        return acc is not None and acc.supported and not (pool or self._pool).leader_unreachable

    def _stream_send(self, items: list[pb.Message], acc: SendAccumulator | None,
                     pool: ServerPool) -> tuple[list[pb.SendResult] | None, int]:
        """Through the accumulator when it is on: (results, 0), or (None, attempts used) to send the unary way
        (not stored yet, the broker has no SendStream, or an unknown outcome to resend). Raises what the unary
        call would have raised."""
        if not self._stream_usable(acc, pool):
            return None, 0
        assert acc is not None
        try:
            return acc.send(items, pool.timeout), 0
        except (Resend, errors.UnknownOutcomeError) as e:
            return None, self._attempts_after(e)

    def _attempts_after(self, failure: Resend | errors.UnknownOutcomeError) -> int:
        """A stream send failed: the attempts it used before the unary way takes over, or raise ``failure``."""
        if isinstance(failure, Resend):
            return 0  # definitely not stored: the unary path redirects / backs off / tries other addresses
        if self.unknown_outcome_retries == 0:
            raise failure
        return 1  # the stream attempt counts as the first; resend the same UNIQ_KEYs

    def send_batch(self, topic: str, messages: Iterable[Message | bytes | str], *,
                   queue_id: int | None = None, broker: str | None = None) -> list[SendResult]:
        """Send messages to one queue as one atomic, contiguous batch; results in input order. ``broker``: as
        in ``send``."""
        items = self._batch(topic, messages, queue_id)
        if not items:
            return []
        return [SendResult.from_pb(r) for r in self._deliver(items, broker, batch=True)]

    def _batch(self, topic: str, messages: Iterable[Message | bytes | str], queue_id: int | None) -> list[pb.Message]:
        born = time.time_ns() // 1_000_000
        return [self._to_pb(topic, m if isinstance(m, Message) else Message(m), queue_id, born) for m in messages]

    def _send_batch_unary_pb(self, items: list[pb.Message], attempts: int,
                             pool: ServerPool | None = None) -> list[pb.SendResult]:
        req = pb.SendBatchRequest(messages=items)
        resp = self._write(lambda s, t: s.messaging.SendBatch(req, timeout=t), [m.uniq_key for m in items],
                           attempts, pool)
        return list(resp.results)

    def close(self) -> None:
        with self._accumulators_lock:
            self._closed = True
            accumulators, self._accumulators = list(self._accumulators.values()), {}
        for acc in accumulators:
            acc.close()
        self._router.close()
        self._pool.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
