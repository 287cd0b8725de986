"""Byte comparison of store files, explained in the files' own terms (units, slots, entries, records).

Whole files are compared in large chunks first (a C-level ``==``), and only differing chunks are walked
unit by unit, so comparing two identical 420 MB index files costs a read, not 25 million Python steps.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct

CHUNK = 1 << 20
_CQ_UNIT = struct.Struct(">qiq")
_INDEX_HEADER = struct.Struct(">qqqqii")
_INDEX_ENTRY = struct.Struct(">iqii")
_I32 = struct.Struct(">i")
_HEADER_FIELDS = ("beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount")
_NAME20 = re.compile(r"\d{20}")


def _read(path: str | None, offset: int, n: int) -> bytes:
    if path is None or not os.path.exists(path):
        return b"\0" * n
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(n)
    return data + b"\0" * (n - len(data))


def differing_ranges(a: str | None, b: str | None, unit: int, start: int = 0,
                     end: int | None = None) -> list[int]:
    """Offsets (multiples of ``unit`` from ``start``) of every ``unit``-byte block that differs."""
    size = max(os.path.getsize(p) for p in (a, b) if p is not None and os.path.exists(p))
    end = size if end is None else end
    chunk = max(unit, CHUNK // unit * unit)
    out: list[int] = []
    pos = start
    while pos < end:
        n = min(chunk, end - pos)
        x, y = _read(a, pos, n), _read(b, pos, n)
        if x != y:
            for i in range(0, n, unit):
                if x[i : i + unit] != y[i : i + unit]:
                    out.append(pos + i)
        pos += n
    return out


def _cq_files(qdir: str) -> dict[int, str]:
    if not os.path.isdir(qdir):
        return {}
    return {int(n): os.path.join(qdir, n) for n in os.listdir(qdir) if _NAME20.fullmatch(n)}


def _unit_text(raw: bytes) -> str:
    if raw == b"\0" * 20:
        return "nothing"
    phy, size, tags = _CQ_UNIT.unpack(raw)
    if size == 0x7FFFFFFF and phy == 0:
        return "a fillPreBlank unit"
    return f"(phy={phy}, size={size}, tagsCode={tags})"


def diff_consume_queue(expected_root: str, actual_root: str, topic: str, queue_id: int) -> list[str]:
    """Every unit of ``consumequeue/topic/queue_id`` that differs between the rebuilt and the store's files."""
    exp = _cq_files(os.path.join(expected_root, "consumequeue", topic, str(queue_id)))
    act = _cq_files(os.path.join(actual_root, "consumequeue", topic, str(queue_id)))
    where = f"consumequeue {topic}/{queue_id}"
    out: list[str] = []
    if not act:
        return [f"{where}: missing in the store ({_count_units(exp)} unit(s) expected from the commit log)"]
    if not exp:
        return [f"{where}: the store has this queue but the commit log holds no message for it"]
    for base in sorted(set(exp) | set(act)):
        e, a = exp.get(base), act.get(base)
        if e is not None and a is not None and os.path.getsize(e) != os.path.getsize(a):
            out.append(f"{where} file {base:020d}: {os.path.getsize(a)} bytes, expected {os.path.getsize(e)}")
        if e is None and a is not None and not _all_zero(a):
            out.append(f"{where} file {base:020d}: not expected (the commit log has no unit for it)")
        for off in differing_ranges(e, a, 20):
            qoff = (base + off) // 20
            out.append(f"{where} offset {qoff}: expected {_unit_text(_read(e, off, 20))}, "
                       f"store has {_unit_text(_read(a, off, 20))}")
    return out


def _count_units(files: dict[int, str]) -> int:
    n = 0
    for p in files.values():
        with open(p, "rb") as f:
            data = f.read()
        n += sum(1 for i in range(0, len(data), 20) if data[i + 8 : i + 12] != b"\0\0\0\0")
    return n


def _all_zero(path: str) -> bool:
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            if chunk.count(0) != len(chunk):
                return False
    return True


def diff_index_file(expected: str | None, actual: str | None, hash_slot_num: int, label: str) -> list[str]:
    """Header fields, slots and entries that differ between a rebuilt index file and the store's."""
    if actual is None:
        return [f"index file {label}: missing in the store"]
    if expected is None:
        return [f"index file {label}: not expected (the commit log does not fill that many index files)"]
    out: list[str] = []
    se, sa = os.path.getsize(expected), os.path.getsize(actual)
    if se != sa:
        out.append(f"index file {label}: {sa} bytes, expected {se} (different geometry)")
    he, ha = _INDEX_HEADER.unpack(_read(expected, 0, 40)), _INDEX_HEADER.unpack(_read(actual, 0, 40))
    for name, x, y in zip(_HEADER_FIELDS, he, ha, strict=True):
        if x != y:
            out.append(f"index file {label} header {name}: expected {x}, store has {y}")
    slots_end = 40 + 4 * hash_slot_num
    for off in differing_ranges(expected, actual, 4, 40, slots_end):
        out.append(f"index file {label} slot {(off - 40) // 4}: expected entry "
                   f"{_I32.unpack(_read(expected, off, 4))[0]}, store has {_I32.unpack(_read(actual, off, 4))[0]}")
    for off in differing_ranges(expected, actual, 20, slots_end):
        n = (off - slots_end) // 20
        e = _INDEX_ENTRY.unpack(_read(expected, off, 20))
        a = _INDEX_ENTRY.unpack(_read(actual, off, 20))
        out.append(f"index file {label} entry {n}: expected (keyHash={e[0]}, phy={e[1]}, timeDiff={e[2]}, "
                   f"prev={e[3]}), store has (keyHash={a[0]}, phy={a[1]}, timeDiff={a[2]}, prev={a[3]})")
    return out


def chunk_digest(path: str, offset: int, length: int) -> str:
    """SHA-256 of ``length`` bytes at ``offset`` (a replica-comparison work unit)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(offset)
        left = length
        while left > 0:
            data = f.read(min(CHUNK, left))
            if not data:
                break
            h.update(data)
            left -= len(data)
    return h.hexdigest()


def first_difference(a: str, b: str, offset: int, length: int) -> int | None:
    """Offset inside the files of the first byte that differs in ``[offset, offset+length)``, or None."""
    pos = offset
    end = offset + length
    while pos < end:
        n = min(CHUNK, end - pos)
        x, y = _read(a, pos, n), _read(b, pos, n)
        if x != y:
            for i in range(n):
                if x[i] != y[i]:
                    return pos + i
        pos += n
    return None
