"""Reading commit-log segments in parallel pieces without ever mis-reading a record boundary.

Work is split by segment file and, inside large segments, by byte range. A record belongs to the range its
first byte lies in; a range task reads past its end to finish its last record. The hard part is where a range
that does not start a segment begins, because record boundaries are only known by walking TOTALSIZE from the
segment start (offset 0 of every segment is always a record boundary: records never span segments).

Two passes make that exact:

1. **Boundary pass** (one task per range, header reads only). A range at segment offset 0 starts there. Any
   other range *resynchronises*: it looks for the first position ``p`` in the range where a record passes every
   check the store's decoder makes (magic, TOTALSIZE == calMsgLength, body CRC) **and** whose PHYSICALOFFSET
   field equals ``segment base + p`` (the broker writes each record's own position there, so a body that
   merely contains a record-like byte pattern fails unless it was crafted for exactly this position), and whose
   chain of following records validates the same way for ``CHAIN_LINKS`` links or up to a clean end (blank
   record, zeros, end of the segment). From that start it walks TOTALSIZE jumps - exactly how the broker's
   reput advances - to the *handoff*: the first record start at or after the range end.
2. **Stitching** (driver). Ranges of a segment are chained: range ``i+1`` must start at range ``i``'s handoff,
   which descends by induction from the exact boundary at offset 0. A resync position that disagrees with the
   handoff (a false positive, however unlikely) is replaced by the handoff and that range is walked again from
   there, so a crafted body cannot shift boundaries. Resync is only ever trusted where no chain reaches: after
   a corrupt region, to keep reading what follows (reported as a gap).

The decode pass then reads each range from its exact start to its exact handoff with the store's own decoder
(``store.message.decode_record`` / ``decode_dispatch``).

Ends and damage: a blank record ends a segment's data (reput rolls to the next segment), zeros end the written
data. The record just before the end of data is checked fully (CRC, own position), because a crash can leave
the newest record half written: if it fails, it is a *torn tail*, reported and not read (recovery would cut it).
A header that cannot be a record in the middle of the log (bad magic, impossible length) is a corrupt region:
reported, and reading resumes at the next record that resync validates.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from raftmq.pipeline.layout import StoreLayout
from raftmq.store.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    PHY_POS_POSITION,
    DecodeResult,
    RecordStatus,
    decode_record,
)

CHAIN_LINKS = 8
MIN_RECORD_SIZE = 91
_SIZE_MAGIC = struct.Struct(">ii")
_I64 = struct.Struct(">q")
_MAGIC_BYTES = struct.pack(">i", MESSAGE_MAGIC_CODE)

# How a range's walk ended.
END_RANGE = "range"  # reached a record starting at/after the range end (the handoff)
END_BLANK = "blank"  # end-of-file blank record: the segment's data ends here
END_ZEROS = "zeros"  # zero bytes: end of the written data
END_SEGMENT = "segment"  # ran to the physical end of the file
END_BAD = "bad"  # a record that is not valid: torn tail or corruption
END_NOSTART = "nostart"  # the range contains no record start


@dataclass(frozen=True, slots=True)
class Split:
    """A byte range ``[start, end)`` of one segment (offsets inside the file); ``index`` orders all splits."""

    index: int
    path: str
    base: int
    size: int
    start: int
    end: int


@dataclass(slots=True)
class RangeWalk:
    """Result of the boundary pass for one split (offsets inside the segment)."""

    index: int
    first: int | None  # first record start found in the range (None: none)
    handoff: int | None  # first record start >= range end (None: chain ended inside the range)
    end_kind: str
    end_pos: int  # where the walk stopped
    records: int = 0
    reason: str = ""
    validated: bool = True  # False: ``first`` came from resync without a full chain of valid records behind it
    gaps: list[tuple[int, int, str]] = field(default_factory=list)  # unreadable regions [from, to) + why


def plan_splits(layout: StoreLayout, split_bytes: int) -> list[Split]:
    """Cut every segment into ranges of at most ``split_bytes`` (whole segments when it is >= segment size)."""
    if split_bytes <= 0:
        raise ValueError("split size must be positive")
    out: list[Split] = []
    for seg in layout.segments:
        start = 0
        while start < seg.size:
            end = min(seg.size, start + split_bytes)
            out.append(Split(len(out), seg.path, seg.base, seg.size, start, end))
            start = end
    return out


def open_segment(path: str) -> mmap.mmap:
    """Map a segment read-only (a live broker may be appending to it; we only read up to its data end)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
    finally:
        os.close(fd)


def _strong_record(buf: mmap.mmap, pos: int, base: int, size: int) -> DecodeResult | None:
    """The decoded record at ``pos`` if it passes every check plus PHYSICALOFFSET == its own position."""
    if pos + MIN_RECORD_SIZE > size:
        return None
    if _I64.unpack_from(buf, pos + PHY_POS_POSITION)[0] != base + pos:
        return None
    r = decode_record(buf, pos, check_crc=True, read_body=False, limit=size)
    return r if r.ok else None


def _chain_ok(buf: mmap.mmap, pos: int, base: int, size: int, links: int) -> bool:
    """Follow ``links`` records from a candidate; each must be strong, or the chain must end cleanly."""
    for _ in range(links):
        if pos + 8 > size:
            return True
        total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            return total == size - pos
        if total == 0 and magic == 0:
            return True
        r = _strong_record(buf, pos, base, size)
        if r is None:
            return False
        pos += r.size
    return True


def resync(buf: mmap.mmap, base: int, size: int, start: int, end: int) -> tuple[int | None, bool]:
    """First position in ``[start, end)`` where a validated record chain starts; ``(pos, chain_validated)``.

    A strong record whose chain breaks before ``CHAIN_LINKS`` links (e.g. the last records before a torn tail)
    is returned with ``chain_validated`` False only when no fully validated start exists in the range.
    """
    fallback: int | None = None
    i = buf.find(_MAGIC_BYTES, start + 4, end + 4)
    while i != -1:
        p = i - 4
        if p >= start and _strong_record(buf, p, base, size) is not None:
            if _chain_ok(buf, p, base, size, CHAIN_LINKS + 1):
                return p, True
            if fallback is None:
                fallback = p
        i = buf.find(_MAGIC_BYTES, i + 1, end + 4)
    return fallback, False


def walk(buf: mmap.mmap, split: Split, first: int) -> RangeWalk:
    """Walk TOTALSIZE jumps from the record start ``first`` to the handoff, as the broker's reput advances.

    A record whose header is not a message (bad magic, impossible length) ends the chain; the walk then
    resynchronises inside the range so the records after a corrupt region are still read (the region is
    reported in ``gaps``). Full validation of each record (calMsgLength, CRC) is the decode pass's job.
    """
    size, end, base = split.size, split.end, split.base
    out = RangeWalk(split.index, first, None, END_RANGE, first)
    pos = first
    last = -1
    records = 0
    while True:
        if pos >= end:
            out.handoff, out.end_kind, out.end_pos = pos, END_RANGE, pos
            if pos + 8 <= size and _SIZE_MAGIC.unpack_from(buf, pos) == (0, 0) and _torn_last(buf, last, base, size, out):
                records -= 1
            break
        if pos + 8 > size:
            out.end_kind, out.end_pos = END_SEGMENT, pos
            break
        total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            out.end_kind, out.end_pos = END_BLANK, pos
            if total != size - pos:
                out.reason = f"blank record says {total} bytes remain, the file has {size - pos}"
            break
        if magic == MESSAGE_MAGIC_CODE and MIN_RECORD_SIZE <= total <= size - pos:
            records += 1
            last = pos
            pos += total
            continue
        if total == 0 and magic == 0:
            out.end_kind, out.end_pos = END_ZEROS, pos
            if _torn_last(buf, last, base, size, out):
                records -= 1
            break
        reason = (f"bad magic 0x{magic & 0xFFFFFFFF:08x}" if magic != MESSAGE_MAGIC_CODE
                  else f"record length {total} impossible at segment offset {pos}")
        # The damage may be in the previous record's TOTALSIZE (which led here): if that record does not
        # validate, the gap starts at it, and the search for the next good record starts just after it.
        gap = pos
        if last >= 0 and _strong_record(buf, last, base, size) is None:
            gap = last
            records -= 1
            reason = f"record at segment offset {last} is damaged (its length leads to {reason})"
        nxt, _ = resync(buf, base, size, gap + 1, max(end, pos + 1))
        if nxt is None:
            out.end_kind, out.end_pos, out.reason = END_BAD, gap, reason
            break
        out.gaps.append((gap, nxt, reason))
        last = -1
        pos = nxt
    out.records = records
    return out


def _torn_last(buf: mmap.mmap, last: int, base: int, size: int, out: RangeWalk) -> bool:
    """Check fully the record just before the end of data, the only one a crash can leave half written.

    When it fails, ``out`` is turned into a torn-tail end at that record and True is returned.
    """
    if last < 0 or _strong_record(buf, last, base, size) is not None:
        return False
    r = decode_record(buf, last, check_crc=True, read_body=False, limit=size)
    out.handoff, out.end_kind, out.end_pos = None, END_BAD, last
    out.reason = r.reason or "record does not carry its own physical offset"
    return True


def walk_split(split: Split) -> RangeWalk:
    """Boundary pass for one split (runs on an executor)."""
    buf = open_segment(split.path)
    try:
        if split.start == 0:
            return walk(buf, split, 0)
        first, validated = resync(buf, split.base, split.size, split.start, split.end)
        if first is None:
            return RangeWalk(split.index, None, None, END_NOSTART, split.start)
        w = walk(buf, split, first)
        w.validated = validated
        return w
    finally:
        buf.close()


@dataclass(frozen=True, slots=True)
class ExactSplit:
    """A split with its exact record range ``[first, stop)`` after stitching (stop is exclusive).

    ``gaps`` are unreadable regions ``(from, to)`` inside the range that the decode pass jumps over.
    """

    index: int
    path: str
    base: int
    size: int
    first: int
    stop: int
    gaps: tuple[tuple[int, int], ...] = ()


@dataclass(slots=True)
class Boundaries:
    """Exact ranges of every split plus everything the reader found worth reporting."""

    splits: list[ExactSplit]
    data_end: int  # physical offset just past the last readable record
    records: int
    corrections: list[str] = field(default_factory=list)  # resync positions overruled by the chain
    problems: list[str] = field(default_factory=list)  # torn tail, corrupt regions, odd blank records
    torn_tail: tuple[int, str] | None = None  # (physical offset, reason)


def stitch(splits: list[Split], walks: list[RangeWalk]) -> Boundaries:
    """Chain the ranges of each segment from its exact start; re-walk any range whose resync disagreed."""
    by_index = {w.index: w for w in walks}
    exact: list[ExactSplit] = []
    corrections: list[str] = []
    problems: list[str] = []
    records = 0
    data_end = splits[0].base if splits else 0
    bads: list[tuple[int, str]] = []
    seg_splits: dict[str, list[Split]] = {}
    for s in splits:
        seg_splits.setdefault(s.path, []).append(s)
    segments = sorted(seg_splits.values(), key=lambda ss: ss[0].base)
    for seg_no, ss in enumerate(segments):
        expected: int | None = 0  # the exact next record start, from the chain
        chain_over = False  # blank/zeros seen: nothing more in this segment
        for s in ss:
            w = by_index[s.index]
            if chain_over:
                if w.first is not None and w.records:
                    problems.append(
                        f"segment {s.base:020d}: records after the end of data at offset {s.base + w.first} "
                        "ignored (the broker never reads past the end of data)"
                    )
                continue
            if expected is not None and expected >= s.end:
                continue  # a record from an earlier range covers this whole range
            if expected is not None and w.first != expected:
                buf = open_segment(s.path)
                try:
                    if w.first is not None:
                        corrections.append(
                            f"segment {s.base:020d} range [{s.start},{s.end}): resync found {w.first}, the "
                            f"record chain says {expected}; using the chain"
                        )
                    w = walk(buf, s, expected)
                finally:
                    buf.close()
            if w.first is None:
                continue
            if expected is None and not w.validated:
                problems.append(
                    f"segment {s.base:020d}: reading resumed at {s.base + w.first} after damage, on a record whose "
                    f"following records could not all be validated"
                )
            for g_from, g_to, why in w.gaps:
                problems.append(
                    f"corrupt region [{s.base + g_from}, {s.base + g_to}) in segment {s.base:020d} ({why}); "
                    "reading resumed after it"
                )
            stop = w.handoff if w.handoff is not None else w.end_pos
            gaps = tuple((g_from, g_to) for g_from, g_to, _why in w.gaps)
            exact.append(ExactSplit(s.index, s.path, s.base, s.size, w.first, stop, gaps))
            records += w.records
            if w.records:
                data_end = s.base + stop
            expected = w.handoff
            if w.end_kind in (END_BLANK, END_ZEROS, END_SEGMENT):
                chain_over = True
                if w.reason:
                    problems.append(f"segment {s.base:020d}: {w.reason}")
                if w.end_kind == END_ZEROS and seg_no < len(segments) - 1 and _later_has_data(segments[seg_no + 1:]):
                    problems.append(
                        f"segment {s.base:020d} ends in zeros at offset {s.base + w.end_pos} without a blank "
                        "record, yet later segments hold data"
                    )
            elif w.end_kind == END_BAD:
                bads.append((s.base + w.end_pos, w.reason))
                expected = None  # later ranges of this segment may resync after the damage
    torn: tuple[int, str] | None = None
    for phy, why in bads:
        if phy >= data_end:
            torn = (phy, why)
            problems.append(f"torn tail at physical offset {phy} ({why}); the readable data ends there")
        else:
            problems.append(f"corrupt record at physical offset {phy} ({why}); reading resumed after it")
    return Boundaries(exact, data_end, records, corrections, problems, torn)


def _later_has_data(segments: list[list[Split]]) -> bool:
    for ss in segments:
        with open(ss[0].path, "rb") as f:
            if f.read(8) != b"\0" * 8:
                return True
    return False


def iter_records(split: ExactSplit, *, read_body: bool = True) -> Iterator[tuple[int, DecodeResult]]:
    """Decode every record of an exact split: ``(segment offset, result)``; bad records are yielded too.

    A record whose TOTALSIZE disagrees with calMsgLength is yielded with status BAD and skipped by its size,
    which is what the broker's reput does; anything else unreadable ends the split (the boundary pass has
    already reported it).
    """
    gaps = dict(split.gaps)
    buf = open_segment(split.path)
    try:
        pos = split.first
        while pos < split.stop:
            if pos in gaps:
                pos = gaps[pos]
                continue
            r = decode_record(buf, pos, check_crc=False, read_body=read_body, limit=split.size)
            if r.status == RecordStatus.BLANK:
                return
            yield pos, r
            if r.size <= 0:
                return
            pos += r.size
    finally:
        buf.close()


def record_containing(path: str, size: int, target: int) -> tuple[int, DecodeResult] | None:
    """The record (segment offset, decoded) whose bytes include segment offset ``target``, walking from 0."""
    buf = open_segment(path)
    try:
        pos = 0
        while pos + 8 <= size and pos <= target:
            total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
            if magic != MESSAGE_MAGIC_CODE or not MIN_RECORD_SIZE <= total <= size - pos:
                return None
            if target < pos + total:
                return pos, decode_record(buf, pos, check_crc=False, read_body=False, limit=size)
            pos += total
        return None
    finally:
        buf.close()
