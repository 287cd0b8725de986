"""Delayed messages (RocketMQ 4.9 ``ScheduleMessageService``, docs/design/store-formats.md#delayed-timer-and-transactional-messages).

Two halves:

* **On send** (``to_schedule_messages``, called by the store's write entry points): a message with a ``DELAY``
  level > 0 is stored in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` instead of its topic, with ``REAL_TOPIC`` /
  ``REAL_QID`` added and the properties re-serialized from the broker's HashMap (``WAIT`` kept). A level above the
  maximum is clamped to it. Its consume-queue tagsCode is the delivery time (``decode_dispatch``).
* **Delivery** (``ScheduleMessageService``, leader only): per level, read the schedule queue from the replicated
  progress (``DelayOffsetTable``), rebuild each due message for its real topic/queue exactly as
  ``messageTimeup`` does, re-put the batch through the write path (replicated, offsets assigned by apply), then
  replicate the new progress. The service is given callables, so the store does not depend on replication.

Delivery guarantees: a delayed message is re-put only once ``now >= store timestamp + level delay`` (the store
timestamp of the schedule record, set by the leader that accepted it), so it never shows up in its real topic
early — except when the delivering leader's clock is behind by more than a level's delay (RocketMQ's
``correctDeliverTimestamp`` then delivers at once rather than leave a message stuck). Progress is replicated
*after* the re-put is acknowledged, so nothing is lost across a failover; a message is delivered twice when the
leader dies (or loses leadership) after its re-put committed and before the progress command did: the new leader
re-puts everything from the last replicated progress of that level (at most one batch per level).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from itertools import repeat
from operator import attrgetter, contains
from typing import Any

from raftmq.store.consume_queue import BLANK_UNIT_SIZE
from raftmq.store.dispatch import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_TYPE_MASK
from raftmq.store.errors import MessageIllegalError, StoreError
from raftmq.store.java import JavaHashMap, hashmap_order
from raftmq.store.message import (
    PROPERTY_CLUSTER,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    SCHEDULE_TOPIC,
    Message,
    MessageExt,
    UniqKeyGenerator,
    check_properties,
    check_topic,
    parse_delay_levels,
    properties_to_string,
)
from raftmq.store.service_thread import ServiceThread

log = logging.getLogger("raftmq.store.schedule")

RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


class DelayLevels:
    """``messageDelayLevel`` parsed: level ``n`` (1-based) waits ``delay_ms(n)``."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.millis = parse_delay_levels(spec)
        if not self.millis:
            raise StoreError(f"message_delay_level {spec!r} has no levels; give at least one, e.g. \"1s 5s 10s\"")

    @property
    def max_level(self) -> int:
        return len(self.millis)

    def clamp(self, level: int) -> int:
        return min(level, self.max_level)

    def delay_ms(self, level: int) -> int:
        return self.millis[self.clamp(level) - 1]

    @staticmethod
    def queue_id(level: int) -> int:
        return level - 1

    @staticmethod
    def level_of_queue(queue_id: int) -> int:
        return queue_id + 1

    def correct_deliver_timestamp(self, now_ms: int, deliver_ms: int, level: int) -> int:
        """``correctDeliverTimestamp``: a delivery time further away than the level's delay (the clock went back)
        is treated as now."""
        return now_ms if deliver_ms > now_ms + self.delay_ms(level) else deliver_ms


def delay_level_of(props: dict[str, str]) -> int:
    """``Message.getDelayTimeLevel``: the ``DELAY`` property as an int (0 when absent)."""
    text = props.get(PROPERTY_DELAY_TIME_LEVEL)
    if text is None:
        return 0
    try:
        return int(text)
    except (TypeError, ValueError):
        raise MessageIllegalError(f"property DELAY={text!r} is not a delay level; use an integer "
                                  "(1 = the first of message_delay_level)") from None


def schedule_properties(props: dict[str, str], cluster_name: str | None, real_topic: str, real_qid: int,
                        level: int) -> dict[str, str]:
    """The broker's property map of a delayed message, in its HashMap iteration order (docs/design/store-formats.md#properties).

    SendMessageProcessor parses the client's properties into a HashMap, puts CLUSTER, removes WAIT and puts it
    back (it then sits at the end of its bucket); CommitLog sets the clamped DELAY and puts REAL_TOPIC and
    REAL_QID, then re-serializes the whole map (WAIT included)."""
    return diverted_properties(props, cluster_name, ((PROPERTY_DELAY_TIME_LEVEL, str(level)),
                                                     (PROPERTY_REAL_TOPIC, real_topic),
                                                     (PROPERTY_REAL_QUEUE_ID, str(real_qid))))


def diverted_properties(props: dict[str, str], cluster_name: str | None,
                        puts: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The broker's re-serialized property map of a message it diverts to a system topic (delay level, timer):
    the client's properties parsed into a HashMap, CLUSTER put, WAIT removed and put back (it then sits at the
    end of its bucket), then ``puts`` in order; returned in the HashMap's iteration order."""
    m = JavaHashMap()
    for k, v in props.items():
        m.put(k, v)
    if cluster_name is not None:
        m.put(PROPERTY_CLUSTER, cluster_name)
    wait = props.get(PROPERTY_WAIT_STORE_MSG_OK)
    if wait is not None:
        m.remove(PROPERTY_WAIT_STORE_MSG_OK)
        m.put(PROPERTY_WAIT_STORE_MSG_OK, wait)
    for k, v in puts:
        m.put(k, v)
    return dict(m.items())


_properties_of = attrgetter("properties")


def to_schedule_messages(msgs: Sequence[Message], levels: DelayLevels, cluster_name: str | None,
                         uniq: UniqKeyGenerator) -> Sequence[Message]:
    """``msgs`` with every delayed message replaced by its schedule-topic form (``msgs`` itself when none is).

    The originals keep their topic and queue (callers report them); a missing UNIQ_KEY is set in the original's
    properties as the encoder would. Raises MessageIllegalError for a delayed message that cannot be stored."""
    try:  # the usual batch has no DELAY at all: one C-level pass finds that out
        if not any(map(contains, map(_properties_of, msgs), repeat(PROPERTY_DELAY_TIME_LEVEL))):
            return msgs
    except TypeError:  # a message whose properties are not a map: the loop below skips it, encode refuses it
        pass
    out: list[Message] | None = None
    for i, m in enumerate(msgs):
        props = m.properties
        if (not isinstance(props, dict) or PROPERTY_DELAY_TIME_LEVEL not in props
                or m.properties_string is not None):
            continue
        if (m.sys_flag & TRANSACTION_TYPE_MASK) not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            continue
        level = delay_level_of(props)
        if level <= 0:
            continue
        check_topic(m.topic)
        check_properties(props)
        qid = m.queue_id
        if type(qid) is not int or not 0 <= qid <= 0x7FFFFFFF:
            raise MessageIllegalError(f"message {i}: queue_id {qid!r} must be an int in [0, 2^31)")
        if PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq.next()
        level = levels.clamp(level)
        sched_props = schedule_properties(props, cluster_name, m.topic, qid, level)
        if out is None:
            out = list(msgs)
        out[i] = Message(
            topic=SCHEDULE_TOPIC, body=m.body, queue_id=levels.queue_id(level), properties=sched_props,
            flag=m.flag, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp, born_host=m.born_host,
            reconsume_times=m.reconsume_times, prepared_transaction_offset=m.prepared_transaction_offset,
            properties_string=properties_to_string(sched_props),
        )
    return msgs if out is None else out


def timeup_message(ext: MessageExt) -> Message | None:
    """``messageTimeup``: the message to put into its real topic/queue, or None when it must be dropped.

    The properties string is re-serialized from the decoded map *before* DELAY is cleared and WAIT=false is set,
    so the delivered record keeps DELAY, REAL_TOPIC, REAL_QID and WAIT (docs/design/store-formats.md#properties)."""
    props = ext.properties
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    try:
        real_qid = int(props.get(PROPERTY_REAL_QUEUE_ID, ""))
    except ValueError:
        real_qid = -1
    if not real_topic or real_qid < 0:
        log.error("schedule record at %d has no usable REAL_TOPIC/REAL_QID (%r/%r); skipped", ext.physical_offset,
                  real_topic, props.get(PROPERTY_REAL_QUEUE_ID))
        return None
    if real_topic == RMQ_SYS_TRANS_HALF_TOPIC:
        log.error("schedule record at %d targets the transaction half topic; discarded as RocketMQ does",
                  ext.physical_offset)
        return None
    props_s = properties_to_string(props, hashmap_order(props))
    new_props = {k: v for k, v in props.items() if k != PROPERTY_DELAY_TIME_LEVEL}
    new_props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
    return Message(
        topic=real_topic, body=ext.body, queue_id=real_qid, properties=new_props, flag=ext.flag,
        sys_flag=ext.sys_flag, born_timestamp=ext.born_timestamp, born_host=ext.born_host,
        reconsume_times=ext.reconsume_times, properties_string=props_s,
    )


def _first_unit_at_or_after(cq: Any, physical_offset: int, highest: int) -> int:
    """The lowest queue offset in [min, highest] whose unit points at or past ``physical_offset`` (``highest`` when
    none does); units are in commit-log order, so a binary search over a few reads."""
    lo, hi = cq.get_min_offset_in_queue(), highest
    while lo < hi:
        mid = (lo + hi) // 2
        units = cq.read_units(mid, 1)
        if not units or units[0][0] >= physical_offset:
            hi = mid
        else:
            lo = mid + 1
    return lo


class ScheduleMessageService(ServiceThread):
    """Delivers due delayed messages while ``is_active()`` (the node leads and accepts writes).

    ``put(msgs) -> Future[list[PutResult]]`` is the write path's put; ``commit_progress({level: offset})`` replicates
    (and persists) the delay offsets and returns once applied. Both are re-checked every pass, so leadership moving
    away just makes them fail; the next leader starts from the replicated progress.
    """

    def __init__(self, store: Any, put: Callable[[list[Message]], Future],
                 commit_progress: Callable[[dict[int, int]], None], is_active: Callable[[], bool], *,
                 interval_s: float = 0.1, max_batch: int = 256, max_batch_bytes: int = 1 << 20,
                 put_timeout_s: float = 30.0, retry_after_error_s: float = 1.0) -> None:
        super().__init__("ScheduleMessageService", "schedule")
        self.store = store
        self.levels = DelayLevels(store.config.message_delay_level)
        self._put = put
        self._commit_progress = commit_progress
        self._is_active = is_active
        self.interval_s = interval_s
        self.max_batch = max_batch
        self.max_batch_bytes = max_batch_bytes
        self.put_timeout_s = put_timeout_s
        self.retry_after_error_s = retry_after_error_s
        self.delivered = 0  # messages re-put into their real topics by this node (metrics)
        # the commit-log end when this service was made (the node builds it before it serves): records past it
        # arrived later, so a correction of the progress never counts them as delivered
        self._opened_at = store.commit_log_max_offset

    # ------------------------------------------------------------------ lifecycle
    @property
    def shutdown_timeout(self) -> float:  # a pass waits at most put_timeout_s for its re-put
        return self.put_timeout_s + 5

    def run(self) -> None:
        while not self.wait(self.interval_s):
            try:
                if self._is_active():
                    self.run_once()
            except Exception as e:  # leadership lost mid-pass, store closing, ...: retry after a pause
                if self._is_active() and not self.stopped:
                    log.warning("delayed delivery pass failed (%s: %s); retrying", type(e).__name__, e)
                self.wait(self.retry_after_error_s)

    # ------------------------------------------------------------------ one pass
    def run_once(self, now_ms: int | None = None) -> int:
        """Deliver what is due on every level; returns how many messages were re-put."""
        total = 0
        for level in range(1, self.levels.max_level + 1):
            while not self.stopped:
                n, more = self._deliver_level(level, int(time.time() * 1000) if now_ms is None else now_ms)
                total += n
                if not more:
                    break
        return total

    def _deliver_level(self, level: int, now_ms: int) -> tuple[int, bool]:
        """One batch of ``level``: (messages re-put, whether a full batch was due so more may be)."""
        store = self.store
        cq = store.consume_queues.get(SCHEDULE_TOPIC, DelayLevels.queue_id(level))
        start = store.delay_offsets.get(level)
        if start > (cq.get_max_offset_in_queue() if cq is not None else 0):
            self._correct_above_max(level, start)
            return 0, False
        if cq is None:
            return 0, False
        offset = start
        lowest = cq.get_min_offset_in_queue()
        if offset < lowest:  # retention removed those units: RocketMQ's correctDelayOffset moves up to the minimum
            log.error("delay level %d: delivery progress %d is below the schedule queue's min offset %d (its files "
                      "went to retention before delivery); continuing from %d", level, offset, lowest, lowest)
            offset = lowest
        units = cq.read_units(offset, self.max_batch)
        msgs: list[Message] = []
        size = 0
        nxt = offset
        full = False
        for phy, unit_size, tags_code in units:
            if unit_size == BLANK_UNIT_SIZE:
                nxt += 1
                continue
            if self.levels.correct_deliver_timestamp(now_ms, tags_code, level) > now_ms:
                break
            if msgs and size + unit_size > self.max_batch_bytes:
                full = True
                break
            ext = store.view_message(phy)
            nxt += 1
            if ext is None:
                log.error("delay level %d: no message at commit-log offset %d (queue offset %d); skipped", level,
                          phy, nxt - 1)
                continue
            m = timeup_message(ext)
            if m is not None:
                msgs.append(m)
                size += unit_size
        else:
            full = len(units) == self.max_batch
        if nxt == start:
            return 0, False
        if msgs:
            self._put_all(level, msgs)
        self._commit_progress({level: nxt})
        self.delivered += len(msgs)
        return len(msgs), full

    def _correct_above_max(self, level: int, start: int) -> None:
        """The progress of ``level`` is past the end of its schedule queue: RocketMQ's ``correctDelayOffset`` sets it
        to the queue's max offset at load (and logs), or every message stored there until the queue grows past the
        stale value would be skipped. Here the node may already accept messages when the first pass runs, so the
        value is the queue's end *as recovered*: the first unit stored past the commit-log end at start-up (those
        arrived since and were never delivered). Only once the consume queues hold the whole commit log: a member
        that just became leader may still be dispatching, and its queue then catches up by itself. The corrected
        value goes through the replicated progress, so every member's delayOffset.json agrees."""
        store = self.store
        if store.dispatch_behind_bytes() > 0:
            return
        cq = store.consume_queues.get(SCHEDULE_TOPIC, DelayLevels.queue_id(level))
        highest = cq.get_max_offset_in_queue() if cq is not None else 0  # read after the dispatch check
        if start <= highest:
            return
        corrected = _first_unit_at_or_after(cq, self._opened_at, highest) if cq is not None else 0
        log.error("delay level %d: delivery progress %d is above the schedule queue's max offset %d "
                  "(delayOffset.json restored from a newer store, or edited); corrected to %d (the queue's end at "
                  "start-up), so nothing stored since is skipped", level, start, highest, corrected)
        self._commit_progress({level: corrected})

    def _put_all(self, level: int, msgs: list[Message]) -> None:
        """Re-put a batch; when the store refuses it as invalid, put one by one and skip only the invalid ones
        (RocketMQ logs and skips a message whose put throws)."""
        try:
            self._put(msgs).result(self.put_timeout_s)
            return
        except MessageIllegalError as e:
            if len(msgs) == 1:
                log.error("delay level %d: message for %s-%d cannot be re-put (%s); skipped", level, msgs[0].topic,
                          msgs[0].queue_id, e)
                return
        for m in msgs:
            self._put_all(level, [m])
