"""Consume-queue units checked against the record they point at on every read, rebuilt from the log when wrong.

A consume queue is derived data: unit ``i`` of queue ``(topic, q)`` must point at the record that carries
``(topic, q, QUEUEOFFSET i)``, with its TOTALSIZE and its tags code (issue 33). A rotten unit that pointed
somewhere else made pulls skip acknowledged messages silently, so every unit a read uses is compared with its
record first; a wrong one is rebuilt before the read answers: the nearest right units before and after it bound
where its record lies, the commit log between them is walked once, and the units found there are written back
in place (readers never see the queue shrink). What the log cannot tell (its record is damaged too) is refused
with DATA_LOSS, never skipped.

Units that reserve a queue offset without a message: RocketMQ's fillPreBlank unit ``(0, 0x7FFFFFFF, 0)``, and a
unit pointing at a record ``store repair`` wrote over damage (``store.quarantine``: a tombstone or filler).
"""

from __future__ import annotations

from typing import Any

from raftmq.store.consume_queue import BLANK_UNIT_SIZE
from raftmq.store.derived_check import dispatch_fields
from raftmq.store.integrity import QUARANTINE_TOPIC, is_quarantine_record
from raftmq.store.message import TIMED_TOPICS, decode_record

RESERVED = "reserved"  # the unit holds a queue offset whose message was quarantined: skipped, not an error
MAX_HEAL_SCAN_UNITS = 1024  # units looked at on each side of a wrong one for a right neighbour
MAX_HEAL_WALK_BYTES = 256 << 20  # commit log walked to rebuild a run of wrong units inside one read


def fields_problem(f: Any, topic: str, queue_id: int, queue_offset: int, unit: tuple[int, int, int]) -> str:
    """Why ``unit`` at ``queue_offset`` does not match the dispatch fields ``f`` of the record it points at."""
    phy, size, tags_code = unit
    if not f.success or f.msg_size <= 0:
        return f"points at {phy}, where no record starts"
    if f.commit_log_offset != phy:
        return f"points at {phy}, but the record there says PHYSICALOFFSET {f.commit_log_offset}"
    if f.topic == QUARANTINE_TOPIC and f.msg_size == size:
        return RESERVED
    if f.msg_size != size:
        return f"says size {size}, the record at {phy} has {f.msg_size} bytes"
    if (f.topic, f.queue_id, f.consume_queue_offset) != (topic, queue_id, queue_offset):
        return f"points at {phy}, a record of {f.topic}-{f.queue_id} queue offset {f.consume_queue_offset}"
    if f.tags_code != tags_code:
        return f"says tags code {tags_code}, the record at {phy} has {f.tags_code}"
    return ""


def message_problem(m: Any, record_size: int, topic: str, queue_id: int, queue_offset: int,
                    unit: tuple[int, int, int], timed_tags_code: int | None = None) -> str:
    """``fields_problem`` for a record already decoded into a ``MessageExt`` (the pull path decodes it anyway);
    ``timed_tags_code``: the dispatch tags code of a schedule / timer record (a delivery time, not a tags hash)."""
    phy, size, tags_code = unit
    if m.physical_offset != phy:
        return f"points at {phy}, but the record there says PHYSICALOFFSET {m.physical_offset}"
    if is_quarantine_record(m.topic, m.properties) and record_size == size:
        return RESERVED
    if record_size != size:
        return f"says size {size}, the record at {phy} has {record_size} bytes"
    if (m.topic, m.queue_id, m.queue_offset) != (topic, queue_id, queue_offset):
        return f"points at {phy}, a record of {m.topic}-{m.queue_id} queue offset {m.queue_offset}"
    right = timed_tags_code if m.topic in TIMED_TOPICS and timed_tags_code is not None else m.tags_code
    if right != tags_code:
        return f"says tags code {tags_code}, the record at {phy} has {right}"
    return ""


def unit_problem(commit_log: Any, topic: str, queue_id: int, queue_offset: int,
                 unit: tuple[int, int, int] | None) -> str:
    """Why ``unit`` (as read at ``queue_offset``) is wrong, ``RESERVED``, or "" when it points at its record.
    A unit below the commit log's first offset (retention) is not judged: ""."""
    if unit is None:
        return "is missing"
    phy, size, tags_code = unit
    if size == BLANK_UNIT_SIZE:
        return RESERVED if (phy, tags_code) == (0, 0) else f"is a blank unit with offset {phy} and tags {tags_code}"
    if phy < 0 or size <= 0:
        return f"holds offset {phy} and size {size}"
    if phy < commit_log.min_offset:
        return ""
    raw = commit_log.get_message(phy, size)
    if raw is None:
        return f"points at [{phy}, {phy + size}), not inside the commit log [{commit_log.min_offset}, " \
               f"{commit_log.max_offset})"
    return raw_unit_problem(commit_log, raw, topic, queue_id, queue_offset, unit)


def raw_unit_problem(commit_log: Any, raw: bytes, topic: str, queue_id: int, queue_offset: int,
                     unit: tuple[int, int, int]) -> str:
    """``fields_problem`` for the record bytes ``raw`` a unit points at; a tombstone of ``store repair`` (any queue
    offset: padding may point at another one) is ``RESERVED``."""
    problem = fields_problem(read_fields(commit_log, raw), topic, queue_id, queue_offset, unit)
    if problem and problem != RESERVED:
        m = decode_record(raw, 0, check_crc=False, read_body=False).message
        if m is not None and m.physical_offset == unit[0] and m.store_size == unit[1] and \
                is_quarantine_record(m.topic, m.properties):
            return RESERVED
    return problem


def read_fields(commit_log: Any, raw: bytes) -> Any:
    """The dispatch fields of the record in ``raw`` (what reput derives the unit from)."""
    return dispatch_fields(commit_log.check_message_and_return_size, with_index=False)(raw, 0, len(raw))


def units_from_log(commit_log: Any, topic: str, queue_id: int, start: int, end: int,
                   wanted: range) -> tuple[dict[int, tuple[int, int, int]], int]:
    """The units reput writes for the records of ``(topic, queue_id)`` with a queue offset in ``wanted``, walking
    ``[start, end)`` of the log (``start`` a record boundary); returns them and where the walk stopped (before
    ``end`` when an unreadable record stops it: what lies after is unknown)."""
    fields = dispatch_fields(commit_log.check_message_and_return_size)
    out: dict[int, tuple[int, int, int]] = {}
    offset = start
    while offset < end and len(out) < len(wanted):
        view = commit_log.get_data(offset, end)
        if view is None:
            break
        n, pos, nxt = len(view), 0, None
        try:
            while pos < n:
                f = fields(view, pos, n)
                if f.success and f.msg_size > 0:
                    if (f.goes_to_consume_queue and f.topic == topic and f.queue_id == queue_id
                            and f.consume_queue_offset in wanted and f.commit_log_offset == offset + pos):
                        out[f.consume_queue_offset] = (f.commit_log_offset, f.msg_size, f.tags_code)
                    pos += f.msg_size
                elif f.success:  # end-of-file blank record
                    nxt = commit_log.roll_next_file(offset + pos)
                    break
                elif f.msg_size > 0:
                    pos += f.msg_size
                else:
                    nxt = -1
                    break
        finally:
            view.release()
        if nxt == -1:
            return out, offset + pos
        offset = offset + pos if nxt is None else nxt
    return out, min(offset, end)

