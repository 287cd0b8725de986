"""The pull consumer: pulls its share of a topic's queues, tracks positions and commits the group's offsets.

Clustering consumption (RocketMQ's RebalanceImpl): every consumer heartbeats to the leader, which answers with
the group's live members for the topic; each consumer takes its share of the read queues with
AllocateMessageQueueAveragely over the sorted member ids, again whenever the membership or the queue count
changes. A lone consumer owns every queue. A queue leaving this consumer is dropped (buffered messages of it are
discarded) and its consumed offset committed at once, so its new owner resumes where this one stopped; ``close()``
commits and unregisters so the others take over without waiting for the expiry (3 heartbeat intervals).

Delivery is at-least-once. A message counts as consumed once it has been handed out (returned by ``poll``,
``receive`` or the iterator). Offsets of consumed messages are committed by ``commit()``, by auto-commit at the
next ``poll``/``receive`` once ``auto_commit_interval`` has passed (so the previous batch has been processed),
and on ``close()``. After a crash the group resumes from its last committed offsets, so messages consumed since
that commit are delivered again; a consumer that must not process a message twice drops UNIQ_KEYs it has seen.
Around a rebalance two consumers may briefly read the same queue (until both have seen the new membership) and a
message handed out but not yet committed by the old owner is delivered again by the new one: duplicates, never a
loss (an offset is only committed for messages that were handed out).
"""

from __future__ import annotations

import collections
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures

import grpc

from raftmq.client import errors
from raftmq.client.connection import ServerPool
from raftmq.client.consumer_group import allocate_averagely
from raftmq.client.pull_stream import QueueStream
from raftmq.client.routing import Route, Router
from raftmq.client.security import ClientSecurity
from raftmq.client.tags import format_tag_expression
from raftmq.client.types import MessageView, SendResult
from raftmq.v1 import raftmq_pb2 as pb

log = logging.getLogger(__name__)

LANE_SLICE_S = 0.05  # in a cluster of several groups, a poll waits on one group's queues this long at a time
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
    """Consumes one topic for a consumer group, sharing its queues with the group's other live consumers.

    ``start_from`` applies to queues the group never committed: ``"last"`` (only messages stored from now on,
    RocketMQ's CONSUME_FROM_LAST_OFFSET), ``"first"`` (everything still stored) or an epoch-millisecond
    timestamp. ``tags`` is a tag expression ("*", "A || B") or a list of tags. ``long_poll`` is how long one
    pull waits at the server for new messages. ``from_leader`` reads only from the leader (no staleness).
    ``heartbeat_interval`` is how often this consumer tells the leader it is alive (the leader drops it after 3
    intervals without one); ``client_id`` names this instance in the group (default ``host@pid@random``).
    ``sql`` is a SQL92 filter on message properties (RocketMQ's grammar, e.g. ``a > 5 AND TAGS IN ('A')``).
    ``streaming`` (default on) keeps every owned queue flowing on one server stream instead of one long-poll
    pull per queue and batch (``from_leader`` consumers, and servers without streams, pull).

    In a cluster of several groups (docs/design/scale-out.md#consumers) the group's consumers share the union of
    every group's queues: this consumer reads its share in each group through a *lane*, a consumer of that
    group's queues (``broker``) whose allocation is its part of the union (``allocate``); offsets are committed
    in each queue's own group. ``broker`` alone reads only that group's queues; ``allocate(queue_ids, members,
    client_id)`` replaces RocketMQ's AllocateMessageQueueAveragely.
    """

    def __init__(self, group: str, topic: str, servers: str | Iterable[str] | None = None, *,
                 tags: str | Iterable[str] | None = None, start_from: str | int = START_LAST,
                 auto_commit: bool = True, auto_commit_interval: float = 5.0, batch_size: int = 32,
                 long_poll: float = 2.0, from_leader: bool = False, timeout: float = 10.0,
                 retry_timeout: float = 15.0, queue_refresh_interval: float = 30.0,
                 heartbeat_interval: float = 5.0, client_id: str | None = None, sql: str = "",
                 security: ClientSecurity | None = None, streaming: bool = True, broker: str = "",
                 allocate: Callable[[list[int], list[str], str], list[int]] | None = None):
        if not group.strip():
            raise errors.InvalidArgumentError("consumer group must not be empty")
        if not topic.strip():
            raise errors.InvalidArgumentError("topic must not be empty")
        if isinstance(start_from, str) and start_from not in (START_FIRST, START_LAST):
            raise errors.InvalidArgumentError(
                f"bad start_from {start_from!r}: use 'first', 'last' or an epoch-millisecond timestamp")
        if batch_size <= 0:
            raise errors.InvalidArgumentError(f"batch_size must be positive, got {batch_size}")
        if heartbeat_interval <= 0:
            raise errors.InvalidArgumentError(f"heartbeat_interval must be positive, got {heartbeat_interval}")
        if client_id is not None and not client_id.strip():
            raise errors.InvalidArgumentError("client_id must not be empty (leave it unset for host@pid@random)")
        self.group = group
        self.topic = topic
        self.client_id = client_id or f"{socket.gethostname()}@{os.getpid()}@{secrets.token_hex(4)}"
        self.tag_expression = format_tag_expression(tags)
        self.sql_expression = sql  # SQL92 property filter, checked by the server (INVALID_ARGUMENT + position)
        self.start_from = start_from
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.batch_size = batch_size
        self.long_poll = long_poll
        self.from_leader = from_leader
        self.queue_refresh_interval = queue_refresh_interval
        self.heartbeat_interval = heartbeat_interval
        self.broker = broker
        self._allocate = allocate or allocate_averagely
        self._pool = ServerPool(servers, timeout=timeout, retry_timeout=retry_timeout, security=security)
        self._settings = {"tags": tags, "start_from": start_from, "auto_commit": auto_commit,
                          "auto_commit_interval": auto_commit_interval, "batch_size": batch_size,
                          "long_poll": long_poll, "from_leader": from_leader, "timeout": timeout,
                          "retry_timeout": retry_timeout, "queue_refresh_interval": queue_refresh_interval,
                          "heartbeat_interval": heartbeat_interval, "client_id": self.client_id, "sql": sql,
                          "security": self._pool.security, "streaming": streaming}
        self._lanes: list[PullConsumer] | None = None  # one per group, in a cluster of several (then no queue here)
        self._route: Route | None = None
        self._next_lane = 0
        self._router: Router | None = None
        # _lock guards every position, the buffer and the in-flight pulls (the heartbeat thread revokes queues);
        # it is never held across an RPC or a wait. _rebalance_lock runs one rebalance at a time.
        self._lock = threading.RLock()
        self._rebalance_lock = threading.Lock()
        self._fetch_pos: dict[int, int] = {}  # the queues this consumer owns -> next offset to pull
        self._consumed: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        self._buffer: collections.deque[_Delivery] = collections.deque()
        self._inflight: dict[int, futures.Future] = {}
        self._queue_ids: list[int] = []  # the topic's read queues, as last seen
        self._members: list[str] = []  # the group's live members for the topic, as the leader last said
        self._grouped = True  # False against a server without ConsumerHeartbeat: this consumer takes every queue
        self._executor = futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="raftmq-pull")
        # streaming: one QueueStream over the owned queues at their positions; replaced whenever those change
        # other than by its own responses (rebalance, seek), so it never delivers for a position we left
        self._streaming = streaming and not from_leader
        self._stream: QueueStream | None = None
        self._stream_error: errors.RaftmqError | None = None
        self._arrived = threading.Condition(self._lock)
        self._heartbeats: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = False
        self._closed = False
        self._last_commit = time.monotonic()
        self._last_refresh = 0.0

    # ------------------------------------------------------------------ membership and queues

    def start(self) -> None:
        """Join the group, look up the queues and take this consumer's share now (else the first poll does it);
        raises ``TopicNotFoundError`` for an unknown topic."""
        self._check_open()
        if not self._started:
            self._start()

    def _start(self) -> None:
        if not self.broker and self._lanes is None:
            self._router = Router(self._pool, lambda addresses: self._pool)  # only its routes are used
            route = self._router.route(self.topic)
            if route is not None:
                self._start_lanes(route)
                return
        self._heartbeat()
        self._refresh_queues(initial=True)
        self._started = True
        if self._grouped:
            self._heartbeats = threading.Thread(target=self._heartbeat_loop, name="raftmq-heartbeat", daemon=True)
            self._heartbeats.start()

    def _start_lanes(self, route: Route) -> None:
        """A cluster of several groups: one lane per group, each allocating its share of the union."""
        self._route = route
        self._lanes = [PullConsumer(self.group, self.topic, list(g.endpoints), broker=g.name,
                                    allocate=self._union_share(g.name), **self._settings) for g in route.groups]
        self._started = True
        for lane in self._lanes:
            lane.start()

    def _union_share(self, broker: str) -> Callable[[list[int], list[str], str], list[int]]:
        """The part of group ``broker``'s queues this consumer owns, allocated over the union of every group's
        queues sorted as RocketMQ sorts MessageQueues (group name, then queue id)."""

        def share(queue_ids: list[int], members: list[str], client_id: str) -> list[int]:
            route = self._route
            assert route is not None
            union = sorted([(broker, q) for q in queue_ids]
                           + [(g.name, q) for g in route.groups if g.name != broker for q in range(g.read_queue_nums)])
            mine = allocate_averagely(list(range(len(union))), members, client_id)
            return [union[i][1] for i in mine if union[i][0] == broker]

        return share

    def _heartbeat(self) -> bool:
        """Tell the leader we are alive; True when the membership (or the queue count) changed."""
        if not self._grouped:
            return False
        req = pb.ConsumerHeartbeatRequest(group=self.group, topic=self.topic, client_id=self.client_id,
                                          heartbeat_interval_ms=int(self.heartbeat_interval * 1000))
        try:
            resp, _ = self._pool.write(lambda s, t: s.messaging.ConsumerHeartbeat(req, timeout=t), idempotent=True)
        except errors.RaftmqError as exc:
            if exc.code != grpc.StatusCode.UNIMPLEMENTED:
                raise
            log.warning("the server does not know consumer groups (ConsumerHeartbeat unimplemented): this "
                        "consumer reads every queue of %s", self.topic)
            self._grouped = False
            self._members = [self.client_id]
            return True
        members = sorted(resp.client_ids)
        changed = members != self._members or resp.read_queue_nums != len(self._queue_ids)
        self._members = members
        return changed

    def _heartbeat_loop(self) -> None:
        """Every ``heartbeat_interval``: heartbeat, and rebalance when the group or the topic changed."""
        due = False  # a change seen whose rebalance has not succeeded yet
        while not self._stop.wait(self.heartbeat_interval):
            try:
                due = self._heartbeat() or due
                if due:
                    self._refresh_queues(initial=False)
                    due = False
            except errors.RaftmqError as exc:  # no leader for a while, topic deleted...: keep the allocation
                if not self._stop.is_set():
                    log.warning("group %s: heartbeat/rebalance failed (keeping the current queues): %s",
                                self.group, exc)
            except Exception:  # a bug must not silently stop the heartbeats (the group would drop us)
                log.exception("group %s: heartbeat loop error", self.group)

    def _refresh_queues(self, *, initial: bool) -> None:
        """Look up the topic's read queues and rebalance: drop the queues that are no longer ours (committing them
        first), take the new ones at the group's committed offset."""
        with self._rebalance_lock:
            req = pb.GetQueueOffsetsRequest(topic=self.topic, broker=self.broker)
            resp, _ = self._pool.read(lambda s, t: s.messaging.GetQueueOffsets(req, timeout=t))
            previous = set(self._queue_ids)
            self._queue_ids = sorted(q.queue_id for q in resp.queues)
            members = self._members if self.client_id in self._members else sorted([*self._members, self.client_id])
            mine = set(self._allocate(self._queue_ids, members, self.client_id))
            with self._lock:
                owned = set(self._fetch_pos)
            present = set(self._queue_ids)
            for q in sorted(owned - mine - present):
                self._drop_queue(q, "no longer a read queue of the topic")
            if (owned - mine) & present:
                self._revoke(sorted((owned - mine) & present))
            gained = sorted(mine - owned)
            if gained:
                self._acquire(gained, {q.queue_id: q for q in resp.queues}, previous, initial=initial)
            self._last_refresh = time.monotonic()

    def _revoke(self, queue_ids: list[int]) -> None:
        """Stop pulling ``queue_ids``, discard their buffered messages and commit what was handed out of them."""
        log.info("group %s topic %s: releasing queues %s to other members", self.group, self.topic, queue_ids)
        to_commit = {}
        with self._lock:
            self._replace_stream()
            for q in queue_ids:
                self._fetch_pos.pop(q, None)
                self._inflight.pop(q, None)  # a pull still running is left to finish; its answer is ignored
                consumed = self._consumed.pop(q, None)
                if consumed is not None and consumed != self._committed.pop(q, None):
                    to_commit[q] = consumed
            gone = set(queue_ids)
            self._buffer = collections.deque(d for d in self._buffer if d.message.queue_id not in gone)
        if not self.auto_commit or not to_commit:
            return
        try:
            self._commit(to_commit)
        except errors.RaftmqError as exc:  # the new owner re-reads from the older commit: duplicates, no loss
            log.warning("group %s: could not commit released queues %s: %s", self.group, to_commit, exc)

    def _acquire(self, queue_ids: list[int], queues: dict[int, pb.QueueOffsets], previous: set[int], *,
                 initial: bool) -> None:
        """Start pulling ``queue_ids`` at the group's committed offsets (read now: the previous owner committed
        when it let go). A queue the group never committed starts per ``start_from``; with auto-commit a "last" or
        timestamp start is committed at once, so a later owner continues from it instead of resolving "last" again
        (which would skip what arrived in between); "first" needs no pin (a later owner starts at the oldest too)."""
        committed = self._fetch_committed()
        starts: dict[int, int] = {}
        pinned: dict[int, int] = {}
        for qid in queue_ids:
            q = queues[qid]
            if qid in committed:
                starts[qid] = committed[qid]
                continue
            if not initial and previous and qid not in previous:  # the topic grew: all of it is new to the group
                starts[qid] = q.min_offset
            elif self.start_from == START_LAST:
                starts[qid] = pinned[qid] = q.max_offset
            elif isinstance(self.start_from, int):
                sreq = pb.SearchOffsetRequest(topic=self.topic, queue_id=qid, timestamp=self.start_from,
                                              broker=self.broker)
                pos = self._pool.read(lambda s, t, r=sreq: s.messaging.SearchOffset(r, timeout=t))[0].offset
                starts[qid] = pinned[qid] = pos
            else:
                starts[qid] = q.min_offset
        if pinned and self.auto_commit:
            self._commit(pinned)
        with self._lock:
            self._replace_stream()
            for qid, pos in starts.items():
                self._fetch_pos[qid] = pos
                self._consumed[qid] = pos
                if qid in committed or (qid in pinned and self.auto_commit):
                    self._committed[qid] = pos
        log.info("group %s topic %s: %s queues %s (members: %s)", self.group, self.topic, self.client_id,
                 sorted(self._fetch_pos), ", ".join(self._members))

    def _fetch_committed(self) -> dict[int, int]:
        req = pb.FetchOffsetRequest(group=self.group, topic=self.topic, broker=self.broker)
        resp, _ = self._pool.read(lambda s, t: s.messaging.FetchOffset(req, timeout=t))
        return dict(resp.offsets)

    def assigned_queues(self) -> list[int]:
        """The queue ids this consumer reads now (all of them when it is the group's only member); in a cluster
        of several groups, those of every group (``assigned_by_group`` tells them apart)."""
        if self._lanes is not None:
            return sorted(q for lane in self._lanes for q in lane.assigned_queues())
        with self._lock:
            return sorted(self._fetch_pos)

    def assigned_by_group(self) -> dict[str, list[int]]:
        """Per group (its broker name; "" in a one-group cluster), the queue ids this consumer reads now."""
        if self._lanes is not None:
            return {lane.broker: lane.assigned_queues() for lane in self._lanes}
        return {self.broker: self.assigned_queues()}

    def members(self) -> list[str]:
        """The group's live members for this topic, sorted, as the leader last answered."""
        if self._lanes is not None:
            return sorted({m for lane in self._lanes for m in lane.members()})
        return list(self._members)

    def positions(self) -> dict[int, int]:
        """Per owned queue, the next offset this consumer will hand out (consumed up to here); one group's
        (``broker``, or this consumer's only group)."""
        if self._lanes is not None:
            return self._lane(self.broker).positions()
        with self._lock:
            return dict(self._consumed)

    def _lane(self, broker: str) -> PullConsumer:
        assert self._lanes is not None
        lane = next((x for x in self._lanes if x.broker == broker), None)
        if lane is None:
            raise errors.NotFoundError(f"name the group of the queue (broker=...): one of "
                                       f"{', '.join(x.broker for x in self._lanes)}")
        return lane

    def seek(self, queue_id: int, offset: int, broker: str = "") -> None:
        """Continue queue ``queue_id`` (of group ``broker`` in a cluster of several) at ``offset`` (buffered
        messages of that queue are dropped)."""
        if not self._started:
            self._start()
        if self._lanes is not None:
            return self._lane(broker).seek(queue_id, offset)
        with self._lock:
            if queue_id not in self._fetch_pos:
                if queue_id in self._queue_ids:
                    raise errors.NotFoundError(f"queue {queue_id} of topic {self.topic!r} is assigned to another "
                                               f"member of group {self.group!r}; this consumer reads "
                                               f"{sorted(self._fetch_pos)}")
                raise errors.NotFoundError(f"topic {self.topic!r} has no queue {queue_id}")
            self._buffer = collections.deque(d for d in self._buffer if d.message.queue_id != queue_id)
            self._replace_stream()
            fut = self._inflight.pop(queue_id, None)
            if fut is not None:
                fut.cancel()
            self._fetch_pos[queue_id] = offset
            self._consumed[queue_id] = offset

    # ------------------------------------------------------------------ pulling

    def _pull(self, queue_id: int, offset: int) -> pb.PullMessageResponse:
        req = pb.PullMessageRequest(topic=self.topic, queue_id=queue_id, offset=offset,
                                    max_count=self.batch_size, tag_expression=self.tag_expression,
                                    sql_expression=self.sql_expression,
                                    long_poll_timeout_ms=int(self.long_poll * 1000),
                                    consumer_group=self.group, from_leader=self.from_leader, broker=self.broker)
        timeout = self._pool.timeout + self.long_poll

        def call(s, t):
            return s.messaging.PullMessage(req, timeout=t)

        if self.from_leader:
            return self._pool.write(call, idempotent=True, timeout=timeout)[0]
        return self._pool.read(call, timeout=timeout)[0]

    def _fill(self, timeout: float) -> None:
        """Pull every owned queue concurrently (long polls stay in flight across calls) until something arrives
        or ``timeout`` passes; completed pulls land in the buffer."""
        if not self._started:
            self._start()
        elif time.monotonic() - self._last_refresh > self.queue_refresh_interval:
            self._refresh_queues(initial=False)
        if self._streaming and self._fill_from_stream(timeout):
            return
        with self._lock:
            for q, pos in self._fetch_pos.items():
                if q not in self._inflight:
                    self._inflight[q] = self._executor.submit(self._pull, q, pos)
            waiting = list(self._inflight.values())
        if not waiting:  # this consumer owns no queue (more members than queues): just wait
            self._stop.wait(max(timeout, 0.0))
            return
        done, _ = futures.wait(waiting, timeout=max(timeout, 0.0), return_when=futures.FIRST_COMPLETED)
        if not done:
            return
        with self._lock:
            for q in sorted(self._inflight):
                fut = self._inflight[q]
                if not fut.done():
                    continue
                del self._inflight[q]
                try:
                    resp = fut.result()
                except futures.CancelledError:
                    continue
                except errors.NotFoundError as exc:
                    if isinstance(exc, errors.TopicNotFoundError):
                        raise
                    self._drop_queue(q, exc)
                    continue
                self._apply(q, resp)

    def _fill_from_stream(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the stream to deliver something (opening it if needed); False when the
        server has no streams (the caller then pulls)."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            with self._lock:
                error, self._stream_error = self._stream_error, None
            if error is not None:
                if error.code == grpc.StatusCode.UNIMPLEMENTED:
                    log.warning("the server has no pull streams: %s pulls queue by queue", self.topic)
                    self._streaming = False
                    return False
                if isinstance(error, errors.NotFoundError) and not isinstance(error, errors.TopicNotFoundError):
                    self._refresh_queues(initial=False)  # a queue went away: drop it, a new stream reads the rest
                    continue
                raise error
            with self._lock:
                left = deadline - time.monotonic()
                if self._buffer or left <= 0 or self._closed:
                    return True
                if self._fetch_pos and self._stream is None:
                    self._open_stream()
                # no queue owned (more members than queues): just wait
                self._arrived.wait(left)

    def _open_stream(self) -> None:
        """Called with ``_lock`` held: a stream over the owned queues at their current positions."""
        self._stream = stream = QueueStream(self._pool, self._stream_request,
                                            lambda q, r: self._on_stream(stream, q, r),
                                            lambda e: self._on_stream_error(stream, e))
        stream.start()

    def _stream_request(self) -> pb.PullStreamRequest | None:
        with self._lock:
            if not self._fetch_pos or self._closed:
                return None
            return pb.PullStreamRequest(topic=self.topic, offsets=self._fetch_pos, max_count=self.batch_size,
                                        tag_expression=self.tag_expression, sql_expression=self.sql_expression,
                                        consumer_group=self.group)

    def _on_stream(self, stream: QueueStream, queue_id: int, resp: pb.PullMessageResponse) -> bool:
        with self._lock:
            if stream is not self._stream:
                return False  # replaced: its positions are not ours any more
            if queue_id in self._fetch_pos:
                self._apply(queue_id, resp)
                self._arrived.notify_all()
            return True

    def _on_stream_error(self, stream: QueueStream, error: errors.RaftmqError) -> None:
        with self._lock:
            if stream is self._stream:
                self._stream = None
                self._stream_error = error
                self._arrived.notify_all()

    def _replace_stream(self) -> None:
        """Called with ``_lock`` held when owned queues or positions change: the next fill opens a new stream."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _drop_queue(self, queue_id: int, why: object) -> None:
        """The topic's read queues shrank (topic update): stop pulling and committing that queue."""
        log.warning("topic %s: dropping queue %d: %s", self.topic, queue_id, why)
        with self._lock:
            self._replace_stream()
            self._fetch_pos.pop(queue_id, None)
            self._inflight.pop(queue_id, None)  # a pull still running is left to finish; its answer is ignored
            self._buffer = collections.deque(d for d in self._buffer if d.message.queue_id != queue_id)
            self._consumed.pop(queue_id, None)
            self._committed.pop(queue_id, None)

    def _apply(self, queue_id: int, resp: pb.PullMessageResponse) -> None:
        """Called with ``_lock`` held, for a queue this consumer still owns."""
        if resp.status == pb.FOUND and resp.messages:
            msgs = [MessageView.from_pb(m, self.broker) for m in resp.messages]
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
        if pending:
            pending[-1].after = max(pending[-1].after, nxt)
        elif nxt != self._consumed.get(queue_id):
            self._consumed[queue_id] = nxt

    def _take(self, limit: int | None) -> list[MessageView]:
        """Hand out up to ``limit`` buffered messages (all when None), recording them as consumed."""
        out = []
        with self._lock:
            while self._buffer and (limit is None or len(out) < limit):
                d = self._buffer.popleft()
                q = d.message.queue_id
                if q in self._fetch_pos:
                    self._consumed[q] = d.after
                out.append(d.message)
        return out

    def _maybe_auto_commit(self) -> None:
        if self.auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval:
            self.commit()

    def _poll_lanes(self, timeout: float, limit: int | None) -> list[MessageView]:
        """What the lanes have buffered, from the lane after the last one that gave (so no group starves);
        while none has any, wait on each in turn for a short slice, until ``timeout``."""
        lanes = self._lanes
        assert lanes is not None and self._router is not None and self._route is not None
        self._route = self._router.route(self.topic) or self._route  # the other groups' queue counts, refreshed
        deadline = time.monotonic() + timeout
        while True:
            for i in range(len(lanes)):
                lane = lanes[(self._next_lane + i) % len(lanes)]
                lane._maybe_auto_commit()
                got = lane._take(limit)
                if got:
                    self._next_lane = (self._next_lane + i + 1) % len(lanes)
                    return got
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            lane = lanes[self._next_lane % len(lanes)]
            self._next_lane = (self._next_lane + 1) % len(lanes)
            if not lane._started:
                lane._start()
            lane._fill(min(remaining, LANE_SLICE_S))

    def poll(self, timeout: float = 1.0) -> list[MessageView]:
        """Every message available within ``timeout`` seconds (possibly none), across this consumer's queues."""
        self._check_open()
        if not self._started:
            self._start()
        if self._lanes is not None:
            return self._poll_lanes(timeout, None)
        self._maybe_auto_commit()
        if not self._buffer:
            self._fill(timeout)
        return self._take(None)

    def receive(self, timeout: float = 1.0) -> MessageView | None:
        """The next message, or None if none arrives within ``timeout`` seconds."""
        self._check_open()
        if not self._started:
            self._start()
        if self._lanes is not None:
            got = self._poll_lanes(timeout, 1)
            return got[0] if got else None
        self._maybe_auto_commit()
        deadline = time.monotonic() + timeout
        while True:
            got = self._take(1)
            if got:
                return got[0]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._fill(remaining)

    def __iter__(self) -> Iterator[MessageView]:
        """Messages as they arrive, forever (until ``close()`` or ``break``)."""
        while not self._closed:
            msg = self.receive(timeout=self.long_poll)
            if msg is not None:
                yield msg

    # ------------------------------------------------------------------ offsets

    def commit(self) -> None:
        """Commit the offsets of every message handed out so far (for the group, replicated; in each queue's own
        group)."""
        if self._lanes is not None:
            for lane in self._lanes:
                lane.commit()
            return
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
            self._refresh_queues(initial=False)  # a queue went away: drop it and commit the rest
            with self._lock:
                changed = {q: o for q, o in changed.items() if q in self._fetch_pos}
            if changed:
                self._commit(changed)
        with self._lock:
            for q, o in changed.items():
                if q in self._fetch_pos:
                    self._committed[q] = o

    def _commit(self, offsets: dict[int, int]) -> None:
        req = pb.CommitOffsetRequest(group=self.group, topic=self.topic, offsets=offsets, broker=self.broker)
        self._pool.write(lambda s, t: s.messaging.CommitOffset(req, timeout=t), idempotent=True)

    def _check_open(self) -> None:
        if self._closed:
            raise errors.RaftmqError("consumer is closed")

    def send_back(self, msg: MessageView, delay_level: int = 0) -> SendResult:
        """RocketMQ 4's sendMessageBack: hand a message this consumer failed on to %RETRY%<group>, delivered again
        after ``delay_level`` (0: the next level for its retry count) to this group's receivers
        (``SimpleConsumer``/``PushConsumer``, or a ``PullConsumer`` of topic ``%RETRY%<group>``); after the group's
        max delivery attempts it goes to %DLQ%<group>. Commit the offset as usual afterwards."""
        if self._lanes is not None:
            return self._lane(msg.broker).send_back(msg, delay_level)
        req = pb.SendMessageBackRequest(group=self.group, topic=msg.topic, queue_id=msg.queue_id,
                                        queue_offset=msg.queue_offset, delay_level=delay_level)
        resp, _ = self._pool.write(lambda s, t: s.messaging.SendMessageBack(req, timeout=t))
        return SendResult.from_pb(resp.result)

    def close(self) -> None:
        """Commit (when auto-commit is on), leave the group (the others take over this consumer's queues at
        once) and release connections. Pending long polls are abandoned."""
        if self._closed:
            return
        if self._lanes is not None:
            self._closed = True
            try:
                for lane in self._lanes:
                    lane.close()
            finally:
                self._pool.close()
            return
        self._stop.set()
        if self._heartbeats is not None:
            self._heartbeats.join(timeout=self._pool.timeout + self._pool.retry_timeout)
        try:
            if self.auto_commit and self._started:
                self.commit()
        finally:
            self._closed = True
            try:
                if self._started and self._grouped:
                    self._unregister()
            finally:
                with self._lock:
                    self._replace_stream()
                    self._arrived.notify_all()
                    for fut in self._inflight.values():
                        fut.cancel()
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._pool.close()

    def _unregister(self) -> None:
        req = pb.UnregisterConsumerRequest(group=self.group, topic=self.topic, client_id=self.client_id)
        try:
            self._pool.write(lambda s, t: s.messaging.UnregisterConsumer(req, timeout=t), idempotent=True)
        except errors.RaftmqError as exc:  # the leader drops us after 3 heartbeat intervals anyway
            log.warning("group %s: could not unregister %s (the others take over after the expiry): %s",
                        self.group, self.client_id, exc)

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
