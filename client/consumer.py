"""The pull consumer: pulls every queue of a topic, tracks positions and commits the group's offsets.

Delivery is at-least-once. A message counts as consumed once it has been handed out (returned by ``poll``,
``receive`` or the iterator). Offsets of consumed messages are committed by ``commit()``, by auto-commit at the
next ``poll``/``receive`` once ``auto_commit_interval`` has passed (so the previous batch has been processed),
and on ``close()``. After a crash the group resumes from its last committed offsets, so messages consumed since
that commit are delivered again; a consumer that must not process a message twice drops UNIQ_KEYs it has seen.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent import futures

from raftmq.v1 import raftmq_pb2 as pb

from client import errors
from client.connection import ServerPool
from client.tags import format_tag_expression
from client.types import MessageView

log = logging.getLogger(__name__)

START_FIRST = "first"
START_LAST = "last"
_MOVED = {pb.OFFSET_TOO_SMALL: "too small (removed by retention)", pb.OFFSET_OVERFLOW: "beyond the queue end",
          pb.OFFSET_MOVED: "moved"}


class _Delivery:
    """A pulled message and the queue position to commit once it has been handed out."""

    __slots__ = ("message", "after")

    def __init__(self, message: MessageView, after: int):
        self.message = message
        self.after = after


class PullConsumer:
    """Consumes one topic for a consumer group.

    ``start_from`` applies to queues the group never committed: ``"last"`` (only messages stored from now on,
    RocketMQ's CONSUME_FROM_LAST_OFFSET), ``"first"`` (everything still stored) or an epoch-millisecond
    timestamp. ``tags`` is a tag expression ("*", "A || B") or a list of tags. ``long_poll`` is how long one
    pull waits at the server for new messages. ``from_leader`` reads only from the leader (no staleness).
    """

    def __init__(self, group: str, topic: str, servers: str | Iterable[str] | None = None, *,
                 tags: str | Iterable[str] | None = None, start_from: str | int = START_LAST,
                 auto_commit: bool = True, auto_commit_interval: float = 5.0, batch_size: int = 32,
                 long_poll: float = 2.0, from_leader: bool = False, timeout: float = 10.0,
                 retry_timeout: float = 15.0, queue_refresh_interval: float = 30.0):
        if not group.strip():
            raise errors.InvalidArgumentError("consumer group must not be empty")
        if not topic.strip():
            raise errors.InvalidArgumentError("topic must not be empty")
        if isinstance(start_from, str) and start_from not in (START_FIRST, START_LAST):
            raise errors.InvalidArgumentError(
                f"bad start_from {start_from!r}: use 'first', 'last' or an epoch-millisecond timestamp")
        if batch_size <= 0:
            raise errors.InvalidArgumentError(f"batch_size must be positive, got {batch_size}")
        self.group = group
        self.topic = topic
        self.tag_expression = format_tag_expression(tags)
        self.start_from = start_from
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.batch_size = batch_size
        self.long_poll = long_poll
        self.from_leader = from_leader
        self.queue_refresh_interval = queue_refresh_interval
        self._pool = ServerPool(servers, timeout=timeout, retry_timeout=retry_timeout)
        self._lock = threading.Lock()
        self._fetch_pos: dict[int, int] = {}
        self._consumed: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        self._buffer: collections.deque[_Delivery] = collections.deque()
        self._inflight: dict[int, futures.Future] = {}
        self._executor = futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="raftmq-pull")
        self._started = False
        self._closed = False
        self._last_commit = time.monotonic()
        self._last_refresh = 0.0

    # ------------------------------------------------------------------ positions

    def start(self) -> None:
        """Look up the queues and the group's committed offsets now (else the first poll does it); raises
        ``TopicNotFoundError`` for an unknown topic."""
        self._check_open()
        if not self._started:
            self._start()

    def _start(self) -> None:
        committed = self._fetch_committed()
        self._committed = dict(committed)
        self._refresh_queues(committed, initial=True)
        self._started = True

    def _fetch_committed(self) -> dict[int, int]:
        req = pb.FetchOffsetRequest(group=self.group, topic=self.topic)
        resp, _ = self._pool.read(lambda s, t: s.messaging.FetchOffset(req, timeout=t))
        return dict(resp.offsets)

    def _refresh_queues(self, committed: dict[int, int], *, initial: bool) -> None:
        req = pb.GetQueueOffsetsRequest(topic=self.topic)
        resp, _ = self._pool.read(lambda s, t: s.messaging.GetQueueOffsets(req, timeout=t))
        present = {q.queue_id for q in resp.queues}
        for q in [q for q in self._fetch_pos if q not in present]:
            self._drop_queue(q, "no longer a read queue of the topic")
        for q in resp.queues:
            if q.queue_id in self._fetch_pos:
                continue
            if q.queue_id in committed:
                pos = committed[q.queue_id]
            elif initial and self.start_from == START_LAST:
                pos = q.max_offset
            elif initial and isinstance(self.start_from, int):
                sreq = pb.SearchOffsetRequest(topic=self.topic, queue_id=q.queue_id, timestamp=self.start_from)
                pos = self._pool.read(lambda s, t, r=sreq: s.messaging.SearchOffset(r, timeout=t))[0].offset
            else:  # "first", or a queue that appeared after we started: all of it is new to us
                pos = q.min_offset
            self._fetch_pos[q.queue_id] = pos
            self._consumed.setdefault(q.queue_id, pos)
        self._last_refresh = time.monotonic()

    def positions(self) -> dict[int, int]:
        """Per queue, the next offset this consumer will hand out (consumed up to here)."""
        with self._lock:
            return dict(self._consumed)

    def seek(self, queue_id: int, offset: int) -> None:
        """Continue queue ``queue_id`` at ``offset`` (buffered messages of that queue are dropped)."""
        if not self._started:
            self._start()
        with self._lock:
            if queue_id not in self._fetch_pos:
                raise errors.NotFoundError(f"topic {self.topic!r} has no queue {queue_id}")
            self._buffer = collections.deque(d for d in self._buffer if d.message.queue_id != queue_id)
            fut = self._inflight.pop(queue_id, None)
            if fut is not None:
                fut.cancel()
            self._fetch_pos[queue_id] = offset
            self._consumed[queue_id] = offset

    # ------------------------------------------------------------------ pulling

    def _pull(self, queue_id: int, offset: int) -> pb.PullMessageResponse:
        req = pb.PullMessageRequest(topic=self.topic, queue_id=queue_id, offset=offset,
                                    max_count=self.batch_size, tag_expression=self.tag_expression,
                                    long_poll_timeout_ms=int(self.long_poll * 1000),
                                    consumer_group=self.group, from_leader=self.from_leader)
        timeout = self._pool.timeout + self.long_poll

        def call(s, t):
            return s.messaging.PullMessage(req, timeout=t)

        if self.from_leader:
            return self._pool.write(call, idempotent=True, timeout=timeout)[0]
        return self._pool.read(call, timeout=timeout)[0]

    def _fill(self, timeout: float) -> None:
        """Pull every queue concurrently (long polls stay in flight across calls) until something arrives or
        ``timeout`` passes; completed pulls land in the buffer."""
        if not self._started:
            self._start()
        elif time.monotonic() - self._last_refresh > self.queue_refresh_interval:
            self._refresh_queues({}, initial=False)
        for q, pos in self._fetch_pos.items():
            if q not in self._inflight:
                self._inflight[q] = self._executor.submit(self._pull, q, pos)
        done, _ = futures.wait(list(self._inflight.values()), timeout=max(timeout, 0.0),
                               return_when=futures.FIRST_COMPLETED)
        if not done:
            return
        for q in sorted(self._inflight):
            fut = self._inflight[q]
            if not fut.done():
                continue
            del self._inflight[q]
            try:
                resp = fut.result()
            except errors.NotFoundError as exc:
                if isinstance(exc, errors.TopicNotFoundError):
                    raise
                self._drop_queue(q, exc)
                continue
            self._apply(q, resp)

    def _drop_queue(self, queue_id: int, why: object) -> None:
        """The topic's read queues shrank (topic update): stop pulling and committing that queue."""
        log.warning("topic %s: dropping queue %d: %s", self.topic, queue_id, why)
        self._fetch_pos.pop(queue_id, None)
        self._inflight.pop(queue_id, None)  # a pull still running is left to finish; its answer is ignored
        self._buffer = collections.deque(d for d in self._buffer if d.message.queue_id != queue_id)
        with self._lock:
            self._consumed.pop(queue_id, None)
            self._committed.pop(queue_id, None)

    def _apply(self, queue_id: int, resp: pb.PullMessageResponse) -> None:
        if resp.status == pb.FOUND and resp.messages:
            msgs = [MessageView.from_pb(m) for m in resp.messages]
            for m in msgs[:-1]:
                self._buffer.append(_Delivery(m, m.queue_offset + 1))
            last = msgs[-1]
            self._buffer.append(_Delivery(last, max(resp.next_offset, last.queue_offset + 1)))
            self._fetch_pos[queue_id] = max(resp.next_offset, last.queue_offset + 1)
            return
        if resp.status in _MOVED:
            log.warning("topic %s queue %d: offset %d is %s; continuing at %d", self.topic, queue_id,
                        self._fetch_pos[queue_id], _MOVED[resp.status], resp.next_offset)
        elif resp.status not in (pb.NO_NEW_MSG, pb.NO_MATCHED_MSG, pb.FOUND):
            return
        nxt = resp.next_offset
        self._fetch_pos[queue_id] = nxt
        pending = [d for d in self._buffer if d.message.queue_id == queue_id]
        with self._lock:
            if pending:
                pending[-1].after = max(pending[-1].after, nxt)
            elif nxt != self._consumed.get(queue_id):
                self._consumed[queue_id] = nxt

    def _hand_out(self, delivery: _Delivery) -> MessageView:
        with self._lock:
            self._consumed[delivery.message.queue_id] = delivery.after
        return delivery.message

    def _maybe_auto_commit(self) -> None:
        if self.auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval:
            self.commit()

    def poll(self, timeout: float = 1.0) -> list[MessageView]:
        """Every message available within ``timeout`` seconds (possibly none), across all queues."""
        self._check_open()
        self._maybe_auto_commit()
        if not self._buffer:
            self._fill(timeout)
        out = []
        while self._buffer:
            out.append(self._hand_out(self._buffer.popleft()))
        return out

    def receive(self, timeout: float = 1.0) -> MessageView | None:
        """The next message, or None if none arrives within ``timeout`` seconds."""
        self._check_open()
        self._maybe_auto_commit()
        deadline = time.monotonic() + timeout
        while not self._buffer:
            remaining = deadline - time.monotonic()
            self._fill(remaining)
            if not self._buffer and time.monotonic() >= deadline:
                return None
        return self._hand_out(self._buffer.popleft())

    def __iter__(self) -> Iterator[MessageView]:
        """Messages as they arrive, forever (until ``close()`` or ``break``)."""
        while not self._closed:
            msg = self.receive(timeout=self.long_poll)
            if msg is not None:
                yield msg

    # ------------------------------------------------------------------ offsets

    def commit(self) -> None:
        """Commit the offsets of every message handed out so far (for the group, replicated)."""
        with self._lock:
            changed = {q: o for q, o in self._consumed.items() if self._committed.get(q) != o}
        self._last_commit = time.monotonic()
        if not changed:
            return
        try:
            self._commit(changed)
        except errors.NotFoundError as exc:
            if isinstance(exc, errors.TopicNotFoundError):
                raise
            self._refresh_queues({}, initial=False)  # a queue went away: drop it and commit the rest
            changed = {q: o for q, o in changed.items() if q in self._fetch_pos}
            if changed:
                self._commit(changed)
        with self._lock:
            self._committed.update(changed)

    def _commit(self, offsets: dict[int, int]) -> None:
        req = pb.CommitOffsetRequest(group=self.group, topic=self.topic, offsets=offsets)
        self._pool.write(lambda s, t: s.messaging.CommitOffset(req, timeout=t), idempotent=True)

    def _check_open(self) -> None:
        if self._closed:
            raise errors.RaftmqError("consumer is closed")

    def close(self) -> None:
        """Commit (when auto-commit is on) and release connections. Pending long polls are abandoned."""
        if self._closed:
            return
        try:
            if self.auto_commit and self._started:
                self.commit()
        finally:
            self._closed = True
            for fut in self._inflight.values():
                fut.cancel()
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._pool.close()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
