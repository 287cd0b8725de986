"""Commit-log integrity: find damaged records, name them precisely, never guess past them.

A torn write can only leave damage at the *end* of what a process wrote; anything else that fails the record
checks (bad magic, impossible TOTALSIZE, TOTALSIZE != calMsgLength, body CRC, PHYSICALOFFSET not equal to the
record's own position, zeros where records must be) is *corruption*: the disk or someone else changed bytes
that were written whole. Recovery (``CommitLog``), ``raftmq store check`` / ``store repair``, the read path and
the scrubber all use the functions here so they agree on what is damaged.

Stable API (other modules and branches build on it):

* ``CorruptRecord(path, start, end, reason)``: one damaged byte range ``[start, end)`` of physical commit-log
  offsets in one file.
* ``CorruptionError(records, hint="")``: the store refuses to continue; the message lists every range.
* ``verify_records(buf, base, start, end, path, file_size=None, check_crc=True) -> list[CorruptRecord]``:
  verify the records of one segment from the record boundary ``start`` (segment-relative) up to ``end``;
  after damage it resynchronises at the next record that validates (see ``resync``).
* ``scan_segment(buf, base, path, is_last) -> SegmentScan``: where one segment's data ends and what is damaged.
* ``chunk_problem(offset, data, file_size) -> str | None``: are copied bytes whole valid records?
* ``CorruptReadError(record)`` / ``check_read(raw, offset, path, check_crc)``: the read path's per-record check.
* ``scan_commit_log(directory, file_size) -> CommitLogScan``: every segment of a commit-log directory, missing
  segments and segments of the wrong size included.
* ``is_quarantine_record(topic, properties)``: a record ``store repair`` wrote over damage (filler or tombstone),
  which reads skip.

Resync: after damage the next record start is the first position ``p`` where a record passes every check
*and* its PHYSICALOFFSET equals ``base + p`` (the broker writes each record's own position there, so a body
that merely contains a record-like byte pattern fails), and the chain of records that follows validates the
same way for ``CHAIN_LINKS`` links or up to a clean end. That is the pipeline reader's rule.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field

from raftmq.store.errors import StoreError, StoreLoadError
from raftmq.store.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    RecordStatus,
    check_frame,
)

CHAIN_LINKS = 8
QUARANTINE_TOPIC = "RMQ_SYS_QUARANTINE"  # filler records ``store repair`` writes over damaged ranges
QUARANTINE_PROPERTY = "RAFTMQ_QUARANTINED"  # on a tombstone that keeps a lost message's queue offset (quarantine.py)
MIN_RECORD_SIZE = 91
_SIZE_MAGIC = struct.Struct(">ii")
_MAGIC_BYTES = struct.pack(">i", MESSAGE_MAGIC_CODE)
_BLANK_BYTES = struct.pack(">i", BLANK_MAGIC_CODE)
_ZEROS = bytes(1 << 20)


@dataclass(frozen=True, slots=True)
class CorruptRecord:
    """A damaged range ``[start, end)`` of physical commit-log offsets inside ``path``, and what is wrong."""

    path: str
    start: int
    end: int
    reason: str

    @property
    def length(self) -> int:
        return self.end - self.start

    def describe(self) -> str:
        return f"{self.path}: physical offsets [{self.start}, {self.end}) ({self.length} bytes): {self.reason}"

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "start": self.start, "end": self.end, "length": self.length,
                "reason": self.reason}


class CorruptionError(StoreLoadError):
    """Acknowledged data on disk is damaged; nothing was deleted or overwritten. ``records`` lists the damage."""

    def __init__(self, records: list[CorruptRecord], hint: str = "") -> None:
        self.records = list(records)
        self.hint = hint
        lines = "; ".join(r.describe() for r in self.records[:20])
        more = f"; and {len(self.records) - 20} more" if len(self.records) > 20 else ""
        msg = f"commit log is corrupt ({len(self.records)} damaged range(s)): {lines}{more}"
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


class CorruptReadError(StoreError):
    """A read met a damaged record; its bytes are never returned. ``record`` says where and what."""

    def __init__(self, record: CorruptRecord) -> None:
        self.record = record
        super().__init__(f"the record at commit-log offset {record.start} is damaged ({record.reason}) in "
                         f"{record.path}; it is not returned. Run `raftmq store check` on the data directory "
                         "(a replicated member repairs it from its peers at restart)")


def is_quarantine_record(topic: str, properties: dict[str, str]) -> bool:
    """A filler or tombstone ``store repair`` wrote over a damaged range (``store.quarantine``): no message."""
    return topic == QUARANTINE_TOPIC or QUARANTINE_PROPERTY in properties


def check_read(raw, offset: int, path: str, check_crc: bool = True) -> CorruptRecord | None:
    """Verify one record read at ``offset`` (header, calMsgLength, body CRC, own PHYSICALOFFSET)."""
    try:
        status, size, reason, parts = check_frame(raw, 0, len(raw), check_crc)
    except (struct.error, IndexError, ValueError) as e:
        return CorruptRecord(path, offset, offset + len(raw), f"undecodable record: {e}")
    if status != RecordStatus.OK or parts is None:
        return CorruptRecord(path, offset, offset + len(raw), reason or "not a message record")
    if parts[0][6] != offset:
        return CorruptRecord(path, offset, offset + size, f"record says PHYSICALOFFSET {parts[0][6]}")
    return None


def chunk_problem(offset: int, data, file_size: int) -> str | None:
    """Why ``data`` (commit-log bytes at ``offset``, within one segment) is not whole valid records, or None.

    Each record must pass every check and carry its own PHYSICALOFFSET; an end-of-file blank record may close
    the data only if it reaches the segment end. Used to verify bytes copied from a peer before they are written.
    """
    pos, n = 0, len(data)
    seg_pos = offset % file_size
    if seg_pos + n > file_size:
        return f"{n} bytes at {offset} run past the end of their segment"
    while pos < n:
        if pos + 8 > n:
            return f"{n - pos} trailing bytes at {offset + pos} are not a record"
        total, magic = _SIZE_MAGIC.unpack_from(data, pos)
        if magic == BLANK_MAGIC_CODE:
            if total != file_size - (seg_pos + pos) or pos + 8 != n:
                return f"end-of-file blank at {offset + pos} does not end its segment"
            return None
        try:
            status, size, reason, parts = check_frame(data, pos, n, True)
        except (struct.error, IndexError, ValueError) as e:
            return f"undecodable record at {offset + pos}: {e}"
        if status != RecordStatus.OK or parts is None:
            return f"record at {offset + pos}: {reason}"
        if parts[0][6] != offset + pos:
            return f"record at {offset + pos} says PHYSICALOFFSET {parts[0][6]}"
        pos += size
    return None


def _strong_record(buf, pos: int, base: int, limit: int, check_crc: bool = True) -> int:
    """Size of the record at ``pos`` if it passes every check and carries its own position, else 0."""
    if pos + MIN_RECORD_SIZE > limit:
        return 0
    try:
        status, size, _reason, parts = check_frame(buf, pos, limit, check_crc)
    except (struct.error, IndexError, ValueError):
        return 0
    if status != RecordStatus.OK or parts is None or parts[0][6] != base + pos:
        return 0
    return size


def _is_blank_end(buf, pos: int, limit: int) -> bool:
    """An end-of-file blank record at ``pos`` whose length reaches exactly the end of the segment."""
    if pos + 8 > limit:
        return False
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    return magic == BLANK_MAGIC_CODE and total == limit - pos


def _chain_ok(buf, pos: int, base: int, limit: int, links: int) -> bool:
    for _ in range(links):
        if pos + 8 > limit:
            return True
        total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            return total == limit - pos
        if total == 0 and magic == 0:
            return True
        size = _strong_record(buf, pos, base, limit)
        if not size:
            return False
        pos += size
    return True


def resync(buf, base: int, start: int, limit: int) -> int | None:
    """First position in ``[start, limit)`` where a validated record chain starts, or None."""
    find = buf.find
    i = find(_MAGIC_BYTES, start + 4, limit)
    while i != -1:
        p = i - 4
        if p >= start and _strong_record(buf, p, base, limit) and _chain_ok(buf, p, base, limit, CHAIN_LINKS + 1):
            return p
        i = find(_MAGIC_BYTES, i + 1, limit)
    return None


def _find_blank_end(buf, start: int, limit: int) -> int | None:
    """The end-of-file blank record at or after ``start`` (its length must reach the segment end)."""
    i = buf.find(_BLANK_BYTES, start + 4, limit)
    while i != -1:
        if _is_blank_end(buf, i - 4, limit):
            return i - 4
        i = buf.find(_BLANK_BYTES, i + 1, limit)
    return None


def _last_nonzero(buf, start: int, limit: int) -> int:
    """Position just after the last non-zero byte in ``[start, limit)`` (``start`` when all are zero)."""
    last = start
    p = start
    n_max = len(_ZEROS)
    while p < limit:
        n = min(n_max, limit - p)
        piece = buf[p : p + n]
        if piece != _ZEROS[:n]:
            last = p + len(bytes(piece).rstrip(b"\0"))
        p += n
    return last


def _describe_bad(buf, pos: int, limit: int, base: int, check_crc: bool) -> str:
    try:
        status, _size, reason, parts = check_frame(buf, pos, limit, check_crc)
    except (struct.error, IndexError, ValueError) as e:
        return f"undecodable record: {e}"
    if status == RecordStatus.OK and parts is not None:
        return (f"record says PHYSICALOFFSET {parts[0][6]} but lies at {base + pos} "
                "(misplaced, or written without its offsets)")
    if status == RecordStatus.BLANK:
        return "end-of-file blank record whose length does not reach the end of the segment"
    return reason or "not a record"


@dataclass(slots=True)
class SegmentScan:
    """One segment walked from offset 0: ``data_end`` (segment-relative) is where its data ends."""

    path: str
    base: int
    file_size: int
    records: int = 0
    data_end: int = 0
    blank_at: int | None = None  # the end-of-file blank record (the segment is full), if any
    damaged: list[CorruptRecord] = field(default_factory=list)
    # damage with nothing valid after it in this segment: a torn tail in the last segment, corruption elsewhere
    tail: CorruptRecord | None = None
    last_record: int = -1  # segment-relative start of the last valid record


def scan_segment(buf, base: int, path: str, is_last: bool, *, check_crc: bool = True,
                 start: int = 0) -> SegmentScan:
    """Walk one segment from the record boundary ``start`` and classify every byte range.

    ``damaged`` holds ranges followed by valid data (or, in a segment that is not the last one, anything
    before its end-of-file blank record that is not a record); ``tail`` holds a final damaged range with
    nothing valid after it, which only recovery may interpret (a torn write beyond what was acknowledged).
    Zeros followed by nothing are the normal end of data in the last segment.
    """
    limit = len(buf)
    out = SegmentScan(path, base, limit, data_end=start)
    pos = start
    while True:
        if pos + 8 > limit:
            out.data_end = pos
            if pos < limit and not is_last:
                out.damaged.append(CorruptRecord(path, base + pos, base + limit,
                                                 "segment ends without an end-of-file blank record"))
            break
        total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
        if magic == BLANK_MAGIC_CODE and total == limit - pos:
            out.blank_at = out.data_end = pos
            break
        size = 0 if (total == 0 and magic == 0) else _strong_record(buf, pos, base, limit, check_crc)
        if size:
            out.records += 1
            out.last_record = pos
            pos += size
            out.data_end = pos
            continue
        zeros = total == 0 and magic == 0
        end = _last_nonzero(buf, pos, limit)  # one pass; the common case (end of data) stops here
        if zeros and end == pos:
            out.data_end = pos
            if not is_last:  # a full segment must end with a blank record; this one stops early
                out.damaged.append(CorruptRecord(
                    path, base + pos, base + limit,
                    "zero bytes where records or the end-of-file blank record must be"))
            break
        reason = "zero bytes where a record must be" if zeros else _describe_bad(buf, pos, limit, base, check_crc)
        nxt = resync(buf, base, pos + 1, limit)
        if nxt is not None:
            out.damaged.append(CorruptRecord(path, base + pos, base + nxt, reason))
            pos = nxt
            continue
        blank = _find_blank_end(buf, pos + 1, limit)
        if blank is not None:  # records are missing before the segment's end-of-file blank record
            out.damaged.append(CorruptRecord(path, base + pos, base + blank, reason))
            out.blank_at = out.data_end = blank
            break
        out.data_end = pos
        damage = CorruptRecord(path, base + pos, base + max(end, pos + 8), reason)
        if is_last:
            out.tail = damage
        else:
            out.damaged.append(damage)
        break
    return out


def verify_records(buf, base: int, start: int, end: int, path: str, *, check_crc: bool = True) -> list[CorruptRecord]:
    """Damaged ranges among the records of one segment buffer from the record boundary ``start`` to ``end``.

    ``buf`` is the whole segment (mmap, bytes or bytearray: anything with ``find``), ``base`` its first physical offset, ``start`` and
    ``end`` segment-relative. Records starting before ``end`` are checked whole (magic, TOTALSIZE ==
    calMsgLength, body CRC, own PHYSICALOFFSET); after damage the walk resynchronises (``resync``). A blank
    record or zeros with nothing valid after them end the walk cleanly.
    """
    limit = len(buf)
    out: list[CorruptRecord] = []
    pos = start
    while pos < end and pos + 8 <= limit:
        total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
        if magic == BLANK_MAGIC_CODE and total == limit - pos:
            break
        size = 0 if (total == 0 and magic == 0) else _strong_record(buf, pos, base, limit, check_crc)
        if size:
            pos += size
            continue
        zeros = total == 0 and magic == 0
        nxt = resync(buf, base, pos + 1, limit)
        if nxt is None:
            stop = _last_nonzero(buf, pos, limit)
            if zeros and stop == pos:
                break  # end of data
            blank = _find_blank_end(buf, pos + 1, limit)
            stop = blank if blank is not None else max(stop, pos + 8)
            out.append(CorruptRecord(path, base + pos, base + stop, _describe_bad(buf, pos, limit, base, check_crc)
                                     if not zeros else "zero bytes where a record must be"))
            break
        out.append(CorruptRecord(path, base + pos, base + nxt, "zero bytes where a record must be" if zeros
                                 else _describe_bad(buf, pos, limit, base, check_crc)))
        pos = nxt
    return out


@dataclass(slots=True)
class CommitLogScan:
    """Every segment of a commit-log directory: damage (including missing and mis-sized segments) and ends."""

    directory: str
    file_size: int
    segments: list[SegmentScan] = field(default_factory=list)
    damaged: list[CorruptRecord] = field(default_factory=list)
    tail: CorruptRecord | None = None
    data_end: int = 0  # physical offset where the log's data ends (after the last valid record)
    records: int = 0

    @property
    def problems(self) -> list[CorruptRecord]:
        return self.damaged + ([self.tail] if self.tail is not None else [])


def segment_names(directory: str) -> list[str]:
    """Commit-log segment file names (20-digit offsets) in offset order."""
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if len(n) == 20 and n.isdigit()
                  and os.path.isfile(os.path.join(directory, n)))


def segment_layout_problems(directory: str, file_size: int) -> list[CorruptRecord]:
    """Missing segments between the first and the last, and segments of the wrong size (cheap: no reads)."""
    out: list[CorruptRecord] = []
    names = segment_names(directory)
    prev: int | None = None
    for n in names:
        base = int(n)
        path = os.path.join(directory, n)
        if base % file_size:
            out.append(CorruptRecord(path, base, base, f"segment name {n} is not a multiple of the segment size "
                                                       f"{file_size}"))
        size = os.path.getsize(path)
        if size != file_size and not (size == 0 and n == names[-1]):
            out.append(CorruptRecord(path, base, base + file_size,
                                     f"segment has {size} bytes, the segment size is {file_size}"))
        if prev is not None and base > prev + file_size:
            missing = [f"{o:020d}" for o in range(prev + file_size, base, file_size)]
            shown = ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
            out.append(CorruptRecord(os.path.join(directory, missing[0]), prev + file_size, base,
                                     f"segment file(s) missing: {shown}"))
        prev = base
    return out


def scan_commit_log(directory: str, file_size: int, *, check_crc: bool = True) -> CommitLogScan:
    """Read every segment of ``directory`` (read-only) and report all damage; see ``scan_segment``."""
    out = CommitLogScan(directory, file_size)
    out.damaged.extend(segment_layout_problems(directory, file_size))
    bad_size = {r.path for r in out.damaged if "bytes, the segment size" in r.reason}
    names = [n for n in segment_names(directory) if os.path.join(directory, n) not in bad_size
             and os.path.getsize(os.path.join(directory, n)) > 0]
    for i, n in enumerate(names):
        path = os.path.join(directory, n)
        with open(path, "rb") as fh:
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            s = scan_segment(buf, int(n), path, i == len(names) - 1, check_crc=check_crc)
        finally:
            buf.close()
        out.segments.append(s)
        out.damaged.extend(s.damaged)
        out.records += s.records
        if s.tail is not None:
            out.tail = s.tail
        out.data_end = int(n) + s.data_end
    out.damaged.sort(key=lambda r: (r.start, r.end))
    return out
