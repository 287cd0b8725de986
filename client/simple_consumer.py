"""Pop consumption SDK: ``SimpleConsumer`` (receive / ack / nack / change_invisible_duration) and ``PushConsumer``
(a listener returning SUCCESS / FAILURE per message, run by a pool of threads), as RocketMQ 5's clients offer.

The server keeps every decision (which message is invisible until when, delivery attempts, retries, dead letters)
as replicated state on the leader; these classes only carry receipt handles back. A message not acked before its
invisible time ends is delivered again with ``delivery_attempt + 1``; after the group's max attempts it moves to
``%DLQ%<group>``.
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass

import grpc

from raftmq.client import errors
from raftmq.client.connection import ServerPool
from raftmq.client.routing import Router
from raftmq.client.security import ClientSecurity
from raftmq.client.tags import format_tag_expression
from raftmq.client.types import MessageView, SendResult
from raftmq.v1 import raftmq_pb2 as pb

log = logging.getLogger(__name__)


class StaleReceiptHandleError(errors.RaftmqError):
    """The handle no longer names a pending delivery (already acked, redelivered, changed or expired)."""

    exit_code = 1


@dataclass(frozen=True)
class ReceivedMessage:
    """A received message and what acking it needs."""

    message: MessageView
    receipt_handle: str
    delivery_attempt: int
    invisible_until: int  # ms since the epoch
    message_group: str = ""
    broker: str = ""  # the group that handed it out (a cluster of several groups): acks go there

    @classmethod
    def from_pb(cls, r: pb.ReceivedMessage) -> ReceivedMessage:
        return cls(MessageView.from_pb(r.message, r.broker), r.receipt_handle, r.delivery_attempt,
                   r.invisible_until, r.message_group, r.broker)

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def text(self) -> str:
        return self.message.text


def _stale_or_raise(e: errors.RaftmqError) -> None:
    if e.code == grpc.StatusCode.FAILED_PRECONDITION and "receipt handle" in e.message:
        raise StaleReceiptHandleError(e.message, address=e.address, code=e.code) from None
    raise e


class SimpleConsumer:
    """Receive messages of ``topic`` for ``group`` with an invisible duration, then ack each one.

    ``tags`` is a tag expression ("*", "A || B"), ``sql`` a SQL92 filter on properties; ``fifo`` makes the group
    FIFO (a message group's next message only after the previous one was acked or dead-lettered; every consumer
    of the group must set it). ``await_duration`` is how long one ``receive`` waits at the server when nothing is
    visible.

    In a cluster of several groups (docs/design/scale-out.md#consumers) each group hands out its own queues'
    messages: ``receive`` looks at every group without waiting, then long-polls one group at a time, in turn, as
    the official RocketMQ 5 clients go round their route's brokers; an ack goes to the group that handed the
    message out. A group that does not answer is skipped while others do."""

    def __init__(self, group: str, topic: str, servers: str | Iterable[str] | None = None, *,
                 tags: str | Iterable[str] | None = None, sql: str = "", fifo: bool = False,
                 await_duration: float = 5.0, timeout: float = 10.0, retry_timeout: float = 15.0,
                 security: ClientSecurity | None = None):
        if not group.strip() or not topic.strip():
            raise errors.InvalidArgumentError("group and topic must not be empty")
        if await_duration < 0:
            raise errors.InvalidArgumentError(f"await_duration must be >= 0, got {await_duration}")
        self.group = group
        self.topic = topic
        self.tag_expression = format_tag_expression(tags)
        self.sql = sql
        self.fifo = fifo
        self.await_duration = await_duration
        self._pool = ServerPool(servers, timeout=timeout, retry_timeout=retry_timeout, security=security)
        self._router = Router(self._pool, lambda addresses: ServerPool(
            addresses, timeout=timeout, retry_timeout=retry_timeout, security=self._pool.security))
        self._next_group = 0

    def _pool_of(self, broker: str) -> ServerPool:
        """The servers of group ``broker``: those given in a one-group cluster (whatever its name)."""
        if not broker or self._router.route(self.topic) is None:
            return self._pool
        return self._router.pool(broker)

    def receive(self, max_messages: int = 32, invisible_duration: float = 30.0) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages, each invisible to the group for ``invisible_duration`` seconds."""
        route = self._router.route(self.topic)
        if route is None:
            return self._receive_from("", max_messages, invisible_duration, self.await_duration)
        names = route.names
        failures: list[errors.RaftmqError] = []
        for i in range(len(names)):  # what any group has now
            broker = names[(self._next_group + i) % len(names)]
            try:
                got = self._receive_from(broker, max_messages, invisible_duration, 0.0)
            except (errors.UnavailableError, errors.NotFoundError) as e:  # that group only: the others go on
                failures.append(e)
                continue
            if got:
                self._next_group = (self._next_group + i + 1) % len(names)
                return got
        if len(failures) == len(names):
            raise failures[0]
        broker = names[self._next_group % len(names)]  # nothing anywhere: wait on one group, in turn
        self._next_group = (self._next_group + 1) % len(names)
        try:
            return self._receive_from(broker, max_messages, invisible_duration, self.await_duration / len(names))
        except (errors.UnavailableError, errors.NotFoundError):
            return []

    def _receive_from(self, broker: str, max_messages: int, invisible_duration: float,
                      wait: float) -> list[ReceivedMessage]:
        req = pb.ReceiveMessageRequest(group=self.group, topic=self.topic, tag_expression=self.tag_expression,
                                       sql_expression=self.sql, max_messages=max_messages,
                                       invisible_duration_ms=int(invisible_duration * 1000),
                                       long_poll_timeout_ms=int(wait * 1000), fifo=self.fifo, broker=broker)
        pool = self._pool_of(broker)
        timeout = pool.timeout + wait
        try:
            resp, _ = pool.write(lambda s, t: s.messaging.ReceiveMessage(req, timeout=t), timeout=timeout)
        except errors.UnknownOutcomeError:
            return []  # whatever was handed out is invisible for a while and then comes back: nothing is lost
        return [ReceivedMessage.from_pb(r) for r in resp.messages]

    def ack(self, messages: ReceivedMessage | Iterable[ReceivedMessage]) -> None:
        """Ack one message or a batch (one replicated command). Raises StaleReceiptHandleError naming the
        handles that were no longer valid (the others are acked)."""
        batch = [messages] if isinstance(messages, ReceivedMessage) else list(messages)
        if not batch:
            return
        by_group: dict[str, list[ReceivedMessage]] = {}
        for m in batch:  # each group acks what it handed out
            by_group.setdefault(m.broker, []).append(m)
        failed = []
        for broker, mine in by_group.items():
            req = pb.AckMessageRequest(group=self.group, topic=self.topic, broker=broker,
                                       receipt_handles=[m.receipt_handle for m in mine])
            try:
                resp, _ = self._pool_of(broker).write(lambda s, t, r=req: s.messaging.AckMessage(r, timeout=t),
                                                      idempotent=True)
            except errors.RaftmqError as e:
                _stale_or_raise(e)
            failed += [(m, r.error) for m, r in zip(mine, resp.results, strict=True) if not r.ok]
        if failed:
            m, why = failed[0]
            raise StaleReceiptHandleError(f"{len(failed)} of {len(batch)} ack(s) refused; first: message "
                                          f"{m.message.uniq_key or m.message.msg_id}: {why}")

    def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> ReceivedMessage:
        """Move the message's deadline to now + ``seconds``; returns it with its new receipt handle (the old one
        is stale from now on). ``seconds == 0`` is a nack (see ``nack``)."""
        req = pb.ChangeInvisibleDurationRequest(group=self.group, topic=self.topic,
                                                receipt_handle=message.receipt_handle,
                                                invisible_duration_ms=int(seconds * 1000), broker=message.broker)
        try:
            resp, _ = self._pool_of(message.broker).write(
                lambda s, t: s.messaging.ChangeInvisibleDuration(req, timeout=t))
        except errors.RaftmqError as e:
            _stale_or_raise(e)
        return ReceivedMessage(message.message, resp.receipt_handle, message.delivery_attempt,
                               resp.invisible_until, message.message_group, message.broker)

    def nack(self, message: ReceivedMessage) -> ReceivedMessage:
        """Give the message back: visible again after the group's retry back-off for its delivery attempt."""
        return self.change_invisible_duration(message, 0)

    def forward_to_dead_letter_queue(self, message: ReceivedMessage) -> SendResult:
        """Give up on the message now: it moves to %DLQ%<group> and counts as consumed."""
        req = pb.ForwardToDeadLetterQueueRequest(group=self.group, topic=self.topic,
                                                 receipt_handle=message.receipt_handle, broker=message.broker)
        try:
            resp, _ = self._pool_of(message.broker).write(
                lambda s, t: s.messaging.ForwardToDeadLetterQueue(req, timeout=t))
        except errors.RaftmqError as e:
            _stale_or_raise(e)
        return SendResult.from_pb(resp.result)

    def close(self) -> None:
        self._router.close()
        self._pool.close()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ConsumeResult(enum.Enum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


Listener = Callable[[ReceivedMessage], ConsumeResult]
KEPT_ERRORS = 100  # a push consumer's ``errors`` keeps the last ones: a long outage must not grow its memory
MAX_RECEIVE_BACKOFF_S = 5.0  # a push consumer retries a failed receive after 0.5 s, doubling up to this


class _Running:
    """A message whose listener runs: its latest receipt handle (the renewer replaces it), and a lock that keeps
    a renewal and the listener's ack or nack apart (each would otherwise invalidate the other's handle)."""

    def __init__(self, handle: ReceivedMessage):
        self.handle = handle
        self.lock = threading.Lock()
        self.finished = False


class PushConsumer:
    """Runs ``listener`` on every message with ``concurrency`` threads: SUCCESS acks, FAILURE (or an exception)
    nacks, so the message comes back after the group's retry back-off and moves to the DLQ after max attempts.

    While a listener runs, its message's invisible time is extended before it ends, so a slow listener is not
    raced by a redelivery. ``shutdown()`` stops receiving, lets messages already handed to the listener finish and ack them, and gives
    back (nacks) those received but not started, so nothing waits out a full invisible time."""

    def __init__(self, group: str, topic: str, listener: Listener, servers: str | Iterable[str] | None = None, *,
                 concurrency: int = 4, tags: str | Iterable[str] | None = None, sql: str = "", fifo: bool = False,
                 invisible_duration: float = 30.0, batch_size: int = 16, await_duration: float = 2.0,
                 timeout: float = 10.0, retry_timeout: float = 15.0, security: ClientSecurity | None = None):
        if concurrency <= 0:
            raise errors.InvalidArgumentError(f"concurrency must be positive, got {concurrency}")
        self.listener = listener
        self.concurrency = concurrency
        self.invisible_duration = invisible_duration
        self.batch_size = batch_size
        self._consumer = SimpleConsumer(group, topic, servers, tags=tags, sql=sql, fifo=fifo,
                                        await_duration=await_duration, timeout=timeout, retry_timeout=retry_timeout,
                                        security=security)
        self._workers = futures.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="raftmq-push")
        self._slots = threading.Semaphore(concurrency)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running: dict[int, _Running] = {}  # messages whose listener runs, with their latest handle
        self._running_lock = threading.Lock()
        self._renew_stop = threading.Event()
        self._renewer: threading.Thread | None = None
        # the last receive / ack / renewal failures (the consumer keeps going)
        self.errors: collections.deque[BaseException] = collections.deque(maxlen=KEPT_ERRORS)

    def start(self) -> PushConsumer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="raftmq-push-receive", daemon=True)
            self._thread.start()
            self._renewer = threading.Thread(target=self._renew_loop, name="raftmq-push-renew", daemon=True)
            self._renewer.start()
        return self

    def _loop(self) -> None:
        backoff = 0.0  # after a failed receive: 0.5 s, doubling up to MAX_RECEIVE_BACKOFF_S
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.5):
                continue
            free = 1
            while free < min(self.batch_size, self.concurrency) and self._slots.acquire(blocking=False):
                free += 1
            if self._stop.is_set():
                for _ in range(free):
                    self._slots.release()
                break
            try:
                got = self._consumer.receive(free, self.invisible_duration)
                backoff = 0.0
            except errors.RaftmqError as e:
                self._note("receive", e)
                got = []
                backoff = min(MAX_RECEIVE_BACKOFF_S, max(0.5, backoff * 2))
                self._stop.wait(backoff)
            for _ in range(free - len(got)):
                self._slots.release()
            for m in got:
                if self._stop.is_set():
                    self._give_back(m)
                    self._slots.release()
                    continue
                self._workers.submit(self._consume, m)

    def _consume(self, m: ReceivedMessage) -> None:
        key = id(m)
        running = _Running(m)
        with self._running_lock:
            self._running[key] = running
        try:
            try:
                result = self.listener(m)
            except Exception:  # noqa: BLE001 - a listener exception is a FAILURE, as in RocketMQ
                log.exception("listener failed on message %s", m.message.msg_id)
                result = ConsumeResult.FAILURE
            with running.lock:  # a renewal in progress finishes first; none starts after this
                running.finished = True
                m = running.handle  # the latest handle, if the renewer extended it meanwhile
            if result == ConsumeResult.SUCCESS:
                try:
                    self._consumer.ack(m)
                except errors.RaftmqError as e:
                    self._note("ack", e)
            else:
                self._give_back(m)
        finally:
            with self._running_lock:
                self._running.pop(key, None)
            self._slots.release()

    def _renew_loop(self) -> None:
        """Keep messages invisible while their listener runs (RocketMQ 5's auto-renew): a third of the invisible
        duration before the deadline, extend it by a whole one."""
        while not self._renew_stop.wait(min(1.0, self.invisible_duration / 6)):
            now_ms = time.time() * 1000
            with self._running_lock:
                due = [r for r in self._running.values()
                       if r.handle.invisible_until - now_ms < self.invisible_duration * 1000 / 3]
            for r in due:
                with r.lock:  # never while its listener's ack or nack is under way: that would use a stale handle
                    if r.finished:
                        continue
                    try:
                        r.handle = self._consumer.change_invisible_duration(r.handle, self.invisible_duration)
                    except errors.RaftmqError as e:
                        self._note("renewal", e)

    def _give_back(self, m: ReceivedMessage) -> None:
        try:
            self._consumer.nack(m)
        except errors.RaftmqError as e:
            self._note("nack", e)

    def _note(self, what: str, e: errors.RaftmqError) -> None:
        self.errors.append(e)
        log.warning("%s failed for group %s on topic %s: %s", what, self._consumer.group, self._consumer.topic, e)

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop receiving, finish the messages in progress (acking or nacking them), then close."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._workers.shutdown(wait=True)
        self._renew_stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout)
        self._consumer.close()

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

