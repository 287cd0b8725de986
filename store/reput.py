"""ReputMessageService: tails the commit log and builds consume queues and the index (docs/design/store-formats.md#dispatch-reput).

One thread per store. It reads records (without their bodies) from ``reput_from_offset`` up to the
*confirm offset* — the whole log on a single node, the Raft-committed end once replication drives it
(docs/architecture.md#contracts, 2: nothing uncommitted reaches a consumer) — and dispatches each one: NOT and COMMIT records to
their consume queue, every record except ROLLBACK to the index. Arrival listeners (long polling) hear
once per (topic, queue) per batch, with the queue's new max offset. The writer calls ``notify()`` after
it appends; the thread sleeps on a condition otherwise, so idle costs nothing and new data is picked up
at once.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from raftmq.store.consume_queue import ConsumeQueue, ConsumeQueueTable
from raftmq.store.dispatch import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    dispatch_properties,
)
from raftmq.store.index_service import IndexRecord, IndexService
from raftmq.store.java import java_string_hash
from raftmq.store.message import MESSAGE_MAGIC_CODE, TIMED_TOPICS
from raftmq.store.service_thread import ServiceThread

log = logging.getLogger("raftmq.store.reput")

ArrivalListener = Callable[[str, int, int], None]

_CQ_TYPES = (0, TRANSACTION_COMMIT_TYPE)  # TRANSACTION_NOT_TYPE and TRANSACTION_COMMIT_TYPE
_SIZE_MAGIC = struct.Struct(">ii")
# A record with IPv4 born and store hosts up to BODYLEN, keeping only what dispatch reads: TOTALSIZE, MAGIC,
# QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, STORETIMESTAMP, BODYLEN (message.py has the full layout).
_V4_HEAD = struct.Struct(">ii4xi4xqqi8x8xq8x4x8xi")
_V4_HEAD_SIZE = _V4_HEAD.size  # 88: the body starts here
_V4_MIN_SIZE = _V4_HEAD_SIZE + 3  # + TOPICLEN i8 + PROPLEN i16: calMsgLength with empty body, topic, properties
_HOST_V6_FLAGS = 0x30  # BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_STOP_NONE = ""
_STOP_BAD = "bad record"  # corrupt data: stays stopped there until the log is truncated
_STOP_ERROR = "write error"  # disk trouble: retried after retry_wait_ms
_NOT_TAKEN = "the queue's file did not take the unit"


def _incomplete(view: memoryview, pos: int, end: int, can_grow: bool) -> bool:
    """True when the bytes at ``pos`` may start a record that continues past ``end`` (the readable limit)."""
    if not can_grow:  # the view reaches the end of its segment: nothing more will appear
        return False
    if end - pos < 8:
        return True
    total, magic = _SIZE_MAGIC.unpack_from(view, pos)
    return magic == MESSAGE_MAGIC_CODE and total > end - pos


class ReputMessageService(ServiceThread):
    """Dispatches committed commit-log records; see the module docstring.

    ``commit_log`` is the store's ``CommitLog`` (``min_offset``, ``max_offset``, ``get_data``,
    ``roll_next_file``, ``check_message_and_return_size``). ``checkpoint`` (optional) gets
    ``logics_msg_timestamp`` = the store time of the last record written to a consume queue.
    """

    def __init__(
        self,
        commit_log: Any,
        consume_queues: ConsumeQueueTable,
        index_service: IndexService | None,
        *,
        reput_from_offset: int = 0,
        checkpoint: Any = None,
        batch_bytes: int = 4 << 20,
        idle_wait_ms: int = 100,
        retry_wait_ms: int = 1000,
        on_write_error: Callable[[OSError, str], None] | None = None,
    ) -> None:
        super().__init__("ReputMessageService", "reput")
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index_service = index_service
        self.checkpoint = checkpoint
        self.reput_from_offset = reput_from_offset
        self.batch_bytes = batch_bytes
        self.idle_wait_ms = idle_wait_ms
        self.retry_wait_ms = retry_wait_ms
        self.on_write_error = on_write_error  # the store's disk health hears of ENOSPC / EIO
        self._confirm_offset: int | None = None
        self._listeners: list[ArrivalListener] = []
        self._pass_lock = threading.RLock()  # one pass at a time; held by paused()
        self._wakeup = threading.Condition()
        self._pending = False
        self._progress = threading.Condition()
        self._bad_offset = -1  # where a corrupt record stopped dispatch (logged once)
        self._rewind: int | None = None  # asked for by ``rewind`` during a pass
        self._in_pass = False
        # the index could not take records from here on (ENOSPC creating its next file): consume queues go on,
        # catch_up_index fills the index in later
        self.index_behind_from: int | None = None
        self._index_retry_at = 0.0
        self.dispatched_messages = 0
        self.last_error = ""
        self.last_stop = _STOP_NONE  # why the last pass stopped short of the limit ("" if it did not)

    # ------------------------------------------------------------------ confirm offset
    @property
    def confirm_offset(self) -> int | None:
        """Dispatch stops here; None means the end of the commit log (single node)."""
        return self._confirm_offset

    @confirm_offset.setter
    def confirm_offset(self, offset: int | None) -> None:
        self._confirm_offset = offset
        self.notify()

    def _limit(self) -> int:
        end = self.commit_log.max_offset
        confirm = self._confirm_offset
        return end if confirm is None else min(end, confirm)

    def dispatch_behind_bytes(self) -> int:
        """Bytes that may be dispatched but are not yet (``dispatchBehindBytes``)."""
        return max(0, self._limit() - self.reput_from_offset)

    # ------------------------------------------------------------------ listeners and wake-ups
    def add_arrival_listener(self, fn: ArrivalListener) -> None:
        """``fn(topic, queue_id, max_offset)`` runs on the reput thread once per queue per batch: keep it short."""
        self._listeners = [*self._listeners, fn]

    def remove_arrival_listener(self, fn: ArrivalListener) -> None:
        self._listeners = [f for f in self._listeners if f is not fn]

    def notify(self) -> None:
        """New data may be dispatchable (called by the writer after an append, or when the confirm offset moves)."""
        with self._wakeup:
            self._pending = True
            self._wakeup.notify()

    def wait_dispatched(self, offset: int | None = None, timeout: float | None = None) -> bool:
        """Block until everything up to ``offset`` (default: the current limit) is dispatched."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._progress:
            while True:
                target = self._limit() if offset is None else offset
                if self.reput_from_offset >= target:
                    return True
                if self._thread is None:  # nobody is dispatching
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._progress.wait(remaining if remaining is not None else 1.0)

    def rewind(self, offset: int) -> None:
        """Dispatch again from ``offset`` (a queue was found lacking units: dispatch skips what queues and index
        already hold). From any thread: inside a pass (a dispatch opened the damaged queue) it takes effect once
        the slice being dispatched is done."""
        with self._pass_lock:
            self._rewind = offset if self._rewind is None else min(self._rewind, offset)
            if not self._in_pass:
                self._apply_rewind()
        self.notify()

    def _apply_rewind(self) -> None:
        offset, self._rewind = self._rewind, None
        if offset is not None and offset < self.reput_from_offset:
            log.warning("reput: dispatching again from commit-log offset %d (was at %d)", offset,
                        self.reput_from_offset)
            self.reput_from_offset = offset

    def on_reput_thread(self) -> bool:
        return threading.current_thread() is self._thread

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold dispatch (no pass runs) while the caller truncates or resets offsets."""
        with self._pass_lock:
            yield
        self.notify()

    # ------------------------------------------------------------------ the pass
    def do_reput(self) -> int:
        """Dispatch everything currently dispatchable; returns the number of messages dispatched."""
        with self._pass_lock:
            self._in_pass = True
            try:
                return self._do_reput()
            finally:
                self._in_pass = False
                if self._rewind is not None:
                    self._apply_rewind()

    def _do_reput(self) -> int:
        cl = self.commit_log
        min_offset = cl.min_offset
        if self.reput_from_offset < min_offset:
            log.warning(
                "reput offset %d is below the commit log's minimum; jumping to %d",
                self.reput_from_offset,
                min_offset,
            )
            self.reput_from_offset = min_offset
        total = 0
        self.last_stop = _STOP_NONE
        arrivals: dict[tuple[str, int], int] = {}
        batch_start = self.reput_from_offset
        last_cq_ts = 0
        while not self.stopped:
            limit = self._limit()
            offset = self.reput_from_offset
            if offset >= limit:
                break
            view = cl.get_data(offset, limit)
            if view is None:
                break
            try:
                budget = max(1, self.batch_bytes - (offset - batch_start))
                count, new_offset, cq_ts, stop = self._dispatch_view(view, offset, budget, arrivals)
            finally:
                view.release()
            self.reput_from_offset = new_offset
            if self._rewind is not None:  # a queue this slice opened lacked units: go back for them
                self._apply_rewind()
            total += count
            last_cq_ts = cq_ts or last_cq_ts
            if stop != _STOP_NONE or new_offset == offset:
                self.last_stop = stop
                break
            if new_offset - batch_start >= self.batch_bytes:  # a long backlog: tell waiters as we go
                self._finish_batch(arrivals, last_cq_ts)
                arrivals, batch_start, last_cq_ts = {}, new_offset, 0
        self._finish_batch(arrivals, last_cq_ts)
        self.dispatched_messages += total
        return total

    def _dispatch_view(
        self, view: memoryview, start: int, budget: int, arrivals: dict[tuple[str, int], int]
    ) -> tuple[int, int, int, str]:
        """Dispatch about ``budget`` bytes of the records in ``view`` (commit-log bytes from ``start``),
        recording each queue's new max offset in ``arrivals``; the index is built once for the slice.

        Returns ``(messages, next offset, store time of the last CQ write or 0, stop reason)``.
        """
        index = self.index_service if self.index_behind_from is None else None  # behind: caught up separately
        index_records: list[IndexRecord] | None = [] if index is not None else None
        result = self._dispatch_records(view, start, budget, arrivals, index_records)
        if index is not None and index_records:
            try:
                index.build_index_records(index_records)
            except OSError as e:
                self._index_failed(index_records[0][0], e)
        return result

    def _index_failed(self, first: int, error: OSError) -> None:
        """The index could not take records from commit-log offset ``first`` on (a full disk cannot create the next
        index file): consume queues go on (nothing acknowledged may stay invisible to consumers because of the
        index), and ``catch_up_index`` indexes from ``first`` once the disk takes it."""
        assert self.index_service is not None
        again = self.index_behind_from is not None
        self.index_behind_from = first
        self.last_error = f"index: {error}"
        self._index_retry_at = time.monotonic() + self.retry_wait_ms / 1000.0
        if self.on_write_error is not None:
            self.on_write_error(error, self.index_service.store_path)
        (log.debug if again else log.error)(
            "reput: cannot write the index from commit-log offset %d (%s); consume queues are dispatched on, the "
            "index catches up when the disk takes it", first, error)

    def catch_up_index(self) -> bool:
        """Index the records from ``index_behind_from`` up to what is dispatched (reput thread, or under
        ``paused``); True once the index is caught up. Records go in commit-log order, as reput gives them."""
        index = self.index_service
        start = self.index_behind_from
        if index is None or start is None:
            return True
        cl = self.commit_log
        offset, end = start, self.reput_from_offset
        while offset < end:
            view = cl.get_data(offset, end)
            if view is None:
                break
            records: list[IndexRecord] = []
            pos, n, nxt = 0, len(view), None
            try:
                while pos < n:
                    dr = cl.check_message_and_return_size(view, pos, n, False)
                    if dr.success and dr.msg_size > 0:
                        rollback = (dr.sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE
                        records.append((dr.commit_log_offset, dr.store_timestamp, dr.topic,
                                        None if rollback else dr.keys, None if rollback else dr.uniq_key))
                        pos += dr.msg_size
                    elif dr.success:  # end-of-file blank record
                        nxt = cl.roll_next_file(offset + pos)
                        break
                    elif dr.msg_size > 0:
                        pos += dr.msg_size
                    else:
                        break  # the rest of the dispatched range is not readable: reput stopped there too
            finally:
                view.release()
            try:
                index.build_index_records(records)
            except OSError as e:
                self._index_failed(offset, e)
                return False
            if nxt is None and pos == 0:
                break
            offset = offset + pos if nxt is None else nxt
            self.index_behind_from = offset
        self.index_behind_from = None
        log.warning("reput: the index caught up with the commit log from offset %d to %d", start, end)
        return True

    def index_behind_bytes(self) -> int:
        """Dispatched commit-log bytes the index does not hold yet (the disk refused its next file)."""
        behind = self.index_behind_from
        return 0 if behind is None else max(0, self.reput_from_offset - behind)

    def _dispatch_records(
        self,
        view: memoryview,
        start: int,
        budget: int,
        arrivals: dict[tuple[str, int], int],
        index_records: list[IndexRecord] | None,
    ) -> tuple[int, int, int, str]:
        """Write the consume-queue unit of each record in ``view`` up to about ``budget`` bytes, in commit-log
        order, and collect the index records ``(offset, store time, topic, keys, uniq key)``.

        Units go record by record, never queue by queue: recovery takes the largest end over all queues as
        dispatched, so at any moment every queue must be complete up to the last unit written anywhere.
        The common record (IPv4 hosts, valid lengths, not the schedule topic) is read here with one unpack
        and three property searches; anything else goes through ``check_message_and_return_size``, which also
        gives blank, bad and mismatched records their meaning. Both yield the same fields.
        """
        cl = self.commit_log
        check = cl.check_message_and_return_size
        unpack_head = _V4_HEAD.unpack_from
        props_of = dispatch_properties
        tags_hash = java_string_hash
        add_index = index_records.append if index_records is not None else None
        queues: dict[tuple[str, int], ConsumeQueue] = {}
        find_queue = self.consume_queues.find_or_create
        last_cq_ts = 0
        count = 0
        pos = 0
        end = len(view)
        batch_end = min(end, budget)
        while pos < batch_end:
            if pos + _V4_HEAD_SIZE <= end:
                total, magic, queue_id, queue_offset, phy, sys_flag, store_ts, body_len = unpack_head(view, pos)
                rec_end = pos + total
                tpos = pos + _V4_HEAD_SIZE + body_len
                if (
                    magic == MESSAGE_MAGIC_CODE
                    and not sys_flag & _HOST_V6_FLAGS
                    and total >= _V4_MIN_SIZE
                    and rec_end <= end
                    and body_len >= 0
                    and tpos < rec_end
                ):
                    topic_len = view[tpos]
                    ppos = tpos + 1 + topic_len
                    if 0 < topic_len < 128 and ppos + 2 <= rec_end:
                        props_len = (view[ppos] << 8) | view[ppos + 1]
                        if props_len < 0x8000 and _V4_MIN_SIZE + body_len + topic_len + props_len == total:
                            topic = str(view[tpos + 1 : ppos], "utf-8", "replace")
                            if topic not in TIMED_TOPICS:  # their tags code is a delivery time: general path
                                if props_len:
                                    tags, keys, uniq = props_of(
                                        str(view[ppos + 2 : rec_end], "utf-8", "replace")
                                    )
                                    tags_code = tags_hash(tags) if tags else 0
                                else:
                                    tags_code, keys, uniq = 0, "", None
                                tran = sys_flag & TRANSACTION_TYPE_MASK
                                if tran == 0 or tran == TRANSACTION_COMMIT_TYPE:
                                    key = (topic, queue_id)
                                    cq = queues.get(key)
                                    if cq is None:
                                        cq = queues[key] = find_queue(topic, queue_id)
                                    try:
                                        if not cq.put_message_position_info(phy, total, tags_code, queue_offset):
                                            raise OSError(_NOT_TAKEN)
                                    except OSError as e:
                                        self._unit_failed(cq, start + pos, e)
                                        return count, start + pos, last_cq_ts, _STOP_ERROR
                                    last_cq_ts = store_ts
                                    arrivals[key] = queue_offset + 1
                                if add_index is not None:
                                    if tran == TRANSACTION_ROLLBACK_TYPE:
                                        keys = uniq = None
                                    add_index((phy, store_ts, topic, keys, uniq))
                                count += 1
                                pos = rec_end
                                continue
            dr = check(view, pos, end, False)
            size = dr.msg_size
            if dr.success:
                if size == 0:  # end-of-file blank record: continue at the next segment
                    return count, cl.roll_next_file(start + pos), last_cq_ts, _STOP_NONE
                tran = dr.sys_flag & TRANSACTION_TYPE_MASK
                if tran in _CQ_TYPES:
                    key = (dr.topic, dr.queue_id)
                    cq = queues.get(key)
                    if cq is None:
                        cq = queues[key] = find_queue(dr.topic, dr.queue_id)
                    try:
                        if not cq.put_message_position_info(
                            dr.commit_log_offset, size, dr.tags_code, dr.consume_queue_offset
                        ):
                            raise OSError(_NOT_TAKEN)
                    except OSError as e:
                        self._unit_failed(cq, start + pos, e)
                        return count, start + pos, last_cq_ts, _STOP_ERROR
                    last_cq_ts = dr.store_timestamp
                    arrivals[key] = dr.consume_queue_offset + 1
                if add_index is not None:
                    rollback = tran == TRANSACTION_ROLLBACK_TYPE
                    add_index((
                        dr.commit_log_offset, dr.store_timestamp, dr.topic,
                        None if rollback else dr.keys, None if rollback else dr.uniq_key,
                    ))
                count += 1
                pos += size
            elif size > 0:
                log.error(
                    "reput: record at commit-log offset %d has a wrong length (%s); skipping %d bytes",
                    start + pos,
                    dr.reason,
                    size,
                )
                pos += size
            elif _incomplete(view, pos, end, (start + end) % cl.file_size != 0):
                break  # the rest of this record is not readable yet (below the limit): wait for it
            else:
                bad = start + pos
                if bad != self._bad_offset:
                    self._bad_offset = bad
                    self.last_error = f"unreadable record at commit-log offset {bad}: {dr.reason}"
                    log.error("reput: %s; dispatch stops there", self.last_error)
                return count, bad, last_cq_ts, _STOP_BAD
        return count, start + pos, last_cq_ts, _STOP_NONE

    def _unit_failed(self, cq: ConsumeQueue, at: int, error: OSError) -> None:
        """A consume-queue write the disk refused: the record at commit-log offset ``at`` is dispatched again
        later."""
        self.last_error = f"consume queue {cq.topic}-{cq.queue_id}: {error}"
        if self.on_write_error is not None and error.errno is not None:
            self.on_write_error(error, cq.queue_dir)
        log.error("reput: cannot write at commit-log offset %d: %s", at, self.last_error)

    def _finish_batch(self, arrivals: dict[tuple[str, int], int], last_cq_ts: int) -> None:
        """Publish a batch: checkpoint time, progress waiters, then one arrival call per queue."""
        if last_cq_ts and self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp = last_cq_ts
        with self._progress:
            self._progress.notify_all()
        listeners = self._listeners
        if not listeners or not arrivals:
            return
        for (topic, queue_id), max_offset in arrivals.items():
            for fn in listeners:
                try:
                    fn(topic, queue_id, max_offset)
                except Exception:
                    log.exception("arrival listener %r failed for %s-%d", fn, topic, queue_id)

    # ------------------------------------------------------------------ thread
    def wakeup(self) -> None:
        self.notify()

    def run(self) -> None:
        while not self.stopped:
            with self._wakeup:
                if not self._pending:
                    self._wakeup.wait(self.idle_wait_ms / 1000.0)
                self._pending = False
            if self.stopped:
                break
            try:
                self.do_reput()
                if self.index_behind_from is not None and time.monotonic() >= self._index_retry_at:
                    with self._pass_lock:
                        self.catch_up_index()
            except Exception as e:  # keep the thread alive; the offset did not move past the failure
                self.last_error = f"{type(e).__name__}: {e}"
                self.last_stop = _STOP_ERROR
                log.exception("reput pass failed at offset %d", self.reput_from_offset)
            if self.last_stop == _STOP_ERROR:
                self.wait(self.retry_wait_ms / 1000.0)  # disk trouble: retry later, do not spin

    def shutdown(self, drain_timeout: float = 5.0) -> None:
        """Let dispatch catch up (bounded by ``drain_timeout`` seconds), then stop the thread."""
        if self._thread is None:
            return
        if drain_timeout > 0:
            self.notify()
            self.wait_dispatched(timeout=drain_timeout)
        super().shutdown()
        if self.index_behind_from is not None:  # one last try: space may be back
            self.catch_up_index()
        with self._progress:
            self._progress.notify_all()
