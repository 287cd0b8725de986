"""Consume queues and index files are derived from the commit log: check them against it, say what to rebuild.

The commit log is the only source of truth. A consume-queue unit is right when it equals what reput would
write for the record that carries its queue offset: ``(PHYSICALOFFSET, TOTALSIZE, tagsCode)``. A queue is
checked by walking the commit log record by record (one sequential read) and looking up, for every record
that goes to a consume queue, the unit at its QUEUEOFFSET. The first wrong or missing unit of a queue is its
damage; everything from there is rebuilt by re-dispatching the commit log from that record (the store's own
reput writes the units, so the result is byte-identical to what it wrote the first time).

Index files cannot be compared unit by unit cheaply (an entry holds only a key hash), so they are checked for
what an intact file always satisfies: a sane header, slots that point at written entries, entries in
commit-log order inside the file's range, chains that point backwards. A file that fails is rebuilt from the
commit-log range it covers.
"""

from __future__ import annotations

import logging
import struct
import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raftmq.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueueTable
from raftmq.store.dispatch import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    dispatch_properties,
)
from raftmq.store.index_file import (
    HASH_SLOT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    IndexFile,
    index_key_hashes,
)
from raftmq.store.integrity import is_quarantine_record
from raftmq.store.java import java_string_hash
from raftmq.store.message import TIMED_TOPICS, check_frame, decode_record

log = logging.getLogger("raftmq.store.derived_check")

_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class QueueDamage:
    """The first wrong or missing unit of one consume queue."""

    topic: str
    queue_id: int
    queue_offset: int  # the first unit to rebuild
    commit_log_offset: int  # the record that belongs there: re-dispatch starts here
    reason: str

    def describe(self) -> str:
        return (f"consume queue {self.topic}-{self.queue_id}: unit {self.queue_offset} {self.reason} "
                f"(its record is at commit-log offset {self.commit_log_offset})")


@dataclass(frozen=True, slots=True)
class IndexDamage:
    """An index file that cannot be intact."""

    path: str
    position: int  # its place in the index file list
    reason: str

    def describe(self) -> str:
        return f"index file {self.path}: {self.reason}"


@dataclass
class ConsumeQueueCheck:
    """What a walk of ``[start, end)`` of the commit log found."""

    start: int
    end: int  # where the walk stopped (a bad record stops it early; the commit-log checker owns that)
    records: int = 0
    damage: dict[tuple[str, int], QueueDamage] = field(default_factory=dict)
    next_queue_offsets: dict[str, int] = field(default_factory=dict)  # "topic-queueId" -> last offset + 1
    # units that exist but hold the wrong bytes: ((topic, queueId), queue offset, the right unit); written in place
    wrong_units: list[tuple[tuple[str, int], int, tuple[int, int, int]]] = field(default_factory=list)
    index_gap_hits: set[int] = field(default_factory=set)  # index_gaps (by position) a keyed record falls into
    last_indexed: int = -1  # commit-log offset of the last record that puts a key into the index
    first_indexed: int = -1  # ... and of the first


def check_consume_queues(
    commit_log: Any,
    consume_queues: ConsumeQueueTable,
    start: int,
    end: int,
    *,
    whole_log: bool = False,
    pace: Callable[[int], None] | None = None,
    topic_exists: Callable[[str], bool] | None = None,
    index_gaps: list[tuple[int, int]] | None = None,
) -> ConsumeQueueCheck:
    """Compare every consume-queue unit that records in ``[start, end)`` of the commit log should have.

    ``whole_log``: ``start`` is the commit log's first record, so units past the last record of their queue (or
    in queues no record mentions) are garbage too. ``pace(nbytes)`` is called after each slice read (the
    scrubber's rate limit). ``topic_exists``: records of other topics (deleted ones: their queues are gone on
    purpose) are not checked. ``index_gaps``: sorted commit-log ranges ``(a, b)`` between two consecutive index
    files; a keyed record strictly inside one means the file that indexed it is missing.
    """
    result = ConsumeQueueCheck(start, start)
    damage = result.damage
    next_offsets = result.next_queue_offsets
    check = commit_log.check_message_and_return_size
    fields = dispatch_fields(check)
    checked_topics: dict[str, bool] = {}  # topic_exists per topic, asked once per walk
    gaps = index_gaps or []
    gap = 0
    offset = start
    while offset < end:
        view = commit_log.get_data(offset, end)
        if view is None:
            break
        n = len(view)
        pos = 0
        next_offset = None
        try:
            while pos < n:
                dr = fields(view, pos, n)
                size = dr.msg_size
                if dr.success and size > 0:
                    result.records += 1
                    if dr.indexed:
                        at = dr.commit_log_offset
                        while gaps and gaps[gap][1] <= at and gap + 1 < len(gaps):
                            gap += 1
                        if gaps and gaps[gap][0] < at < gaps[gap][1]:
                            result.index_gap_hits.add(gap)
                        result.last_indexed = dr.commit_log_offset
                        if result.first_indexed < 0:
                            result.first_indexed = dr.commit_log_offset
                    wanted = checked_topics.get(dr.topic)
                    if wanted is None:
                        wanted = checked_topics[dr.topic] = topic_exists is None or topic_exists(dr.topic)
                    if dr.goes_to_consume_queue and wanted and dr.commit_log_offset == offset + pos:
                        key = (dr.topic, dr.queue_id)
                        qo = dr.consume_queue_offset
                        name = f"{dr.topic}-{dr.queue_id}"
                        expected = next_offsets.get(name)
                        right = (dr.commit_log_offset, size, dr.tags_code)
                        if expected is not None and qo != expected:
                            if qo == 0:
                                # offsets restart at 0 only when the topic was deleted and created again: what
                                # was judged so far belongs to its first life, the queue to this one
                                damage.pop(key, None)
                                result.wrong_units[:] = [w for w in result.wrong_units if w[0] != key]
                            elif not (qo > expected and _gap_is_reserved(consume_queues, key, expected, qo, right)):
                                pos += size  # a record whose QUEUEOFFSET rotted: the commit-log checks own it
                                continue
                        next_offsets[name] = qo + 1
                        if key not in damage:
                            bad = _unit_problem(consume_queues, key, qo, *right)
                            if bad.startswith("is wrong"):
                                result.wrong_units.append((key, qo, right))
                            elif bad:
                                damage[key] = QueueDamage(dr.topic, dr.queue_id, qo, dr.commit_log_offset, bad)
                    pos += size
                elif dr.success:  # end-of-file blank record
                    next_offset = commit_log.roll_next_file(offset + pos)
                    break
                elif size > 0:  # a length mismatch reput skips too
                    pos += size
                else:  # unreadable: commit-log damage is not ours to judge here
                    next_offset = -1
                    break
        finally:
            view.release()
        if pace is not None:
            pace(pos)
        if next_offset == -1:
            offset += pos
            break
        offset = offset + pos if next_offset is None else next_offset
    result.end = min(offset, end) if offset < end else end
    if whole_log and result.end >= end:
        _check_queue_tails(commit_log, consume_queues, result)
    return result


class _Fields:
    """The part of a DispatchRequest the check reads (topic, queue, offsets, size, tags code, CQ rule)."""

    __slots__ = ("topic", "queue_id", "commit_log_offset", "msg_size", "tags_code", "consume_queue_offset",
                 "success", "goes_to_consume_queue", "indexed")

    def __init__(self, topic: str, queue_id: int, phy: int, size: int, tags_code: int, qo: int, cq: bool,
                 indexed: bool) -> None:
        self.topic, self.queue_id, self.commit_log_offset, self.msg_size = topic, queue_id, phy, size
        self.tags_code, self.consume_queue_offset, self.success, self.goes_to_consume_queue = tags_code, qo, True, cq
        self.indexed = indexed


def dispatch_fields(check: Callable[..., Any], with_index: bool = True) -> Callable[[Any, int, int], Any]:
    """A reader of the dispatch fields of the record at ``pos``: the common record through ``check_frame`` and
    ``dispatch_properties`` (the property search reput itself uses for the tags code), without building the full
    property map; blank, bad and schedule-topic records through the store's own ``check`` (decode_dispatch).
    ``with_index=False``: ``indexed`` is not worked out (hashing the keys; a unit check on the read path needs
    none)."""

    def read(view: Any, pos: int, end: int) -> Any:
        try:
            status, size, _reason, parts = check_frame(view, pos, end, False)
        except (struct.error, IndexError, ValueError):
            parts = None
        if parts is None:
            return _with_indexed(check(view, pos, end, False))
        f, _bw, _body_pos, _body_len, tpos, topic_len, ppos, props_len = parts
        topic = str(view[tpos + 1 : tpos + 1 + topic_len], "utf-8", "replace")
        if topic in TIMED_TOPICS:  # their tags code is a delivery time
            return _with_indexed(check(view, pos, end, False))
        tags, keys, uniq = dispatch_properties(str(view[ppos + 2 : ppos + 2 + props_len], "utf-8", "replace")) \
            if props_len > 0 else (None, None, None)
        tran = f[7] & TRANSACTION_TYPE_MASK
        cq = tran in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
        indexed = with_index and tran != TRANSACTION_ROLLBACK_TYPE and bool(index_key_hashes(topic, uniq, keys))
        return _Fields(topic, f[3], f[6], size, java_string_hash(tags) if tags else 0, f[5], cq, indexed)

    return read


def _with_indexed(dr: Any) -> Any:
    """The fields of a message's DispatchRequest, with ``indexed``: it puts at least one key into the index
    (``build_index``'s rules); a blank or bad record's request as it is."""
    if not (dr.success and dr.msg_size > 0):
        return dr
    indexed = dr.goes_to_index and bool(index_key_hashes(dr.topic, dr.uniq_key, dr.keys))
    return _Fields(dr.topic, dr.queue_id, dr.commit_log_offset, dr.msg_size, dr.tags_code, dr.consume_queue_offset,
                   dr.goes_to_consume_queue, indexed)


def _gap_is_reserved(table: ConsumeQueueTable, key: tuple[str, int], expected: int, qo: int,
                     right: tuple[int, int, int]) -> bool:
    """Queue offsets ``[expected, qo)`` have no record (``store repair`` quarantined them and padded the queue
    with blank units, so they are never handed out again): true when the queue agrees, either way round."""
    cq = table.get(*key)
    if cq is None:
        return False
    if cq.unit_at(qo) == right:
        return True
    unit = cq.unit_at(expected)
    return unit is not None and unit[1] == BLANK_UNIT_SIZE


def _unit_problem(table: ConsumeQueueTable, key: tuple[str, int], index: int, phy: int, size: int,
                  tags_code: int) -> str:
    """Why the unit at ``index`` of queue ``key`` is not ``(phy, size, tags_code)``; "" when it is."""
    cq = table.get(*key)
    if cq is None:
        return "is missing (the queue has no files)"
    unit = cq.unit_at(index)
    if unit is None:
        return "is missing"
    if unit != (phy, size, tags_code):
        return f"is wrong: {unit} instead of {(phy, size, tags_code)}"
    return ""


def _check_queue_tails(commit_log: Any, table: ConsumeQueueTable, result: ConsumeQueueCheck) -> None:
    """Units past the last record of their queue (or in a queue no record in the log mentions) are garbage."""
    cl_min = commit_log.min_offset
    for cq in table.queues():
        key = (cq.topic, cq.queue_id)
        if key in result.damage or not cq.mapped_file_queue.mapped_files:
            continue
        expected = result.next_queue_offsets.get(f"{cq.topic}-{cq.queue_id}")
        have = cq.get_max_offset_in_queue()
        if expected is not None:
            for index in range(expected, have):  # units that reserve offsets (store repair); others are garbage
                unit = cq.unit_at(index)
                if unit is not None and not _reserving(commit_log, unit):
                    result.damage[key] = QueueDamage(cq.topic, cq.queue_id, index, commit_log.max_offset,
                                                     f"and the {have - index - 1} after it point at no record")
                    break
            continue
        for index in range(cq.get_min_offset_in_queue(), have):
            unit = cq.unit_at(index)
            if unit is not None and unit[1] != BLANK_UNIT_SIZE and unit[0] >= cl_min:
                result.damage[key] = QueueDamage(cq.topic, cq.queue_id, index, commit_log.max_offset,
                                                 "points at no record of its queue")
                break


def _reserving(commit_log: Any, unit: tuple[int, int, int]) -> bool:
    """A unit that keeps a lost message's queue offset (``store repair``): a blank unit, or one pointing at a
    quarantine record of its size."""
    phy, size, _tags = unit
    if size == BLANK_UNIT_SIZE:
        return True
    raw = commit_log.get_message(phy, size) if phy >= 0 and size > 0 else None
    m = decode_record(raw, 0, check_crc=False, read_body=False).message if raw is not None else None
    return m is not None and m.store_size == size and is_quarantine_record(m.topic, m.properties)


def check_index_header(f: IndexFile, log_max: int) -> str:
    """Why ``f``'s 40-byte header cannot be an intact file's ("" when it can): the cheap part of
    ``check_index_file``, done for every file at start."""
    begin_ts, end_ts, begin_phy, end_phy, _slot_count, stored_count = f.header_on_disk()
    if not 0 <= stored_count <= f.index_num:
        return f"header indexCount {stored_count} is outside [0, {f.index_num}]"
    if begin_phy < 0 or end_phy < begin_phy or end_phy > log_max:
        return f"header phy range [{begin_phy}, {end_phy}] is not inside the commit log [0, {log_max}]"
    if begin_ts < 0 or end_ts < begin_ts:
        return f"header time range [{begin_ts}, {end_ts}] is not ordered"
    return ""


def check_index_file(f: IndexFile, log_max: int) -> str:
    """Why ``f`` cannot be an intact index file; "" when nothing is wrong that can be seen without the log.

    An intact file has ``indexCount`` in ``[1, index_num]``, every slot 0 or below ``indexCount``, every used
    entry pointing at a commit-log offset inside ``[beginPhyOffset, endPhyOffset]`` (within the log) in
    non-decreasing order with non-decreasing, non-negative time differences and a chain link pointing at an
    earlier entry, and nothing written past ``indexCount``.
    """
    if f.closed:
        return ""
    bad = check_index_header(f, log_max)
    if bad:
        return bad
    count = f.index_count
    begin_ts, end_ts, begin_phy, end_phy, _slot_count, _stored = f.header_on_disk()
    mm = f._mf.buffer
    entries_at = INDEX_HEADER_SIZE + f.hash_slot_num * HASH_SLOT_SIZE
    slots = _ints(mm, INDEX_HEADER_SIZE, entries_at)
    if slots and (min(slots) < 0 or max(slots) >= count):
        return f"a hash slot points outside the {count - 1} written entries"
    used = _ints(mm, entries_at + INDEX_ENTRY_SIZE, entries_at + count * INDEX_ENTRY_SIZE)
    if used:
        hashes, diffs, prevs = used[0::5], used[3::5], used[4::5]
        phys = [(hi << 32) | (lo & 0xFFFFFFFF) for hi, lo in zip(used[1::5], used[2::5], strict=True)]
        if min(hashes) < 0:
            return "an entry has a negative key hash"
        if phys[0] < begin_phy or phys[-1] > end_phy or any(a > b for a, b in zip(phys, phys[1:], strict=False)):
            return f"entries are not in commit-log order inside [{begin_phy}, {end_phy}]"
        if min(diffs) < 0:
            return "an entry has a negative time difference"
        if any(not 0 <= p < i for i, p in enumerate(prevs, 1)):
            return "an entry's chain link does not point at an earlier entry"
    nxt = entries_at + count * INDEX_ENTRY_SIZE
    if count < f.index_num and any(mm[nxt : nxt + INDEX_ENTRY_SIZE]):
        return f"entry {count} is written but the header counts {count - 1} entries"
    return ""


def _ints(buf: Any, start: int, stop: int) -> array:
    out = array("i")
    if stop > start:
        out.frombytes(buf[start:stop])
        if sys.byteorder == "little":
            out.byteswap()
    return out


def check_index_files(files: list[IndexFile], log_max: int, headers_only_before: int = 0) -> list[IndexDamage]:
    """Every index file that fails ``check_index_file`` (only ``check_index_header`` for the files before position
    ``headers_only_before``)."""
    out = []
    for i, f in enumerate(files):
        reason = check_index_header(f, log_max) if i < headers_only_before else check_index_file(f, log_max)
        if reason:
            out.append(IndexDamage(f.path, i, reason))
    return out
