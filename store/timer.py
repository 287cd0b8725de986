"""Timer messages: delivery at an arbitrary epoch-millisecond time (RocketMQ 5 ``TimerMessageStore`` semantics).

Two halves, like store.schedule's delay levels:

* **On send** (``to_timer_messages``, called by the store's write entry points next to ``to_schedule_messages``):
  a message whose ``TIMER_DELIVER_MS`` lies in the future (after the store timestamp the leader gives the batch)
  is stored in ``rmq_sys_wheel_timer`` queue 0 instead of its topic, with ``TIMER_OUT_MS`` (the delivery time),
  ``REAL_TOPIC`` and ``REAL_QID`` added, as RocketMQ 5's broker does (without its rounding down to the timer
  precision, which can deliver up to a second early). Its consume-queue tagsCode is ``TIMER_OUT_MS``
  (``decode_dispatch``): rebuilding the pending set needs only the 20-byte units. A time now or in the past is
  stored normally at once; one further than ``timer_max_delay_seconds`` away is refused. A message that also
  has a ``DELAY`` level is a delay-level message (the level wins), and one carrying ``TIMER_DEQUEUE_MS`` was
  already delivered by a timer and is stored as is.
* **Delivery** (``TimerMessageService``, leader only): RocketMQ 5's timer wheel and timerlog files are not
  reproduced. The leader keeps a heap of the pending units ordered by (delivery time, queue offset), rebuilt from
  the timer queue and the replicated progress (store.timer_progress) when it starts leading, and tails the queue
  for new units. Each pass pops what is due (O(k log n) for k due of n pending; nothing is rescanned), re-puts
  it through the write path as a new record in its real topic/queue with its original properties (plus
  ``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS``), then replicates the new progress.

Guarantees: a message is re-put only when the delivering leader's clock reads at least its ``TIMER_OUT_MS``, and
the delivered record's store timestamp is that clock, so it never shows up early unless the new leader's clock
is ahead of real time (clock skew between members moves delivery by that skew). Progress is replicated *after*
the re-put is acknowledged: a leader dying in between makes the next leader deliver that batch again, so at most
one batch (``max_batch`` messages, 256 by default) is duplicated per failover; nothing acknowledged is lost.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from itertools import repeat
from operator import attrgetter, contains
from typing import Any

from raftmq.store.consume_queue import BLANK_UNIT_SIZE
from raftmq.store.dispatch import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_TYPE_MASK
from raftmq.store.errors import MessageIllegalError
from raftmq.store.java import hashmap_order
from raftmq.store.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    TIMER_TOPIC,
    Message,
    MessageExt,
    UniqKeyGenerator,
    check_properties,
    check_topic,
    properties_to_string,
)
from raftmq.store.schedule import diverted_properties
from raftmq.store.service_thread import ServiceThread

log = logging.getLogger("raftmq.store.timer")

TIMER_QUEUE_ID = 0
_SCAN_CHUNK = 4096  # consume-queue units read per call while rebuilding / tailing


def deliver_ms_of(props: dict[str, str], index: int = 0) -> int:
    """The ``TIMER_DELIVER_MS`` property as an int (MessageIllegalError when it is not one)."""
    text = props[PROPERTY_TIMER_DELIVER_MS]
    try:
        return int(text)
    except (TypeError, ValueError):
        raise MessageIllegalError(f"message {index}: property {PROPERTY_TIMER_DELIVER_MS}={text!r} is not a time; "
                                  "use the delivery time in milliseconds since the epoch (UTC)") from None


def timer_properties(props: dict[str, str], cluster_name: str | None, real_topic: str, real_qid: int,
                     out_ms: int) -> dict[str, str]:
    """The broker's property map of a waiting timer message, in its HashMap iteration order (as
    ``schedule_properties``: CLUSTER put, WAIT removed and put back, then TIMER_OUT_MS, REAL_TOPIC, REAL_QID)."""
    return diverted_properties(props, cluster_name, ((PROPERTY_TIMER_OUT_MS, str(out_ms)),
                                                     (PROPERTY_REAL_TOPIC, real_topic),
                                                     (PROPERTY_REAL_QUEUE_ID, str(real_qid))))


_properties_of = attrgetter("properties")


def _delay_level(props: dict[str, str]) -> int:
    """The DELAY level as store.schedule reads it (0 when absent or not a number: schedule refuses the latter)."""
    try:
        return int(props.get(PROPERTY_DELAY_TIME_LEVEL, 0))
    except (TypeError, ValueError):
        return 0


def to_timer_messages(msgs: Sequence[Message], now_ms: int, max_delay_ms: int, cluster_name: str | None,
                      uniq: UniqKeyGenerator) -> Sequence[Message]:
    """``msgs`` with every message due after ``now_ms`` replaced by its timer-topic form (``msgs`` itself when
    none is). The originals keep their topic and queue (callers report them); a missing UNIQ_KEY is set in the
    original's properties. Raises MessageIllegalError for a bad time or one beyond ``max_delay_ms``."""
    try:  # the usual batch has no timer at all: one C-level pass finds that out
        if not any(map(contains, map(_properties_of, msgs), repeat(PROPERTY_TIMER_DELIVER_MS))):
            return msgs
    except TypeError:  # a message whose properties are not a map: the loop below skips it, encode refuses it
        pass
    out: list[Message] | None = None
    for i, m in enumerate(msgs):
        props = m.properties
        if (not isinstance(props, dict) or PROPERTY_TIMER_DELIVER_MS not in props
                or m.properties_string is not None or PROPERTY_TIMER_DEQUEUE_MS in props):
            continue
        if (m.sys_flag & TRANSACTION_TYPE_MASK) not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            continue
        if _delay_level(props) > 0:
            continue  # a delay level wins (store.schedule handles it)
        deliver_ms = deliver_ms_of(props, i)
        if deliver_ms <= now_ms:
            continue  # due already: stored normally
        if deliver_ms - now_ms > max_delay_ms:
            raise MessageIllegalError(
                f"message {i}: {PROPERTY_TIMER_DELIVER_MS}={deliver_ms} is {(deliver_ms - now_ms) / 1000:.0f} s from "
                f"now, beyond the maximum timer delay of {max_delay_ms // 1000} s "
                "(store.timer_max_delay_seconds); deliver it sooner or raise the setting")
        check_topic(m.topic)
        check_properties(props)
        qid = m.queue_id
        if type(qid) is not int or not 0 <= qid <= 0x7FFFFFFF:
            raise MessageIllegalError(f"message {i}: queue_id {qid!r} must be an int in [0, 2^31)")
        if PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq.next()
        timer_props = timer_properties(props, cluster_name, m.topic, qid, deliver_ms)
        if out is None:
            out = list(msgs)
        out[i] = Message(
            topic=TIMER_TOPIC, body=m.body, queue_id=TIMER_QUEUE_ID, properties=timer_props, flag=m.flag,
            sys_flag=m.sys_flag, born_timestamp=m.born_timestamp, born_host=m.born_host,
            reconsume_times=m.reconsume_times, prepared_transaction_offset=m.prepared_transaction_offset,
            properties_string=properties_to_string(timer_props),
        )
    return msgs if out is None else out


def fire_message(ext: MessageExt, now_ms: int) -> Message | None:
    """The message to put into its real topic/queue when its time came, or None when it must be dropped.

    Keeps every property of the waiting record (TIMER_DELIVER_MS, TIMER_OUT_MS, keys, tags, UNIQ_KEY, user
    properties, REAL_TOPIC / REAL_QID) and adds TIMER_ENQUEUE_MS (when it was stored) and TIMER_DEQUEUE_MS (when
    it was delivered), as RocketMQ 5 does; TIMER_DEQUEUE_MS also keeps it from being diverted again."""
    props = dict(ext.properties)
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    try:
        real_qid = int(props.get(PROPERTY_REAL_QUEUE_ID, ""))
    except ValueError:
        real_qid = -1
    if not real_topic or real_qid < 0:
        log.error("timer record at %d has no usable REAL_TOPIC/REAL_QID (%r/%r); skipped", ext.physical_offset,
                  real_topic, props.get(PROPERTY_REAL_QUEUE_ID))
        return None
    props[PROPERTY_TIMER_ENQUEUE_MS] = str(ext.store_timestamp)
    props[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    # serialized before WAIT=false is set, as RocketMQ 5's convertMessage does
    props_s = properties_to_string(props, hashmap_order(props))
    props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
    return Message(
        topic=real_topic, body=ext.body, queue_id=real_qid, properties=props, flag=ext.flag,
        sys_flag=ext.sys_flag, born_timestamp=ext.born_timestamp, born_host=ext.born_host,
        reconsume_times=ext.reconsume_times, properties_string=props_s,
    )


class TimerMessageService(ServiceThread):
    """Delivers due timer messages while ``is_active()`` (the node leads and accepts writes).

    ``put(msgs) -> Future[list[PutResult]]`` is the write path's put; ``commit_progress(low, scanned, up_to)``
    replicates (and persists) store.timer_progress and returns once applied. The in-memory heap belongs to one
    spell of leadership: it is dropped whenever the node stops being active, a pass fails, or the replicated
    progress changes behind its back, and rebuilt from the replicated progress.
    """

    def __init__(self, store: Any, put: Callable[[list[Message]], Future],
                 commit_progress: Callable[[int, int, int], None], is_active: Callable[[], bool], *,
                 interval_s: float = 0.05, max_batch: int = 256, max_batch_bytes: int = 1 << 20,
                 put_timeout_s: float = 30.0, retry_after_error_s: float = 1.0) -> None:
        super().__init__("TimerMessageService", "timer")
        self.store = store
        self._put = put
        self._commit_progress = commit_progress
        self._is_active = is_active
        self.interval_s = interval_s
        self.max_batch = max_batch
        self.max_batch_bytes = max_batch_bytes
        self.put_timeout_s = put_timeout_s
        self.retry_after_error_s = retry_after_error_s
        self.delivered = 0  # messages re-put into their real topics by this node (metrics)
        self._drop_state()

    def _drop_state(self) -> None:
        self._loaded = False
        self._heap: list[tuple[int, int, int, int]] = []  # (deliver ms, queue offset, commit-log offset, size)
        self._pending_offsets: list[int] = []  # min-heap of the queue offsets in _heap (lazy deletion)
        self._done: set[int] = set()  # delivered offsets still inside _pending_offsets
        self._scanned = 0  # next queue offset to read into the heap
        self._committed: tuple[int, int, int] = (0, 0, 0)

    # ------------------------------------------------------------------ lifecycle
    @property
    def shutdown_timeout(self) -> float:  # a pass waits at most put_timeout_s for its re-put
        return self.put_timeout_s + 5

    def run(self) -> None:
        while not self.wait(self.interval_s):
            try:
                if self._is_active():
                    self.run_once()
                elif self._loaded:
                    self._drop_state()
            except Exception as e:  # leadership lost mid-pass, store closing, ...: rebuild after a pause
                self._drop_state()
                if self._is_active() and not self.stopped:
                    log.warning("timer delivery pass failed (%s: %s); retrying", type(e).__name__, e)
                self.wait(self.retry_after_error_s)

    # ------------------------------------------------------------------ state
    def pending(self) -> int:
        """Timer messages stored and not yet delivered: exact on the delivering leader, otherwise counted from
        the replicated progress (units between ``low`` and the queue end, an upper bound)."""
        cq = self.store.consume_queues.get(TIMER_TOPIC, TIMER_QUEUE_ID)
        end = cq.get_max_offset_in_queue() if cq is not None else 0
        if self._loaded:
            return len(self._heap) + max(0, end - self._scanned)
        return max(0, end - self.store.timer_progress.get()[0])

    def _push(self, start: int, stop: int | None, above: int | None) -> int:
        """Read units from ``start`` (to ``stop`` or the queue end) into the heap, only those due after
        ``above`` when given; returns the next offset to read."""
        cq = self.store.consume_queues.get(TIMER_TOPIC, TIMER_QUEUE_ID)
        if cq is None:
            return start
        end = cq.get_max_offset_in_queue() if stop is None else stop
        offset = max(start, cq.get_min_offset_in_queue())
        heap, offsets = self._heap, self._pending_offsets
        while offset < end:
            units = cq.read_units(offset, min(_SCAN_CHUNK, end - offset))
            if not units:
                break
            for phy, size, deliver_ms in units:
                if size != BLANK_UNIT_SIZE and (above is None or deliver_ms > above):
                    heap.append((deliver_ms, offset, phy, size))
                    offsets.append(offset)
                offset += 1
        heapq.heapify(heap)
        heapq.heapify(offsets)
        return offset

    def _load(self) -> bool:
        """Rebuild the pending heap from the replicated progress; False while this member's timer queue does
        not yet hold every unit the progress covers (it is still dispatching after becoming leader)."""
        store = self.store
        if store.dispatch_behind_bytes() > 0:
            return False
        progress = store.timer_progress.get()
        low, scanned, up_to = progress
        cq = store.consume_queues.get(TIMER_TOPIC, TIMER_QUEUE_ID)
        end = cq.get_max_offset_in_queue() if cq is not None else 0
        if scanned > end:
            log.error("timer progress scanned=%d is above the timer queue's end %d (timerProgress.json from a "
                      "newer store, or edited); treating the whole queue from %d as scanned", scanned, end,
                      min(low, end))
            scanned, low = end, min(low, end)
        lowest = cq.get_min_offset_in_queue() if cq is not None else 0
        if low < lowest:
            log.error("timer progress low=%d is below the timer queue's min offset %d (its files went to retention "
                      "before delivery); continuing from %d", low, lowest, lowest)
        self._drop_state()
        self._push(low, scanned, up_to)
        self._scanned = max(scanned, lowest)
        self._committed = progress
        self._loaded = True
        log.info("timer delivery: %d pending timer message(s) below queue offset %d, tailing from there",
                 len(self._heap), self._scanned)
        return True

    # ------------------------------------------------------------------ one pass
    def run_once(self, now_ms: int | None = None) -> int:
        """Deliver what is due; returns how many messages were re-put."""
        if self._loaded and self.store.timer_progress.get() != self._committed:
            self._drop_state()  # another leader delivered meanwhile: start over from its progress
        if not self._loaded and not self._load():
            return 0
        self._scanned = self._push(self._scanned, None, None)
        total = 0
        while not self.stopped:
            n, more = self._deliver_batch(int(time.time() * 1000) if now_ms is None else now_ms)
            total += n
            if not more:
                break
        return total

    def _deliver_batch(self, now_ms: int) -> tuple[int, bool]:
        """One batch of due messages: (messages re-put, whether more are due)."""
        heap = self._heap
        if not heap or heap[0][0] > now_ms:
            return 0, False
        store = self.store
        msgs: list[Message] = []
        taken: list[int] = []
        size = 0
        while heap and heap[0][0] <= now_ms and len(taken) < self.max_batch:
            if msgs and size + heap[0][3] > self.max_batch_bytes:
                break
            _deliver_ms, offset, phy, unit_size = heapq.heappop(heap)
            taken.append(offset)
            ext = store.view_message(phy)
            if ext is None:
                log.error("timer queue offset %d: no message at commit-log offset %d; skipped", offset, phy)
                continue
            m = fire_message(ext, now_ms)
            if m is not None:
                msgs.append(m)
                size += unit_size
        if msgs:
            self._put_all(msgs)
        self._done.update(taken)
        offsets, done = self._pending_offsets, self._done
        while offsets and offsets[0] in done:
            done.discard(heapq.heappop(offsets))
        self._commit(now_ms)
        self.delivered += len(msgs)
        return len(msgs), bool(heap) and heap[0][0] <= now_ms

    def _commit(self, now_ms: int) -> None:
        """Replicate the progress: everything pending is in the heap, so every unit below ``_scanned`` due at or
        before the heap's minimum (and now) was delivered."""
        _old_low, old_scanned, old_up_to = self._committed
        top = self._heap[0][0] if self._heap else None
        low = self._pending_offsets[0] if self._pending_offsets else self._scanned
        if top is None or top > old_up_to:  # the watermark never moves back (this clock may be slower)
            progress = (low, self._scanned, max(old_up_to, now_ms if top is None else min(now_ms, top - 1)))
        else:  # units due at or before the recorded watermark are still pending (newly scanned ones, after a
            # leader with a faster clock): they must not count as delivered, so only ``low`` may move
            progress = (min(low, old_scanned), old_scanned, old_up_to)
        if progress != self._committed:
            self._commit_progress(*progress)
            self._committed = progress

    def _put_all(self, msgs: list[Message]) -> None:
        """Re-put a batch; when the store refuses it as invalid, put one by one and skip only the invalid ones."""
        try:
            self._put(msgs).result(self.put_timeout_s)
            return
        except MessageIllegalError as e:
            if len(msgs) == 1:
                log.error("timer message for %s-%d cannot be re-put (%s); skipped", msgs[0].topic, msgs[0].queue_id,
                          e)
                return
        for m in msgs:
            self._put_all([m])
