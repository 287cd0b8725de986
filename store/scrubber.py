"""Scrubber: re-reads commit-log segments at a bounded rate and checks them, and what is derived from them.

Disks rot silently: a block that was written whole can read back different months later, and nothing notices
until a consumer gets the record. The scrubber walks every *sealed* segment oldest first, then the one being
written up to what reput has dispatched, ``scrub_rate_bytes_per_s`` at most, and for each:

* verifies every record (magic, TOTALSIZE, body CRC, own PHYSICALOFFSET: ``store.integrity.verify_records``);
  damage goes to ``MessageStore.report_commit_log_damage``, which counts it and hands it to the listeners added
  with ``MessageStore.add_commit_log_damage_listener`` (the replicated repair path fetches the range from a
  healthy peer; a single node reports it and ``raftmq store repair`` fixes it);
* compares the consume-queue units of its records with them (``store.derived_check``); a wrong or missing unit
  is rebuilt at once by re-dispatching the commit log (``MessageStore.rebuild_derived``).

After the segments of a pass it checks the sealed index files the same way. The first pass starts
``scrub_first_delay_s`` after the store opened, the next ones ``scrub_interval_s`` after the previous one ended. Progress and findings are in
``stats()`` (metrics, ``cluster status``).
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Any

from raftmq.store.derived_check import check_consume_queues, check_index_files
from raftmq.store.integrity import CorruptRecord, verify_records
from raftmq.store.message import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE
from raftmq.store.service_thread import ServiceThread

log = logging.getLogger("raftmq.store.scrubber")

_SIZE_MAGIC = struct.Struct(">ii")
CHUNK_BYTES = 1 << 20  # verified between two pacing points


class Scrubber(ServiceThread):
    """Background integrity checker of one store; see the module docstring."""

    def __init__(self, store: Any, rate_bytes_per_s: int, interval_s: float, first_delay_s: float | None = None
                 ) -> None:
        self.store = store
        self.rate = max(1, rate_bytes_per_s)
        self.interval_s = interval_s
        self.first_delay_s = interval_s if first_delay_s is None else first_delay_s
        super().__init__("Scrubber", "scrubber")
        self._next_free = 0.0
        self.position = 0  # commit-log offset the scrubber is at (metrics)
        self.bytes_scrubbed = 0
        self.passes = 0
        self.last_full_scrub_ms = 0  # wall time the last complete pass ended (0: none yet)
        self.last_finding = ""

    # ------------------------------------------------------------------ pacing
    def _pace(self, nbytes: int) -> None:
        """Account ``nbytes`` read and sleep as long as needed to stay at or below the rate."""
        self.bytes_scrubbed += nbytes
        now = time.monotonic()
        self._next_free = max(self._next_free, now) + nbytes / self.rate
        delay = self._next_free - now
        if delay > 0:
            self.wait(delay)

    # ------------------------------------------------------------------ one pass
    def run_pass(self) -> int:
        """Scrub every sealed segment once (oldest first), then the sealed index files; returns the number of
        problems found. Stops early (returning what it found) when the scrubber is shut down."""
        found = 0
        done_to = 0
        while not self.stopped:
            mf = self._next_sealed_segment(done_to)
            if mf is None:
                break
            done_to = mf.file_from_offset + mf.file_size
            try:
                found += self._scrub_segment(mf)
            except ValueError:  # retention deleted it meanwhile
                continue
        if not self.stopped:
            found += self._scrub_active_segment()
        if not self.stopped:
            found += self._scrub_index()
            self.passes += 1
            self.last_full_scrub_ms = time.time_ns() // 1_000_000
            log.info("scrub pass %d done: %d bytes read in all, %d problem(s) found this pass",
                     self.passes, self.bytes_scrubbed, found)
        return found

    def _next_sealed_segment(self, from_offset: int) -> Any:
        cl = self.store.commit_log
        files = list(cl.mapped_file_queue.mapped_files) if cl is not None else []
        for mf in files[:-1]:  # the last segment is still being written
            if mf.file_from_offset >= from_offset:
                return mf
        return None

    def _scrub_active_segment(self) -> int:
        """The segment being written, up to what reput has dispatched (records there are complete and written
        once; appends only go past them), so damage in recent records does not wait for the segment to fill."""
        cl, reput = self.store.commit_log, self.store.reput
        files = list(cl.mapped_file_queue.mapped_files) if cl is not None else []
        if not files or reput is None:
            return 0
        mf = files[-1]
        end = min(reput.reput_from_offset, mf.file_from_offset + mf.wrote_position)
        if end <= mf.file_from_offset:
            return 0
        try:
            return self._scrub_segment(mf, end)
        except ValueError:  # retention deleted it meanwhile
            return 0

    def _scrub_segment(self, mf: Any, end_offset: int | None = None) -> int:
        """Check one segment, or its first part up to ``end_offset`` (the segment being written)."""
        base, path = mf.file_from_offset, mf.path
        size = mf.file_size if end_offset is None else end_offset - base
        buf = mf.buffer
        damage: list[CorruptRecord] = []
        pos = 0
        while pos < size and not self.stopped:
            end = min(size, pos + CHUNK_BYTES)
            self.position = base + pos
            found = verify_records(buf, base, pos, end, path)
            damage.extend(found)
            self._pace(end - pos)
            pos = self._walk(buf, found[-1].end - base if found else pos, end, size)
        problems = 0
        if not self.stopped:
            self.store.commit_log_checked(base, base + size, damage)
        if damage:
            problems += len(damage)
            self.last_finding = damage[0].describe()
            self.store.report_commit_log_damage(damage)
        if self.stopped:
            return problems
        reput = self.store.reput
        seg_end = base + size
        if reput is not None and seg_end <= reput.reput_from_offset:  # dispatched: its units must be in place
            check = check_consume_queues(self.store.commit_log, self.store.consume_queues, base, seg_end,
                                         pace=lambda _n: None, topic_exists=self.store._topic_has_queues)
            if check.damage or check.wrong_units:
                self.last_finding = (next(iter(check.damage.values())).describe() if check.damage else
                                     f"{len(check.wrong_units)} consume-queue unit(s) held wrong bytes")
                self.store.rebuild_derived(list(check.damage.values()), found_by="scrubber",
                                           wrong_units=check.wrong_units)
                problems += len(check.damage) + len({w[0] for w in check.wrong_units})
        return problems

    @staticmethod
    def _walk(buf: Any, pos: int, end: int, size: int) -> int:
        """The first record boundary at or after ``end`` following the verified records from ``pos`` (the end of
        the segment when the records stop: blank record, zeros, or damage with nothing valid after it)."""
        while pos < end:
            if pos + 8 > size:
                return size
            total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
            if magic != MESSAGE_MAGIC_CODE or total <= 0 or magic == BLANK_MAGIC_CODE:
                return size
            pos += total
        return pos

    def _scrub_index(self) -> int:
        index = self.store.index_service
        cl = self.store.commit_log
        if index is None or cl is None:
            return 0
        files = list(index.index_files)
        sealed = [f for f in files[:-1] if f.is_write_full()]
        bad = check_index_files(sealed, cl.max_offset)
        if not bad:
            return 0
        self.last_finding = bad[0].describe()
        self.store.rebuild_derived([], index_damage=bad, found_by="scrubber")
        return len(bad)

    # ------------------------------------------------------------------ thread
    def run(self) -> None:
        # the first pass comes soon after the start, not an interval later: the start-up check only looks at what
        # is new since the last clean stop, and damage older than that must not wait an hour to be found
        wait = self.first_delay_s
        while not self.wait(wait):
            wait = self.interval_s
            try:
                self.run_pass()
            except Exception:
                log.exception("scrub pass failed; the next one starts after %ss", self.interval_s)

    def stats(self) -> dict[str, object]:
        return {
            "scrub_bytes_total": self.bytes_scrubbed,
            "scrub_position": self.position,
            "scrub_passes": self.passes,
            "scrub_last_full_timestamp_ms": self.last_full_scrub_ms,
        }
