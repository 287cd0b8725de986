"""PopCore: receive / ack / change-invisible-duration / retry / dead letters on the leader (RocketMQ 5 "pop").

What runs where: this class decides (leader only, with the leader's clock) and every decision is one replicated
command of ``store.pop_state`` (``write_path.apply_pop``), so any member that becomes leader continues from the same
in-flight table: unacked messages are never lost and come back when their deadline passes, on the new leader too.
Messages that move (dead letters, ``send_back`` retries) go through the normal write path first and are marked done
afterwards, so a crash in between duplicates a dead letter instead of losing it.

Per (group, topic, queue) one lock serialises decisions on this member, so two receivers never get the same
message; the ``seq`` check in the applied command covers a deposed leader racing its successor.

Blocking: call from a worker thread (the gRPC layer uses ``node.run_blocking``). The RocketMQ 5 adapter
(node.rocketmq5.consumer) maps its ReceiveMessage / AckMessage / ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue onto
``receive`` / ``ack`` / ``change_invisible`` / ``forward_to_dlq``; ``Delivery`` carries what its messages need.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raftmq.replication.write_path import WritePath
from raftmq.store.message import Message, MessageExt, parse_delay_levels
from raftmq.store.message_store import GetStatus
from raftmq.store.pop_state import QueueState, queue_key
from raftmq.store.service_thread import ServiceThread
from raftmq.store.sql_filter import SqlFilter
from raftmq.store.tag_filter import TagFilter
from raftmq.store.topic_config import MIXED, PERM_READ, PERM_WRITE, TopicConfig

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"  # RocketMQ 5's FIFO message group (MessageConst.PROPERTY_SHARDING_KEY)
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_DELAY = "DELAY"
# raftmq's additions on a dead letter: where it came from and how often it was delivered
PROPERTY_DLQ_ORIGIN_QUEUE_ID = "DLQ_ORIGIN_QUEUE_ID"
PROPERTY_DLQ_ORIGIN_QUEUE_OFFSET = "DLQ_ORIGIN_QUEUE_OFFSET"
PROPERTY_DLQ_DELIVERY_ATTEMPTS = "DLQ_DELIVERY_ATTEMPTS"
PROPERTY_DLQ_REASON = "DLQ_REASON"
_DROPPED_ON_MOVE = ("DELAY", "REAL_TOPIC", "REAL_QID", "WAIT", "CLUSTER")

DEFAULT_MAX_DELIVERY_ATTEMPTS = 16
DEFAULT_RETRY_BACKOFF = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"  # RocketMQ 5's default
DEFAULT_INVISIBLE_MS = 30_000
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600_000
MAX_RECEIVE = 1024
RECEIVE_MAX_BYTES = 8 << 20
OFFSET_SYNC_INTERVAL_S = 1.0
log = logging.getLogger(__name__)
_MAC_BYTES = 16
_END_OF_QUEUE = frozenset({GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.NO_MESSAGE_IN_QUEUE,
                           GetStatus.NO_MATCHED_LOGIC_QUEUE})


class PopError(Exception):
    """Base of the errors a caller can act on; the gRPC layer maps them to statuses."""


class BadReceiptHandleError(PopError):
    """Forged, damaged, or for another group/topic: INVALID_ARGUMENT."""


class StaleReceiptHandleError(PopError):
    """Acked, redelivered, changed or expired since the handle was issued: FAILED_PRECONDITION."""


@dataclass(frozen=True)
class GroupPolicy:
    """Retry policy of one consumer group: attempts before the DLQ, back-off after a nack (by attempt)."""

    max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS
    retry_backoff_ms: tuple[int, ...] = tuple(parse_delay_levels(DEFAULT_RETRY_BACKOFF))
    # issue 13: the group consumes FIFO (RocketMQ's consumeMessageOrderly); RocketMQ 5 clients learn it from
    # their settings and then retry locally, in order, before dead-lettering themselves
    fifo: bool = False

    def backoff_ms(self, attempt: int) -> int:
        b = self.retry_backoff_ms
        return b[min(max(attempt, 1), len(b)) - 1]


def parse_policy(max_attempts: Any, backoff: Any, where: str, fifo: Any = False) -> GroupPolicy:
    if not isinstance(fifo, bool):
        raise ValueError(f"{where}.fifo: must be true or false, got {fifo!r}")
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or not 1 <= max_attempts <= 1000:
        raise ValueError(f"{where}.max_delivery_attempts: must be an integer 1..1000, got {max_attempts!r}")
    try:
        millis = parse_delay_levels(str(backoff))
    except Exception as e:
        raise ValueError(f"{where}.retry_backoff: {backoff!r} is not a list like '1s 5s 1m 2h': {e}") from None
    if not millis:
        raise ValueError(f"{where}.retry_backoff: empty; give at least one delay such as '1s'")
    return GroupPolicy(max_attempts, tuple(millis), fifo)


@dataclass
class Delivery:
    """One received message: what a client needs to process and then ack it."""

    message: MessageExt
    receipt_handle: str
    delivery_attempt: int
    invisible_until_ms: int
    message_group: str

    @property
    def topic(self) -> str:
        """The topic the client sees the message under: a retried message (in %RETRY%<group>) under the topic
        it came from."""
        m = self.message
        if m.topic.startswith(RETRY_PREFIX):
            return m.properties.get(PROPERTY_RETRY_TOPIC, m.topic)
        return m.topic


@dataclass
class PopCounters:
    """Per-group counts since this member started (exported as metrics)."""

    received: dict[str, int] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)
    nacked: dict[str, int] = field(default_factory=dict)
    redelivered: dict[str, int] = field(default_factory=dict)
    dead_lettered: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def add(table: dict[str, int], group: str, n: int = 1) -> None:
        if n:
            table[group] = table.get(group, 0) + n


class PopCore:
    def __init__(self, store: Any, write_path: WritePath, *, put: Callable[[list[Message]], list[Any]],
                 default_policy: GroupPolicy | None = None, group_policies: dict[str, GroupPolicy] | None = None,
                 max_inflight_per_queue: int = 1024):
        """``put``: how dead letters and retries are stored (the node's one write path: SendPath's
        ``put_internal_blocking``; blocks, raises unless every message was stored)."""
        self.store = store
        self.write_path = write_path
        self._put = put
        self.default_policy = default_policy or GroupPolicy()
        self.group_policies = dict(group_policies or {})
        self.max_inflight_per_queue = max_inflight_per_queue
        self.counters = PopCounters()
        self._locks: dict[str, threading.Lock] = {}
        self._rr = 0
        self._offset_sync: OffsetSync | None = None

    def policy(self, group: str) -> GroupPolicy:
        """The group's own replicated settings (``raftmq group update``, store.subscription_groups) when it has
        them, else the node configuration's (node.group_policies, then the node's defaults)."""
        own = self.store.subscription_groups.get(group)
        if own is not None:
            return GroupPolicy(own.max_delivery_attempts, own.retry_backoff_ms, own.fifo)
        return self.group_policies.get(group, self.default_policy)

    # ================================================================== receipt handles
    def _key(self) -> bytes:
        st = self.store.pop_state
        if not st.key:
            self.write_path.apply_pop([["key", secrets.token_hex(32)]])  # first use: the cluster's own key
        return bytes.fromhex(st.key)

    def _handle(self, group: str, topic: str, qid: int, offset: int, epoch: int) -> str:
        payload = f"{group}\x00{topic}\x00{qid}\x00{offset}\x00{epoch}".encode()
        mac = hmac.new(self._key(), payload, hashlib.sha256).digest()[:_MAC_BYTES]
        return base64.urlsafe_b64encode(payload + mac).decode().rstrip("=")

    def decode_handle(self, handle: str, group: str, topic: str) -> tuple[str, int, int, int]:
        """(topic, queue id, offset, epoch) of a handle this cluster issued to ``group`` for ``topic``."""
        try:
            raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4))
            payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
            ok = len(raw) > _MAC_BYTES and hmac.compare_digest(
                mac, hmac.new(self._key(), payload, hashlib.sha256).digest()[:_MAC_BYTES])
            g, t, q, o, e = payload.decode().split("\x00") if ok else ("", "", "0", "0", "0")
            qid, offset, epoch = int(q), int(o), int(e)
        except (ValueError, UnicodeDecodeError):
            ok = False
        if not ok:
            raise BadReceiptHandleError("receipt handle is damaged or was not issued by this cluster; pass the "
                                        "handle of a received message back unchanged")
        if g != group or t not in (topic, RETRY_PREFIX + group):
            raise BadReceiptHandleError(f"receipt handle belongs to group {g!r} / topic {t!r}, not to group "
                                        f"{group!r} / topic {topic!r}")
        return t, qid, offset, epoch

    def _lock(self, key: str) -> threading.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks.setdefault(key, threading.Lock())
        return lock

    # ================================================================== receive
    def sources(self, group: str, topic: str) -> list[tuple[str, int]]:
        """(topic, queue) pairs a group's receive reads: the topic's read queues, then its retry topic's."""
        out = []
        for t in (topic, RETRY_PREFIX + group):
            cfg = self.store.topics.get(t)
            if cfg is not None and cfg.perm & PERM_READ:
                out.extend((t, q) for q in range(cfg.read_queue_nums))
        return out

    def receive(self, group: str, topic: str, *, max_messages: int = 32, invisible_ms: int = DEFAULT_INVISIBLE_MS,
                tag_filter: TagFilter | None = None, sql_filter: SqlFilter | None = None,
                fifo: bool = False) -> list[Delivery]:
        """Hand out up to ``max_messages`` visible messages, each invisible for ``invisible_ms``."""
        sources = self.sources(group, topic)
        if not sources:
            return []
        self._rr += 1
        start = self._rr % len(sources)
        out: list[Delivery] = []
        for i in range(len(sources)):
            if len(out) >= max_messages:
                break
            t, qid = sources[(start + i) % len(sources)]
            out.extend(self._receive_queue(group, t, qid, max_messages - len(out), invisible_ms, tag_filter,
                                           sql_filter, fifo))
        return out

    def _next_offset(self, st: QueueState, group: str, topic: str, qid: int) -> int:
        """Where receiving the queue goes on: past what was handed out, or, on the group's first receive here,
        from its committed pull offset (never below what the queue still holds)."""
        nxt = st.next
        if st.seq == 0:
            nxt = self.store.consumer_offsets.offsets(group, topic).get(qid, 0)
        return max(nxt, self.store.min_offset_in_queue(topic, qid))

    def has_new(self, group: str, topic: str, qid: int) -> bool:
        """The queue holds a message the group has not been handed yet (what wakes a waiting receive)."""
        st = self.store.pop_state.get(queue_key(group, topic, qid))
        return self.store.max_offset_in_queue(topic, qid) > self._next_offset(st, group, topic, qid)

    def next_visible_ms(self, group: str, topic: str) -> int | None:
        """When the group's earliest in-flight message of ``topic`` (or its retry topic) becomes visible again
        (ms since the epoch), None when none is in flight."""
        soonest = None
        for t, qid in self.sources(group, topic):
            st = self.store.pop_state.get(queue_key(group, t, qid))
            for attempt, visible_at, _ep, _mg in list(st.inflight.values()):
                if attempt > 0 and (soonest is None or visible_at < soonest):
                    soonest = visible_at
        return soonest

    def _read(self, topic: str, qid: int, offset: int) -> MessageExt | None:
        got = self.store.get_messages(topic, qid, offset, 1, 1 << 30)
        m = got.messages[0] if got.messages else None
        return m if m is not None and m.queue_offset == offset else None

    def _receive_queue(self, group: str, topic: str, qid: int, want: int, invisible_ms: int,
                       tag_filter: TagFilter | None, sql_filter: SqlFilter | None, fifo: bool) -> list[Delivery]:
        key = queue_key(group, topic, qid)
        policy = self.policy(group)
        with self._lock(key):
            st = self.store.pop_state.get(key)
            now = int(time.time() * 1000)
            until = now + invisible_ms
            epoch = st.seq
            entries: dict[str, list] = {}
            picked: list[tuple[MessageExt, int, int, str]] = []  # message, attempt, epoch, message group
            dead: list[tuple[MessageExt, int, int]] = []            # message, epoch, attempts so far
            gone: list[list] = []
            blocked: set[str] = set()
            redelivered = 0
            for off in sorted(st.inflight):
                if len(picked) >= want:
                    break
                attempt, visible_at, ep, mg = st.inflight[off]
                if fifo and mg and mg in blocked:
                    continue
                if visible_at > now:
                    if fifo and mg:
                        blocked.add(mg)
                    continue
                msg = self._read(topic, qid, off)
                if msg is None:  # removed by retention meanwhile: nothing left to deliver
                    gone.append(["ack", key, off, ep])
                    continue
                if attempt >= policy.max_delivery_attempts:
                    dead.append((msg, ep, attempt))
                    continue
                epoch += 1
                entries[str(off)] = [attempt + 1, until, epoch, mg]
                picked.append((msg, attempt + 1, epoch, mg))
                redelivered += attempt > 0
                if fifo and mg:
                    blocked.add(mg)
            nxt = self._next_offset(st, group, topic, qid)
            room = self.max_inflight_per_queue - len(st.inflight)
            while len(picked) < want and room > 0:
                got = self.store.get_messages(topic, qid, nxt, min(want - len(picked), room), RECEIVE_MAX_BYTES,
                                              tag_filter, sql_filter)
                if got.status in _END_OF_QUEUE or got.next_begin_offset <= nxt:
                    break
                for m in got.messages:
                    mg = m.properties.get(PROPERTY_MESSAGE_GROUP, "")
                    room -= 1
                    if fifo and mg and mg in blocked:
                        entries[str(m.queue_offset)] = [0, 0, 0, mg]  # held back until the group's earlier one is done
                        continue
                    epoch += 1
                    entries[str(m.queue_offset)] = [1, until, epoch, mg]
                    picked.append((m, 1, epoch, mg))
                    if fifo and mg:
                        blocked.add(mg)
                nxt = got.next_begin_offset
            if entries or nxt != st.next:
                refusal = self.write_path.apply_pop([["take", key, st.seq, nxt, entries]])[0]
                if refusal:  # another leader's decision got in first: nothing handed out from here this time
                    return []
            if dead:
                self._dead_letter(group, [(m, a, "max delivery attempts reached") for m, _, a in dead])
                gone.extend(["ack", key, m.queue_offset, ep] for m, ep, _ in dead)
            if gone:
                self.write_path.apply_pop(gone)
        c = self.counters
        c.add(c.received, group, len(picked))
        c.add(c.redelivered, group, redelivered)
        c.add(c.dead_lettered, group, len(dead))
        return [Delivery(m, self._handle(group, topic, qid, m.queue_offset, ep), attempt, until, mg)
                for m, attempt, ep, mg in picked]

    # ================================================================== ack / change
    def _check_live(self, st: QueueState, offset: int, epoch: int, now: int) -> list:
        entry = st.inflight.get(offset)
        if entry is None or entry[2] != epoch:
            raise StaleReceiptHandleError("receipt handle is stale: the message was acked, dead-lettered, "
                                          "redelivered or its invisible time changed since; use the latest handle")
        if entry[1] <= now:
            raise StaleReceiptHandleError(f"receipt handle expired: the message became visible again at "
                                          f"{entry[1]} (ms) and will be delivered again; ack within the invisible "
                                          "duration or extend it with ChangeInvisibleDuration")
        return entry

    def ack(self, group: str, topic: str, handles: list[str]) -> list[str | None]:
        """Ack each handle; one error text or None per handle. Raises BadReceiptHandleError for a forged one."""
        decoded = [self.decode_handle(h, group, topic) for h in handles]
        keys = sorted({queue_key(group, t, q) for t, q, _, _ in decoded})
        locks = [self._lock(k) for k in keys]
        for lk in locks:
            lk.acquire()
        try:
            now = int(time.time() * 1000)
            states = {k: self.store.pop_state.get(k) for k in keys}
            out: list[str | None] = [None] * len(handles)
            ops, where = [], []
            for i, (t, q, off, ep) in enumerate(decoded):
                key = queue_key(group, t, q)
                try:
                    self._check_live(states[key], off, ep, now)
                except StaleReceiptHandleError as e:
                    out[i] = str(e)
                    continue
                ops.append(["ack", key, off, ep])
                where.append(i)
                states[key].inflight.pop(off, None)  # a handle twice in one request: the second is stale
            if ops:
                for i, refusal in zip(where, self.write_path.apply_pop(ops), strict=True):
                    out[i] = refusal
        finally:
            for lk in reversed(locks):
                lk.release()
        self.counters.add(self.counters.acked, group, sum(1 for r in out if r is None))
        return out

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> tuple[str, int]:
        """New deadline ``now + invisible_ms`` (0: nack, the group's back-off for this attempt); the new handle."""
        t, q, off, ep = self.decode_handle(handle, group, topic)
        key = queue_key(group, t, q)
        with self._lock(key):
            now = int(time.time() * 1000)
            entry = self._check_live(self.store.pop_state.get(key), off, ep, now)
            delay = invisible_ms if invisible_ms > 0 else self.policy(group).backoff_ms(entry[0])
            refusal = self.write_path.apply_pop([["change", key, off, ep, now + delay]])[0]
            if refusal:
                raise StaleReceiptHandleError(refusal)
            new_epoch = self.store.pop_state.get(key).inflight[off][2]
        if invisible_ms <= 0:
            self.counters.add(self.counters.nacked, group)
        return self._handle(group, t, q, off, new_epoch), now + delay

    def renew(self, group: str, topic: str, handle: str, invisible_ms: int) -> int:
        """Extend the deadline to now + ``invisible_ms`` keeping the handle valid (what RocketMQ 5's proxy does for
        ``auto_renew`` receives while the client processes); returns the new deadline."""
        t, q, off, ep = self.decode_handle(handle, group, topic)
        key = queue_key(group, t, q)
        with self._lock(key):
            now = int(time.time() * 1000)
            self._check_live(self.store.pop_state.get(key), off, ep, now)
            refusal = self.write_path.apply_pop([["renew", key, off, ep, now + invisible_ms]])[0]
            if refusal:
                raise StaleReceiptHandleError(refusal)
        return now + invisible_ms

    def forward_to_dlq(self, group: str, topic: str, handle: str) -> Any:
        """Move the message to %DLQ%<group> now (the FIFO client's own give-up) and mark it done."""
        t, q, off, ep = self.decode_handle(handle, group, topic)
        key = queue_key(group, t, q)
        with self._lock(key):
            entry = self._check_live(self.store.pop_state.get(key), off, ep, int(time.time() * 1000))
            msg = self._read(t, q, off)
            result = None
            if msg is not None:
                result = self._dead_letter(group, [(msg, entry[0], "forwarded by the consumer")])[0]
            refusal = self.write_path.apply_pop([["ack", key, off, ep]])[0]
            if refusal:
                raise StaleReceiptHandleError(refusal)
        self.counters.add(self.counters.dead_lettered, group)
        return result

    # ================================================================== retries and dead letters
    def _ensure_topic(self, name: str) -> None:
        if self.store.topics.get(name) is None:
            from raftmq.store.errors import StoreError

            try:
                # a group's retry and dead-letter topics hold whatever kind of message it consumes
                self.write_path.create_topic(TopicConfig(topic_name=name, read_queue_nums=1, write_queue_nums=1,
                                                         perm=PERM_READ | PERM_WRITE).with_message_type(MIXED))
            except StoreError:
                if self.store.topics.get(name) is None:
                    raise

    def _moved(self, msg: MessageExt, topic: str, extra: dict[str, str], reconsume_times: int) -> Message:
        props = {k: v for k, v in msg.properties.items() if k not in _DROPPED_ON_MOVE}
        origin = props.get(PROPERTY_RETRY_TOPIC) or msg.topic
        if not msg.topic.startswith(RETRY_PREFIX):
            origin = msg.topic
        props[PROPERTY_RETRY_TOPIC] = origin
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.uniq_key or msg.msg_id)
        props.update(extra)
        return Message(topic=topic, body=msg.body, queue_id=0, properties=props, flag=msg.flag,
                       born_timestamp=msg.born_timestamp, born_host=msg.born_host, reconsume_times=reconsume_times)

    def _dead_letter(self, group: str, items: list[tuple[MessageExt, int, str]]) -> list[Any]:
        dlq = DLQ_PREFIX + group
        self._ensure_topic(dlq)
        msgs = [self._moved(m, dlq, {PROPERTY_DLQ_ORIGIN_QUEUE_ID: str(m.queue_id),
                                     PROPERTY_DLQ_ORIGIN_QUEUE_OFFSET: str(m.queue_offset),
                                     PROPERTY_DLQ_DELIVERY_ATTEMPTS: str(attempts),
                                     PROPERTY_DLQ_REASON: reason}, attempts)
                for m, attempts, reason in items]
        return self._put(msgs)

    def send_back(self, group: str, topic: str, qid: int, offset: int, delay_level: int) -> tuple[Any, bool]:
        """RocketMQ 4 sendMessageBack: to %RETRY%<group> after a delay (level 0: 3 + times retried, as RocketMQ),
        or to %DLQ%<group> once the message was delivered max_delivery_attempts times (the same count as receive:
        attempts = deliveries). (result, dead-lettered?)."""
        msg = self._read(topic, qid, offset)
        if msg is None:
            raise PopError(f"no message at {topic}-{qid} offset {offset} (removed by retention, or never stored)")
        times = msg.reconsume_times + 1  # deliveries so far, this one included
        if times >= self.policy(group).max_delivery_attempts:
            self.counters.add(self.counters.dead_lettered, group)
            return self._dead_letter(group, [(msg, times, "max delivery attempts reached (send back)")])[0], True
        retry = RETRY_PREFIX + group
        self._ensure_topic(retry)
        level = delay_level if delay_level > 0 else 3 + msg.reconsume_times
        m = self._moved(msg, retry, {PROPERTY_DELAY: str(level)}, times)
        self.counters.add(self.counters.nacked, group)
        return self._put([m])[0], False

    # ================================================================== positions
    def reset(self, group: str, topic: str, *, timestamp_ms: int | None = None,
              offset: int | None = None) -> dict[int, int]:
        """Move the group on every read queue of ``topic`` (pull offsets and pop state) to a time or an offset."""
        cfg = self.store.topics.get(topic)
        targets: dict[int, int] = {}
        for q in range(cfg.read_queue_nums):
            lo, hi = self.store.min_offset_in_queue(topic, q), self.store.max_offset_in_queue(topic, q)
            if timestamp_ms is not None:
                targets[q] = max(lo, min(hi, self.store.get_offset_by_time(topic, q, timestamp_ms)))
            else:
                targets[q] = max(lo, min(hi, int(offset or 0)))
        keys = [queue_key(group, topic, q) for q in targets]
        locks = [self._lock(k) for k in sorted(keys)]
        for lk in locks:
            lk.acquire()
        try:
            self.write_path.commit_offsets(group, topic, targets)
            self.write_path.apply_pop([["reset", queue_key(group, topic, q), o] for q, o in targets.items()])
        finally:
            for lk in reversed(locks):
                lk.release()
        return targets

    # ================================================================== consumer offsets follow the acks
    def start(self, is_writable: Any, interval_s: float = OFFSET_SYNC_INTERVAL_S) -> None:
        """While this member leads, commit each pop queue's acked position (``min(in-flight) or next``) as the
        group's consumer offset, so ``group describe``, ``offsets --group`` and a later pull continue from it."""
        self._offset_sync = OffsetSync(self, is_writable, interval_s)
        self._offset_sync.start()

    def stop(self) -> None:
        if self._offset_sync is not None:
            self._offset_sync.shutdown()

    def sync_offsets(self) -> int:
        """Commit the moved positions; returns how many queues moved."""
        from raftmq.store.pop_state import split_key

        moved: dict[tuple[str, str], dict[int, int]] = {}
        for key, st in self.store.pop_state.items():
            group, topic, qid = split_key(key)
            low = st.low_water()
            if self.store.consumer_offsets.offsets(group, topic).get(qid) != low and st.seq:
                moved.setdefault((group, topic), {})[qid] = low
        for (group, topic), offsets in moved.items():
            self.write_path.commit_offsets(group, topic, offsets)
        return sum(len(o) for o in moved.values())

    # ================================================================== observability
    def inflight_and_lag(self) -> list[tuple[str, str, int, int, int]]:
        """(group, topic, queue, in-flight messages, lag) for every queue with pop state."""
        from raftmq.store.pop_state import split_key

        out = []
        for key, st in self.store.pop_state.items():
            group, topic, qid = split_key(key)
            hi = self.store.max_offset_in_queue(topic, qid)
            out.append((group, topic, qid, sum(1 for e in st.inflight.values() if e[0] > 0),
                        max(0, hi - st.low_water())))
        return out


class OffsetSync(ServiceThread):
    """PopCore's background loop: ``sync_offsets`` every ``interval_s`` while ``is_writable()`` (leading)."""

    shutdown_timeout = 5.0

    def __init__(self, pop: PopCore, is_writable: Any, interval_s: float) -> None:
        super().__init__("raftmq-pop-offsets")
        self._pop = pop
        self._is_writable = is_writable
        self.interval_s = interval_s

    def run(self) -> None:
        while not self.wait(self.interval_s):
            if self._is_writable():
                try:
                    self._pop.sync_offsets()
                except Exception as e:  # leadership moved mid-commit and the like: next round retries
                    log.debug("pop offset sync skipped: %s", e)
