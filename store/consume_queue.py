"""ConsumeQueue: the per (topic, queue) logical queue of 20-byte units (docs/design/store-formats.md#consume-queues), and the table of all.

A unit is ``(commit-log offset int64, size int32, tagsCode int64)``; unit ``i`` lives at logical byte
``i*20`` of ``consumequeue/{topic}/{queueId}/``, split into files named by their first logical byte. Files
and bytes are RocketMQ's, so a RocketMQ broker (or our Spark pipeline) can read them.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from raftmq.store.config import CQ_STORE_UNIT_SIZE
from raftmq.store.errors import StoreLoadError
from raftmq.store.lazy_files import LazyFiles, descriptor_budget
from raftmq.store.mapped_file import MappedFile
from raftmq.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger("raftmq.store.consume_queue")

UNIT = struct.Struct(">qiq")
_pack_unit = UNIT.pack
BLANK_UNIT_SIZE = 0x7FFFFFFF  # fillPreBlank units: (0, Integer.MAX_VALUE, 0)
_BLANK_UNIT = UNIT.pack(0, BLANK_UNIT_SIZE, 0)


@dataclass(frozen=True)
class KnownRange:
    """A queue as the last clean stop left it (``dispatched.json``): units of queue offsets ``[first, next)``, the
    commit-log offset of the record of unit ``first`` (-1: not known) and the end of the last unit's record
    (``max_physic_offset``; -1: not known)."""

    first: int
    next: int
    first_phy: int = -1
    max_phy: int = -1


@dataclass(frozen=True)
class LoadDamage:
    """What a queue's files, opened on first use, lack against its ``KnownRange``: ``cut_at`` drops the units from
    that queue offset on (None: nothing), and the log is re-dispatched from the end of the record of unit
    ``rebuild_after`` (-1: from the log's first record; None: nothing to re-dispatch)."""

    reason: str
    cut_at: int | None
    rebuild_after: int | None


START = -1  # LoadDamage.rebuild_after: the whole log


class ConsumeQueue:
    """One logical queue (RocketMQ ``ConsumeQueue``).

    ``max_physic_offset`` is the commit-log end of the last unit written (-1 when unknown): dispatching a
    record that ends at or below it is a no-op, which makes re-dispatch after a crash idempotent.
    ``min_logic_offset`` is a logical *byte* offset; queue offsets are ``bytes / 20``.

    Its files are opened on first use (``mapped_file_queue``), not before: a queue the last clean stop described
    (``known``) answers its offsets without them, and is checked against that description when they are opened
    (``on_damage`` hears what does not match). ``on_write`` hears the first write after each flush.
    """

    # slots: a store may hold 100,000 queues (docs/operations/capacity.md); "__dict__" only lets a test wrap a method
    __slots__ = ("topic", "queue_id", "store_path", "mapped_file_size", "units_per_file", "preallocate",
                 "max_physic_offset", "min_logic_offset", "first_phy", "_mfq", "_known", "_lazy", "_load_lock",
                 "_on_damage", "_on_write", "dirty", "__dict__")

    def __init__(
        self, topic: str, queue_id: int, store_path: str, mapped_file_size: int, *, preallocate: bool = True,
        lazy: LazyFiles | None = None, known: KnownRange | None = None, load_lock: threading.RLock | None = None,
        on_damage: Callable[[ConsumeQueue, LoadDamage], None] | None = None,
        on_write: Callable[[ConsumeQueue], None] | None = None,
    ) -> None:
        if mapped_file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(
                f"consume queue file size {mapped_file_size} is not a multiple of {CQ_STORE_UNIT_SIZE}"
            )
        self.topic = topic
        self.queue_id = queue_id
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.units_per_file = mapped_file_size // CQ_STORE_UNIT_SIZE
        self.preallocate = preallocate
        self._lazy = lazy
        self._known = known
        self._load_lock = load_lock or threading.RLock()
        self._on_damage = on_damage
        self._on_write = on_write
        self.dirty = False  # written since the last flush looked at it
        self._mfq: MappedFileQueue | None = None
        self.max_physic_offset = known.max_phy if known is not None else -1
        self.min_logic_offset = known.first * CQ_STORE_UNIT_SIZE if known is not None else 0
        self.first_phy = known.first_phy if known is not None else -1  # the record of the first unit; -1: unknown

    @property
    def queue_dir(self) -> str:
        return os.path.join(self.store_path, self.topic, str(self.queue_id))

    # ------------------------------------------------------------------ files, opened on first use
    @property
    def mapped_file_queue(self) -> MappedFileQueue:
        mfq = self._mfq
        return mfq if mfq is not None else self._open()

    @property
    def loaded(self) -> bool:
        return self._mfq is not None

    def has_files(self) -> bool:
        """The queue has files (a queue the last clean stop described does, without opening them)."""
        mfq = self._mfq
        if mfq is None:
            if self._known is not None:
                return True
            mfq = self._open()
        return bool(mfq.mapped_files)

    def _load_file_queue(self) -> MappedFileQueue:
        """This queue's files, opened; a file of the wrong size or one the OS will not open raises
        ``StoreLoadError`` naming the queue."""
        mfq = MappedFileQueue(self.queue_dir, self.mapped_file_size, preallocate=self.preallocate, lazy=self._lazy)
        try:
            mfq.load()
        except StoreLoadError:
            raise
        except OSError as e:
            raise StoreLoadError(f"cannot load consume queue {self.queue_dir}: {e}") from e
        return mfq

    def load(self) -> None:
        """Open this queue's files now, for ``recover``."""
        with self._load_lock:
            mfq = self._load_file_queue()
            self._known = None
            self._mfq = mfq

    def _open(self) -> MappedFileQueue:
        """First use: open the files; check them against what the last clean stop left, or recover them."""
        damage = None
        with self._load_lock:
            mfq = self._mfq
            if mfq is not None:
                return mfq
            mfq = self._load_file_queue()
            known, self._known = self._known, None
            zeroed = False
            if known is not None:
                damage = self._adopt(mfq, known)
            elif mfq.mapped_files:
                zeroed = self._recover_files(mfq)
            self._mfq = mfq
        if zeroed or damage is not None:
            self._written()
        if damage is not None:
            log.error("consume queue %s-%d %s", self.topic, self.queue_id, damage.reason)
            if self._on_damage is not None:
                self._on_damage(self, damage)
        return mfq

    def _adopt(self, mfq: MappedFileQueue, known: KnownRange) -> LoadDamage | None:
        """Take the end the last clean stop recorded (no scan), after checking the files hold ``known``: present from
        its first unit, without a hole, a valid last unit, nothing written past it. What they lack is returned."""
        files = mfq.mapped_files
        unit = CQ_STORE_UNIT_SIZE
        self.max_physic_offset = -1  # until the files are found to hold the known range
        left = f"the last clean stop left units {known.first}..{known.next - 1}"
        if not files:
            return LoadDamage(f"is missing ({left}): rebuilding it from the commit log", None, START)
        if files[0].file_from_offset > known.first * unit:
            return LoadDamage(f"starts at queue offset {files[0].file_from_offset // unit} ({left}): rebuilding it "
                              "from the commit log", 0, START)
        hole = _first_missing_unit(files, self.mapped_file_size)
        if hole is not None and hole < known.next:
            return LoadDamage(f"lacks the file of queue offset {hole} ({left}): rebuilding from there", hole, hole - 1)
        end = known.next * unit
        past = [mf for mf in files if mf.file_from_offset >= end and mf.file_from_offset > files[0].file_from_offset]
        mfq.truncate_dirty_files(end)  # positions at the recorded end; files wholly past it go
        mfq.flushed_where = end
        files = mfq.mapped_files
        last = files[-1]
        if last.file_from_offset + self.mapped_file_size < end or (
                known.next > known.first and not _valid_unit(self._unit_in(files, known.next - 1))):
            self._recover_files(mfq)  # the end is not where the stop left it: find where the units end
            have = mfq.get_max_offset() // unit
            return LoadDamage(f"ends at queue offset {have} ({left}): rebuilding it from the commit log", None,
                              have - 1 if have > known.first else START)
        self.max_physic_offset = known.max_phy
        if known.max_phy < 0 and known.next > known.first:
            phy, size, _tags = self._unit_in(files, known.next - 1)
            self.max_physic_offset = phy + size if size != BLANK_UNIT_SIZE else -1
        if past or _zero_tail(last, last.wrote_position):
            return LoadDamage(f"holds units past queue offset {known.next} where the last clean stop left it: "
                              "cut", None, None)
        return None

    def _unit_in(self, files: list[MappedFile], index: int) -> tuple[int, int, int]:
        offset = index * CQ_STORE_UNIT_SIZE
        for mf in files:
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return UNIT.unpack_from(mf.buffer, offset - mf.file_from_offset)
        return 0, 0, 0

    def recover(self) -> None:
        """Find the end of the valid units in the last 3 files and cut the queue there (``ConsumeQueue.recover``)."""
        if self._recover_files(self.mapped_file_queue):
            self._written()

    def _recover_files(self, mfq: MappedFileQueue) -> bool:
        """``recover`` on ``mfq`` (this queue's files, maybe not published yet); True when it zeroed stale units.

        A unit is valid when ``offset >= 0 and size > 0``; fillPreBlank units count as valid but do not
        move ``max_physic_offset``.
        """
        files = mfq.mapped_files
        if not files:
            return False
        index = max(0, len(files) - 3)
        size = self.mapped_file_size
        while True:
            mf = files[index]
            valid, last_end = _scan_valid_units(mf, size)
            if last_end >= 0:
                self.max_physic_offset = last_end
            if valid == size and index + 1 < len(files):
                index += 1
                continue
            break
        process_offset = mf.file_from_offset + valid
        mfq.flushed_where = process_offset
        mfq.truncate_dirty_files(process_offset)
        if not _zero_tail(mf, valid):
            return False
        log.warning("consume queue %s-%d: cleared stale units after queue byte %d", self.topic, self.queue_id,
                    process_offset)
        return True

    def may_hold_units_from(self, phy_offset: int) -> bool:
        """False for an unopened queue whose last unit is known to end at or before ``phy_offset``."""
        known = self._known
        return self._mfq is not None or known is None or not 0 <= known.max_phy <= phy_offset

    def known_range(self) -> tuple[int, int, int, int]:
        """(first, next queue offset, first unit's record, end of the last unit's record) as a clean stop records
        them (``store.dispatch_marker``); an unopened queue's are what it was adopted with."""
        known = self._known
        if self._mfq is None and known is not None:
            return known.first, known.next, known.first_phy, known.max_phy
        first, nxt = self.get_min_offset_in_queue(), self.get_max_offset_in_queue()
        phy = self.first_phy
        if phy < 0 and first < nxt:
            unit = self.unit_at(first)
            phy = unit[0] if unit is not None and unit[1] != BLANK_UNIT_SIZE else -1
        return first, nxt, phy, self.max_physic_offset

    def _written(self) -> None:
        """Bytes of a file changed: the next flush syncs this queue."""
        if not self.dirty:
            self.dirty = True
            if self._on_write is not None:
                self._on_write(self)

    # ------------------------------------------------------------------ offsets
    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_max_offset_in_queue(self) -> int:
        """The next queue offset to be written (``(last.from + last.wrotePos) / 20``)."""
        if self._mfq is None and self._known is not None:
            return self._known.next
        return self.mapped_file_queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def get_message_total_in_queue(self) -> int:
        return self.get_max_offset_in_queue() - self.get_min_offset_in_queue()

    def first_missing_unit(self) -> int | None:
        """The first queue offset of a file missing between this queue's first and last file (a deleted or lost
        file: retention only ever deletes from the front), or None."""
        return _first_missing_unit(self.mapped_file_queue.mapped_files, self.mapped_file_size)

    def roll_next_file(self, index: int) -> int:
        """The first queue offset of the file after the one holding ``index``."""
        return index + self.units_per_file - index % self.units_per_file

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Make the first unit pointing at or above ``phy_min_offset`` the queue's minimum (``correctMinOffset``).

        fillPreBlank units never become the minimum (RocketMQ would let them when the commit log starts at 0),
        and when every unit of the first file points below ``phy_min_offset`` the minimum moves past them
        (RocketMQ would leave it pointing into a deleted file).
        """
        mf = self.mapped_file_queue.get_first_mapped_file()
        if mf is None:
            return
        wrote = mf.wrote_position
        view = mf.read(0, wrote)
        try:
            for i, (phy, size, _tags) in enumerate(UNIT.iter_unpack(view)):
                if phy >= phy_min_offset and size != BLANK_UNIT_SIZE:
                    self.min_logic_offset = mf.file_from_offset + i * CQ_STORE_UNIT_SIZE
                    self.first_phy = phy
                    return
        finally:
            view.release()
        self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + wrote)
        self.first_phy = -1

    # ------------------------------------------------------------------ write
    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Write the unit of queue offset ``cq_offset`` (``putMessagePositionInfo``); True when it is in place.

        Already-built units are skipped (by ``max_physic_offset`` and by position). The first file of a queue
        that starts at ``cq_offset > 0`` is filled with blank units up to it (``fillPreBlank``) and the
        queue's minimum starts there. A gap inside a queue (a bug upstream) is filled with blank units too,
        so a unit always lands at its own logical position.
        """
        if offset + size <= self.max_physic_offset:
            return True
        files = self.mapped_file_queue.mapped_files
        if files:  # the common case first: the unit continues the queue in its last file
            mf = files[-1]
            wrote = mf.wrote_position
            if (
                wrote < self.mapped_file_size
                and cq_offset * CQ_STORE_UNIT_SIZE == mf.file_from_offset + wrote
                and mf.append(_pack_unit(offset, size, tags_code))
            ):
                self.max_physic_offset = offset + size
                if not self.dirty:
                    self._written()
                return True
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        mfq = self.mapped_file_queue
        first_create = not mfq.mapped_files
        mf = mfq.get_last_mapped_file(expect)
        if mf is None:
            return False
        if first_create and cq_offset != 0 and mf.wrote_position == 0:
            self.min_logic_offset = expect
            mfq.flushed_where = mf.file_from_offset
        if first_create:
            self.first_phy = offset
        current = mf.file_from_offset + mf.wrote_position
        if expect < current:
            log.debug("consume queue %s-%d: unit %d already built", self.topic, self.queue_id, cq_offset)
            return True
        if expect > current:
            if not first_create:
                log.error(
                    "consume queue %s-%d: queue offset %d expected at byte %d but the queue ends at %d; "
                    "filling the gap with blank units",
                    self.topic,
                    self.queue_id,
                    cq_offset,
                    expect,
                    current,
                )
            mf = self._fill_blank_until(expect)
        self._written()
        if not mf.append(UNIT.pack(offset, size, tags_code)):
            return False
        self.max_physic_offset = offset + size
        return True

    def _fill_blank_until(self, until: int) -> MappedFile:
        mfq = self.mapped_file_queue
        while True:
            mf = mfq.get_last_mapped_file(until)
            assert mf is not None
            current = mf.file_from_offset + mf.wrote_position
            if current >= until:
                return mf
            stop = min(until, mf.file_from_offset + self.mapped_file_size)
            mf.append(_BLANK_UNIT * ((stop - current) // CQ_STORE_UNIT_SIZE))

    # ------------------------------------------------------------------ read
    def get_index_buffer(self, start_index: int) -> memoryview | None:
        """Units from queue offset ``start_index`` to the end of what is written in its file (``getIndexBuffer``).

        None below the minimum, past the end, or in a deleted file. The view pins the mapping: release it.
        """
        offset = start_index * CQ_STORE_UNIT_SIZE
        if start_index < 0 or offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset % self.mapped_file_size
        wrote = mf.wrote_position
        if pos >= wrote:
            return None
        try:
            return mf.read(pos, wrote - pos)
        except ValueError:  # deleted by retention meanwhile
            return None

    def read_units(self, start_index: int, max_count: int) -> list[tuple[int, int, int]]:
        """Up to ``max_count`` units ``(phy_offset, size, tags_code)`` from ``start_index``, across files."""
        out: list[tuple[int, int, int]] = []
        index = start_index
        while len(out) < max_count:
            view = self.get_index_buffer(index)
            if view is None:
                break
            try:
                n = min(len(view) // CQ_STORE_UNIT_SIZE, max_count - len(out))
                out.extend(UNIT.iter_unpack(view[: n * CQ_STORE_UNIT_SIZE]))
            finally:
                view.release()
            index += n
        return out

    def get_unit(self, index: int) -> tuple[int, int, int] | None:
        units = self.read_units(index, 1)
        return units[0] if units else None

    def unit_at(self, index: int) -> tuple[int, int, int] | None:
        """The unit at queue offset ``index`` as written, or None when no file holds it (no minimum check)."""
        offset = index * CQ_STORE_UNIT_SIZE
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None or index < 0:
            return None
        pos = offset - mf.file_from_offset
        if pos + CQ_STORE_UNIT_SIZE > mf.wrote_position:
            return None
        try:
            return UNIT.unpack_from(mf.buffer, pos)
        except ValueError:  # deleted by retention meanwhile
            return None

    def get_offset_in_queue_by_time(
        self,
        timestamp: int,
        store_timestamp_at: Callable[[int, int], int],
        min_phy_offset: int = 0,
    ) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` (ms).

        Binary search over the queue (store times grow with commit-log order); ``store_timestamp_at(phy,
        size)`` reads a message's STORETIMESTAMP (negative when unreadable). Units below ``min_phy_offset``
        (already deleted from the commit log) count as older. If every message is older, the result is the
        max offset (where the next message will go); for an empty queue it is the min offset.
        """
        low = self.get_min_offset_in_queue()
        high = self.get_max_offset_in_queue()
        while low < high:
            mid = (low + high) // 2
            unit = self.get_unit(mid)
            if unit is None:  # its file went away under us: treat as older
                low = mid + 1
                continue
            phy, size, _tags = unit
            if size == BLANK_UNIT_SIZE or phy < min_phy_offset:
                low = mid + 1
                continue
            ts = store_timestamp_at(phy, size)
            if ts < timestamp:
                low = mid + 1
            else:
                high = mid
        return low

    # ------------------------------------------------------------------ truncation, expiry, flush
    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop units pointing at or beyond ``phy_offset`` (the commit log ends there now).

        Works from the last file backwards (``truncateDirtyLogicFiles``). Unlike RocketMQ, an all-zero first
        unit is not kept (it is not a unit), blank units do not move ``max_physic_offset``, only written
        units are looked at, and the dropped units are zeroed so a later recovery cannot bring them back.
        ``max_physic_offset`` becomes the end of the last unit kept, looked up in earlier files when the last
        keeps none (an empty last file, created just before a kill: RocketMQ reads its zero unit and sets 0),
        so re-dispatch never skips the units that file was about to get.

        The queue's first file is emptied rather than deleted when it starts past queue offset 0 (its
        earlier units went to retention): its name keeps the queue's next offset at its start, so offsets
        already handed out are never reused (RocketMQ would delete it and restart the queue at 0, and a
        replica that truncated would diverge from one that did not). A first file at 0 is deleted, which
        leaves the same files as a replica that never had the queue. A queue whose last unit is known to end
        at or before ``phy_offset`` is left unopened.
        """
        if not self.may_hold_units_from(phy_offset):
            return
        mfq = self.mapped_file_queue
        self.max_physic_offset = -1  # the end of the last kept unit, found below
        self.first_phy = -1
        while True:
            mf = mfq.get_last_mapped_file(need_create=False)
            if mf is None:
                return
            wrote = mf.wrote_position
            view = mf.read(0, wrote)
            try:
                kept = 0
                delete = False
                for i, (phy, size, _tags) in enumerate(UNIT.iter_unpack(view)):
                    if i == 0 and phy >= phy_offset:
                        delete = True
                        break
                    if phy < 0 or size <= 0 or phy >= phy_offset:
                        break
                    kept = (i + 1) * CQ_STORE_UNIT_SIZE
                    if size != BLANK_UNIT_SIZE:
                        self.max_physic_offset = phy + size
            finally:
                view.release()
            if delete and (len(mfq.mapped_files) > 1 or mf.file_from_offset == 0):
                mfq.delete_last_mapped_file()
                continue
            if wrote > kept:
                mf.write_at(kept, bytes(wrote - kept))
                self._written()
            mf.wrote_position = kept
            mf.flushed_position = min(mf.flushed_position, kept)
            mfq.flushed_where = min(mfq.flushed_where, mf.file_from_offset + kept)
            self.min_logic_offset = min(self.min_logic_offset, mf.file_from_offset + kept)
            if self.max_physic_offset < 0:  # no unit kept in the last file: the last one is in an earlier file
                for earlier in reversed(mfq.mapped_files[:-1]):
                    _valid, last_end = _scan_valid_units(earlier, self.mapped_file_size)
                    if last_end >= 0:
                        self.max_physic_offset = last_end
                        break
            return

    def rewrite_unit(self, index: int, unit: tuple[int, int, int]) -> bool:
        """Overwrite the written unit at queue offset ``index`` with ``unit`` (the bytes reput writes for its
        record: a damaged unit repaired in place, readers never see the queue shrink); False if not written."""
        offset = index * CQ_STORE_UNIT_SIZE
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None or index < 0 or offset - mf.file_from_offset + CQ_STORE_UNIT_SIZE > mf.wrote_position:
            return False
        mf.write_at(offset - mf.file_from_offset, UNIT.pack(*unit))
        self._written()
        if index == self.get_min_offset_in_queue():
            self.first_phy = unit[0]
        mf.flushed_position = min(mf.flushed_position, offset - mf.file_from_offset)
        self.mapped_file_queue.flushed_where = min(self.mapped_file_queue.flushed_where, offset)
        if index == self.get_max_offset_in_queue() - 1:
            self.max_physic_offset = unit[0] + unit[1]
        return True

    def cut_at(self, index: int) -> None:
        """Drop the units from queue offset ``index`` on, so reput writes them again from the commit log.

        Used when they are damaged or missing (consume queues are derived data: rebuilt, never trusted). The
        dropped bytes are zeroed and later files deleted; when ``index`` lies before the first file (that file
        is missing) every file goes and the queue starts again where reput puts its first unit.
        """
        cut = index * CQ_STORE_UNIT_SIZE
        mfq = self.mapped_file_queue
        self.first_phy = -1
        while mfq.mapped_files and mfq.mapped_files[-1].file_from_offset >= cut:
            last = mfq.mapped_files[-1]
            if last.file_from_offset == cut and len(mfq.mapped_files) == 1 and cut > 0:
                break  # keep the (emptied) first file: its name holds the queue's start
            mfq.delete_last_mapped_file()
        self.max_physic_offset = -1
        if not mfq.mapped_files:
            self.min_logic_offset = 0
            mfq.flushed_where = 0
            return
        mf = mfq.mapped_files[-1]
        pos = min(cut - mf.file_from_offset, self.mapped_file_size)
        wrote = mf.wrote_position
        if wrote > pos:
            self._written()
            mf.write_at(pos, bytes(wrote - pos))
            mf.wrote_position = pos
            mf.flushed_position = min(mf.flushed_position, pos)
        mfq.flushed_where = min(mfq.flushed_where, mf.file_from_offset + mf.wrote_position)
        self.min_logic_offset = min(self.min_logic_offset, mf.file_from_offset + mf.wrote_position)

    def delete_expired_file(self, commit_log_min_offset: int) -> int:
        """Delete files (never the last) wholly below the commit log's minimum, then correct the minimum. A queue
        whose first unit's record is known to be above that minimum is left unopened."""
        if self._mfq is None and self._known is not None and (
                self._known.first == self._known.next
                or 0 <= self._known.first_phy and commit_log_min_offset <= self._known.first_phy):
            return 0
        count = self.mapped_file_queue.delete_expired_file_by_offset(
            commit_log_min_offset, CQ_STORE_UNIT_SIZE
        )
        self.correct_min_offset(commit_log_min_offset)
        return count

    def flush(self, least_pages: int) -> bool:
        """Flush per RocketMQ's least-pages rule; True when nothing new became durable."""
        mfq = self._mfq
        return mfq.flush(least_pages) if mfq is not None else True

    def flush_all(self) -> None:
        mfq = self._mfq
        if mfq is not None:
            mfq.flush_all()

    def unflushed(self) -> bool:
        """Written bytes not yet durable (an in-place patch included)."""
        mfq = self._mfq
        return mfq is not None and mfq.how_much_fall_behind() > 0

    def close(self) -> None:
        mfq = self._mfq
        if mfq is not None:
            mfq.close()

    def destroy(self) -> None:
        """Delete every file of this queue and reset its offsets."""
        mfq = self.mapped_file_queue
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self.first_phy = -1
        mfq.destroy()

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue({self.topic!r}, {self.queue_id}, min={self.get_min_offset_in_queue()}, "
            f"max={self.get_max_offset_in_queue()}, max_phy={self.max_physic_offset})"
        )


_ZERO_CHUNK = bytes(64 * 1024)


def _zero_tail(mf: MappedFile, pos: int) -> bool:
    """Zero stale units after ``pos`` in ``mf`` (past a torn unit, or left by an older truncation); True if any.

    Units are written in order, so stale ones form a run right after ``pos``: the scan stops at the first
    all-zero 64 KiB chunk instead of reading the whole (up to 6 MB) file of every queue at every start.
    """
    buf = mf.buffer
    size = mf.file_size
    found = False
    while pos < size:
        n = min(len(_ZERO_CHUNK), size - pos)
        if buf[pos : pos + n] == _ZERO_CHUNK[:n]:
            break
        buf[pos : pos + n] = _ZERO_CHUNK[:n]
        found = True
        pos += n
    return found


def _first_missing_unit(files: list[MappedFile], file_size: int) -> int | None:
    """The first queue offset of a file missing between the first and last of ``files``, or None."""
    for prev, cur in zip(files, files[1:], strict=False):
        if cur.file_from_offset != prev.file_from_offset + file_size:
            return (prev.file_from_offset + file_size) // CQ_STORE_UNIT_SIZE
    return None


def _valid_unit(unit: tuple[int, int, int]) -> bool:
    return unit[0] >= 0 and unit[1] > 0


def _scan_valid_units(mf: MappedFile, file_size: int) -> tuple[int, int]:
    """(bytes of leading valid units, end phy offset of the last non-blank one or -1)."""
    view = mf.read(0, file_size)
    valid = 0
    last_end = -1
    try:
        for phy, size, _tags in UNIT.iter_unpack(view):
            if phy < 0 or size <= 0:
                break
            valid += CQ_STORE_UNIT_SIZE
            if size != BLANK_UNIT_SIZE:
                last_end = phy + size
    finally:
        view.release()
    return valid, last_end


class ConsumeQueueTable:
    """All consume queues of a store: ``{topic: {queue_id: ConsumeQueue}}`` (RocketMQ ``consumeQueueTable``).

    After a clean stop the queues are ``adopt``ed from what the stop recorded and opened on first use; otherwise
    ``load`` opens every one. Flushes visit the queues written since the previous one, not every queue.
    """

    def __init__(self, store_path: str, mapped_file_size: int, *, preallocate: bool = True,
                 lazy: LazyFiles | None = None) -> None:
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.preallocate = preallocate
        self.lazy = lazy if lazy is not None else LazyFiles()
        self._table: dict[str, dict[int, ConsumeQueue]] = {}
        self._lock = threading.Lock()
        self._load_lock = threading.RLock()  # one queue opened at a time (a first use opens its files)
        self._dirty: set[ConsumeQueue] = set()
        self._dirty_lock = threading.Lock()
        # the store hears of a queue whose files, opened on first use, do not hold what the last clean stop left
        self.on_load_damage: Callable[[ConsumeQueue, LoadDamage], None] | None = None

    @classmethod
    def from_config(cls, cfg: Any) -> ConsumeQueueTable:
        return cls(cfg.consume_queue_dir, cfg.consume_queue_file_size, preallocate=cfg.preallocate,
                   lazy=LazyFiles(descriptor_budget(cfg.max_mapped_consume_queue_files),
                                  cfg.consume_queue_idle_seconds))

    def _new_queue(self, topic: str, queue_id: int, known: KnownRange | None = None) -> ConsumeQueue:
        return ConsumeQueue(topic, queue_id, self.store_path, self.mapped_file_size, preallocate=self.preallocate,
                            lazy=self.lazy, known=known, load_lock=self._load_lock, on_damage=self._load_damaged,
                            on_write=self._written)

    def _load_damaged(self, cq: ConsumeQueue, damage: LoadDamage) -> None:
        if self.on_load_damage is not None:
            self.on_load_damage(cq, damage)

    def _written(self, cq: ConsumeQueue) -> None:
        with self._dirty_lock:
            self._dirty.add(cq)

    # ------------------------------------------------------------------ lookup
    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self._table.get(topic)
        return queues.get(queue_id) if queues else None

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue object (files are created on its first write), as ``findConsumeQueue`` does."""
        queues = self._table.get(topic)
        if queues is not None:
            cq = queues.get(queue_id)
            if cq is not None:
                return cq
        with self._lock:
            queues = self._table.setdefault(topic, {})
            cq = queues.get(queue_id)
            if cq is None:
                cq = self._new_queue(topic, queue_id)
                # copy on write, so iterating readers never see the dict change size
                self._table[topic] = {**queues, queue_id: cq}
            return cq

    def topics(self) -> list[str]:
        """Topics with at least one queue that has files (a truncated-away queue does not count)."""
        return [t for t, queues in list(self._table.items()) if any(q.has_files() for q in queues.values())]

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic`` that have files."""
        return sorted(qid for qid, q in self._table.get(topic, {}).items() if q.has_files())

    def queues(self) -> Iterator[ConsumeQueue]:
        for queues in list(self._table.values()):
            yield from list(queues.values())

    def loaded_queues(self) -> Iterator[ConsumeQueue]:
        """The queues whose files are open (used since the start, or all of them after ``load``)."""
        return (cq for cq in self.queues() if cq.loaded)

    # ------------------------------------------------------------------ load / recover
    def load(self) -> None:
        """Open ``consumequeue/{topic}/{queueId}``; directories whose name is not an integer are skipped."""
        if not os.path.isdir(self.store_path):
            return
        for topic in sorted(os.listdir(self.store_path)):
            topic_dir = os.path.join(self.store_path, topic)
            if not os.path.isdir(topic_dir):
                continue
            for name in sorted(os.listdir(topic_dir)):
                try:
                    queue_id = int(name)
                except ValueError:
                    log.warning("skipping %s: not a queue id", os.path.join(topic_dir, name))
                    continue
                if not os.path.isdir(os.path.join(topic_dir, name)):
                    continue
                self.find_or_create(topic, queue_id).load()

    def adopt(self, known: dict[tuple[str, int], KnownRange]) -> None:
        """Take the queues the last clean stop recorded without opening a file: each is opened, and checked
        against its range, on first use (``ConsumeQueue.mapped_file_queue``)."""
        table: dict[str, dict[int, ConsumeQueue]] = {}
        for (topic, queue_id), k in known.items():
            table.setdefault(topic, {})[queue_id] = self._new_queue(topic, queue_id, k)
        with self._lock:
            self._table = table

    def recover(self) -> int:
        """Recover every open queue; returns the largest ``max_physic_offset`` (-1 when there is none)."""
        max_phy = -1
        for cq in self.loaded_queues():
            cq.recover()
            max_phy = max(max_phy, cq.max_physic_offset)
        return max_phy

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self.queues()), default=-1)

    def queue_offset_table(self) -> dict[str, int]:
        """``{"topic-queueId": next queue offset}``: the commit log's queue-offset table after recovery."""
        return {f"{cq.topic}-{cq.queue_id}": cq.get_max_offset_in_queue() for cq in self.queues()}

    def correct_min_offsets(self, commit_log_min_offset: int) -> None:
        """Every open queue's minimum against the commit log's (an adopted one's was right at the clean stop, and
        the log's minimum moves only while the store runs: retention corrects it then)."""
        for cq in self.loaded_queues():
            cq.correct_min_offset(commit_log_min_offset)

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        for cq in self.queues():
            cq.truncate_dirty_logic_files(phy_offset)

    # ------------------------------------------------------------------ expiry, flush, deletion
    def delete_expired_files(
        self, commit_log_min_offset: int, interval_ms: int = 0, sleep: Callable[[float], Any] = time.sleep
    ) -> int:
        """Expire every queue against the commit log's minimum, pausing ``interval_ms`` after each deletion."""
        total = 0
        for cq in self.queues():
            n = cq.delete_expired_file(commit_log_min_offset)
            total += n
            if n and interval_ms > 0:
                sleep(interval_ms / 1000.0)
        return total

    def flush(self, least_pages: int) -> None:
        """Flush the queues written since the last flush (the least-pages rule may leave some for the next one),
        and unmap the files nobody used for a while."""
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
        try:
            for cq in dirty:
                cq.dirty = False
                cq.flush(least_pages)
                if cq.unflushed():
                    cq._written()
        except BaseException:
            for cq in dirty:  # flushed again next time (a written queue is never forgotten)
                cq._written()
            raise
        self.lazy.sweep()

    def flush_all(self) -> None:
        """Make every write durable: the directories of new files first, then each open queue's files."""
        self.lazy.sync_directories()
        with self._dirty_lock:
            self._dirty = set()
        for cq in self.loaded_queues():
            cq.dirty = False
            try:
                cq.flush_all()
            except BaseException:
                cq._written()
                raise

    def delete_topic(self, topic: str) -> None:
        """Destroy a deleted topic's queues and its directory."""
        with self._lock:
            queues = self._table.pop(topic, {})
        for cq in queues.values():
            cq.destroy()
        shutil.rmtree(os.path.join(self.store_path, topic), ignore_errors=True)

    def close(self) -> None:
        for cq in self.loaded_queues():
            cq.close()

    def destroy(self) -> None:
        """Delete every consume queue (RocketMQ ``destroyLogics``, used when the commit log is empty)."""
        with self._lock:
            table, self._table = self._table, {}
        for topic, queues in table.items():
            for cq in queues.values():
                cq.destroy()
            try:
                os.rmdir(os.path.join(self.store_path, topic))
            except OSError:  # not empty (foreign files) or already gone
                pass
