"""IndexFile: one hash index file of RocketMQ's key index (docs/design/store-formats.md#index-files), byte for byte.

Layout: a 40-byte header, ``hash_slot_num`` int32 slots, then ``index_num`` 20-byte entries. Each entry
is ``(keyHash int32, phyOffset int64, timeDiff int32 seconds, prev int32)``; a slot holds the number of the
newest entry of its chain. Entry 0 is never used. The header is written field by field as RocketMQ's
``IndexHeader`` does, so a file written here is identical to one written by a RocketMQ broker.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import threading
from array import array
from collections.abc import Sequence
from operator import mul

from raftmq.store.mapped_file import MappedFile

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
INVALID_INDEX = 0
INT_MAX = 0x7FFFFFFF

# header field positions (IndexHeader)
_BEGIN_TIMESTAMP = 0
_END_TIMESTAMP = 8
_BEGIN_PHY_OFFSET = 16
_END_PHY_OFFSET = 24

_HEADER = struct.Struct(">qqqqii")
_TAIL = struct.Struct(">qii")  # endPhyOffset, hashSlotCount, indexCount
_ENTRY = struct.Struct(">iqii")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

_MASK32 = 0xFFFFFFFF
_POW31 = [1]  # 31^i mod 2^32; only ever extended under _POW_LOCK, so readers see correct prefixes
_POW_LOCK = threading.Lock()
_REV_POWERS: dict[int, list[int]] = {}


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes of an index file: header + slots + entries (420,000,040 with RocketMQ's defaults)."""
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def _pow31(n: int) -> int:
    if len(_POW31) <= n:
        with _POW_LOCK:
            while len(_POW31) <= n:
                _POW31.append((_POW31[-1] * 31) & _MASK32)
    return _POW31[n]


def _rev_powers(n: int) -> list[int]:
    """``[31^(n-1), ..., 31, 1]`` mod 2^32: the weights of ``String.hashCode`` for a string of n units."""
    powers = _REV_POWERS.get(n)
    if powers is None:
        _pow31(n)
        powers = _REV_POWERS[n] = _POW31[n - 1 :: -1] if n else []
    return powers


def _unsigned_java_hash(s: str) -> int:
    """``String.hashCode`` as an unsigned 32-bit value, computed as one dot product in C (no per-char bytecode)."""
    if s.isascii():
        units: bytes | tuple[int, ...] = s.encode("ascii")
    else:
        raw = s.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(raw) // 2}H", raw)
    return sum(map(mul, units, _rev_powers(len(units)))) & _MASK32


_TAIL_CHARS = 2
_CACHED_KEY_MAX = 128  # longer keys are not cached (65,536 heads of at most this size: a few MB)
_HEADS_MAX = 1 << 16
_TAILS_MAX = 1 << 15
_HEADS: dict[str, dict[str, int]] = {}  # topic -> {head: unsigned hash of topic#head}
_TAILS: dict[str, tuple[int, int]] = {}  # tail -> (unsigned hash, 31^(its UTF-16 units) mod 2^32)
_head_count = 0  # entries over all topics in _HEADS


def _tail_entry(tail: str) -> tuple[int, int]:
    units = len(tail) if tail.isascii() else len(tail.encode("utf-16-be", "surrogatepass")) // 2
    if len(_TAILS) >= _TAILS_MAX:
        _TAILS.clear()
    entry = _TAILS[tail] = (_unsigned_java_hash(tail), _pow31(units))
    return entry


def _head_hash(topic: str, head: str) -> int:
    global _head_count
    if _head_count >= _HEADS_MAX:
        _HEADS.clear()
        _head_count = 0
    heads = _HEADS.get(topic)
    if heads is None:
        heads = _HEADS[topic] = {}
    h = heads[head] = _unsigned_java_hash(topic + "#" + head)
    _head_count += 1
    return h


def index_key_hash(topic: str, key: str) -> int:
    """``IndexFile.indexKeyHashMethod(topic + "#" + key)``: ``abs(hashCode)``, 0 for Integer.MIN_VALUE.

    The reput thread hashes one or more keys per message, so ``h(ab) = h(a)*31^units(b) + h(b)`` (mod 2^32,
    which is Java's int wrap-around) splits ``topic#key`` into a head (``topic#`` and all but the last two
    characters) and a tail, each cached: keys of one producer share long heads (a uniq key differs from the
    previous one in its last characters, an order id in its last digits) and tails repeat.
    """
    return index_key_hashes(topic, key, None)[0]


def index_key_hashes(topic: str, uniq_key: str | None, keys: str | None) -> list[int]:
    """``index_key_hash`` of ``uniq_key`` (unless None), then of each non-empty space-separated piece of
    ``keys``: the hashes ``IndexService.buildIndex`` puts for one record, in its order."""
    heads = _HEADS.get(topic)
    tails = _TAILS
    out: list[int] = []
    if keys:
        pieces = keys.split(" ")
        if "" in pieces:  # empty KEYS pieces are not indexed
            pieces = [k for k in pieces if k]
        if uniq_key is not None:
            pieces.insert(0, uniq_key)  # hashed even when empty
    elif uniq_key is not None:
        pieces = [uniq_key]
    else:
        return out
    for key in pieces:
        if len(key) > _CACHED_KEY_MAX:  # long keys would make the head cache large: hashed whole
            h = _unsigned_java_hash(topic + "#" + key)
            out.append(0 if h == 0x80000000 else (1 << 32) - h if h & 0x80000000 else h)
            continue
        head = key[:-_TAIL_CHARS]
        hh = heads.get(head) if heads is not None else None
        if hh is None:
            hh = _head_hash(topic, head)
            heads = _HEADS.get(topic)
        t = tails.get(key[-_TAIL_CHARS:])
        if t is None:
            t = _tail_entry(key[-_TAIL_CHARS:])
        h = (hh * t[1] + t[0]) & _MASK32
        if h & 0x80000000:  # Math.abs of a negative int; Integer.MIN_VALUE stays negative, RocketMQ uses 0
            h = 0 if h == 0x80000000 else (1 << 32) - h
        out.append(h)
    return out


def key_hash(full_key: str) -> int:
    """``indexKeyHashMethod`` of an already built ``topic#key`` string."""
    return _abs_hash(_unsigned_java_hash(full_key))


def _abs_hash(unsigned: int) -> int:
    # Math.abs(int): negative values flip; Integer.MIN_VALUE stays negative and RocketMQ maps it to 0.
    if unsigned & 0x80000000:
        signed = unsigned - (1 << 32)
        return 0 if signed == -(1 << 31) else -signed
    return unsigned


def build_key(topic: str, key: str) -> str:
    """``IndexService.buildKey``: ``topic#key``."""
    return topic + "#" + key


_GEOMETRY_SAMPLE = 4096  # newest entries whose chains must agree with a candidate geometry


def infer_index_geometry(path: str) -> tuple[int, int] | None:
    """``(max_hash_slot_num, max_index_num)`` an existing index file was written with, or None when the file
    cannot tell (no entry yet, or no geometry fits its bytes).

    The size alone has many solutions (40 + 4*slots + 20*entries), but the entries are a dense run from entry 1
    to the header's indexCount, so the file's last non-zero byte falls inside the last used entry: that pins the
    slot count to a handful of candidates, and the right one is the one under which the newest entries' slots
    and chain links agree (each chain link points back to an entry of the same slot, and each slot holds the
    newest entry of its chain)."""
    size = os.path.getsize(path)
    if size <= INDEX_HEADER_SIZE:
        return None
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        count = _HEADER.unpack_from(mm, 0)[5]
        if count <= 1:
            return None
        last = _last_nonzero_end(mm, size)
        found = []
        for end in range(last, min(size, last + INDEX_ENTRY_SIZE) + 1):
            slots4 = end - INDEX_HEADER_SIZE - count * INDEX_ENTRY_SIZE
            if slots4 < HASH_SLOT_SIZE or slots4 % HASH_SLOT_SIZE:
                continue
            slots = slots4 // HASH_SLOT_SIZE
            rest = size - INDEX_HEADER_SIZE - slots * HASH_SLOT_SIZE
            if rest % INDEX_ENTRY_SIZE or rest // INDEX_ENTRY_SIZE < count:
                continue
            if _chains_agree(mm, slots, count):
                found.append((slots, rest // INDEX_ENTRY_SIZE))
        return found[0] if len(found) == 1 else None
    finally:
        mm.close()


def _last_nonzero_end(mm, size: int) -> int:
    """Position just after the last non-zero byte (0 when every byte is zero), read backwards in 1 MiB steps."""
    step = 1 << 20
    hi = size
    while hi > 0:
        lo = max(0, hi - step)
        piece = mm[lo:hi].rstrip(b"\0")
        if piece:
            return lo + len(piece)
        hi = lo
    return 0


def _chains_agree(mm, slots: int, count: int) -> bool:
    """Do the newest entries of a file with ``count`` as indexCount read as a valid index under ``slots``?"""
    entries_at = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE
    newest_of_slot: dict[int, int] = {}
    for number in range(count - 1, max(0, count - 1 - _GEOMETRY_SAMPLE), -1):
        h, _phy, diff, prev = _ENTRY.unpack_from(mm, entries_at + number * INDEX_ENTRY_SIZE)
        if h < 0 or diff < 0 or not 0 <= prev < number:
            return False
        slot = h % slots
        head = newest_of_slot.setdefault(slot, number)
        if head == number and _I32.unpack_from(mm, INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE)[0] != number:
            return False  # the newest entry of a chain is what its slot holds
        if prev and _ENTRY.unpack_from(mm, entries_at + prev * INDEX_ENTRY_SIZE)[0] % slots != slot:
            return False
    return True


def index_geometry_of(index_dir: str) -> tuple[int, int] | None:
    """The geometry every index file of ``index_dir`` that has entries agrees on; None when none tells, or they
    disagree."""
    if not os.path.isdir(index_dir):
        return None
    seen = {infer_index_geometry(os.path.join(index_dir, n)) for n in sorted(os.listdir(index_dir))
            if n.isdigit() and os.path.isfile(os.path.join(index_dir, n))}
    seen.discard(None)
    return seen.pop() if len(seen) == 1 else None


class IndexFile:
    """One index file: ``put_key`` appends an entry and links it into its slot's chain; ``select_phy_offset``
    walks a chain newest first.

    ``end_phy_offset``/``end_timestamp`` seed a new file with the previous file's end values (RocketMQ does
    this, so the first entry's timeDiff is measured from the previous file's end: docs/design/store-formats.md#index-files).
    """

    def __init__(
        self,
        path: str,
        hash_slot_num: int,
        index_num: int,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        *,
        preallocate: bool = True,
    ) -> None:
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._mf = MappedFile(path, self.file_size, preallocate=preallocate)
        self._mm = self._mf.buffer
        self.path = path
        self.file_name = self._mf.file_name
        self._entries_at = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        # IndexHeader: in memory indexCount starts at 1 (entry 0 is never used); on disk a new header is zeros.
        self.begin_timestamp = 0
        self.end_timestamp = 0
        self.begin_phy_offset = 0
        self.end_phy_offset = 0
        self.hash_slot_count = 0
        self.index_count = 1
        if end_phy_offset > 0:
            self._set_begin_phy_offset(end_phy_offset)
            self._set_end_phy_offset(end_phy_offset)
        if end_timestamp > 0:
            self._set_begin_timestamp(end_timestamp)
            self._set_end_timestamp(end_timestamp)

    # ------------------------------------------------------------------ header (written through, field by field)
    def load(self) -> None:
        """Read the header of an existing file (``IndexHeader.load``: a stored indexCount <= 0 means 1)."""
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            index_count,
        ) = _HEADER.unpack_from(self._mm, 0)
        self.index_count = index_count if index_count > 0 else 1

    def _set_begin_timestamp(self, v: int) -> None:
        self.begin_timestamp = v
        _I64.pack_into(self._mm, _BEGIN_TIMESTAMP, v)

    def _set_end_timestamp(self, v: int) -> None:
        self.end_timestamp = v
        _I64.pack_into(self._mm, _END_TIMESTAMP, v)

    def _set_begin_phy_offset(self, v: int) -> None:
        self.begin_phy_offset = v
        _I64.pack_into(self._mm, _BEGIN_PHY_OFFSET, v)

    def _set_end_phy_offset(self, v: int) -> None:
        self.end_phy_offset = v
        _I64.pack_into(self._mm, _END_PHY_OFFSET, v)

    def _write_header(self) -> None:
        """``IndexHeader.updateByteBuffer``: all six fields (used by flush)."""
        _HEADER.pack_into(
            self._mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    # ------------------------------------------------------------------ writes
    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Index ``key`` (a built ``topic#key``); False when the file is full (the caller rolls to a new file)."""
        return self.put_hash(key_hash(key), phy_offset, store_timestamp)

    def put_hash(self, key_hash_value: int, phy_offset: int, store_timestamp: int) -> bool:
        """``putKey`` with the key's index hash already computed (see ``index_key_hash``)."""
        return self.put_hashes((key_hash_value,), 0, phy_offset, store_timestamp) == 1

    def put_hashes(self, hashes: Sequence[int], start: int, phy_offset: int, store_timestamp: int) -> int:
        """``putKey`` for ``hashes[start:]`` (the keys of one record); returns how far it got (``len(hashes)``
        unless the file filled up first)."""
        record, key = self.put_records(((hashes, phy_offset, store_timestamp),), 0, start)
        return len(hashes) if record >= 1 else key

    def put_records(
        self, records: Sequence[tuple[Sequence[int], int, int]], record: int = 0, key: int = 0
    ) -> tuple[int, int]:
        """``putKey`` for every key hash of ``records[record:]`` (``(hashes, phy_offset, store_timestamp)`` in
        commit-log order), starting with key ``key`` of the first; returns where it stopped: ``(len(records),
        0)`` when everything is in, else the ``(record, key)`` that did not fit (the file is full).

        Entries and slots are written key by key exactly as RocketMQ's ``putKey`` does; the header fields it
        rewrites on every key are written once at the end with the values they would have by then, so the
        bytes are the same.
        """
        index_count = self.index_count
        index_num = self.index_num
        mm = self._mm
        slots = self.hash_slot_num
        entries_at = self._entries_at
        begin = self.begin_timestamp
        begin_phy = -1
        slot_count = self.hash_slot_count
        unpack_slot = _I32.unpack_from
        pack_slot = _I32.pack_into
        pack_entry = _ENTRY.pack_into
        last_phy = last_ts = -1
        n_records = len(records)
        while record < n_records:
            hashes, phy, ts = records[record]
            n = len(hashes)
            if key < n:
                if index_count >= index_num:
                    break
                if begin <= 0:
                    time_diff = 0
                else:  # Java long division truncates toward zero; negatives are clamped to 0 anyway
                    delta = ts - begin
                    time_diff = 0 if delta < 0 else delta // 1000
                    if time_diff > INT_MAX:
                        time_diff = INT_MAX
                while key < n and index_count < index_num:
                    h = hashes[key]
                    abs_slot_pos = INDEX_HEADER_SIZE + (h % slots) * HASH_SLOT_SIZE
                    slot_value = unpack_slot(mm, abs_slot_pos)[0]
                    if slot_value <= INVALID_INDEX or slot_value > index_count:
                        slot_value = INVALID_INDEX
                        slot_count += 1
                    pack_entry(mm, entries_at + index_count * INDEX_ENTRY_SIZE, h, phy, time_diff, slot_value)
                    pack_slot(mm, abs_slot_pos, index_count)
                    if index_count <= 1:  # the file's first entry: its record becomes the begin (docs/design/store-formats.md#index-files)
                        begin, begin_phy, time_diff = ts, phy, 0
                        self.begin_timestamp, self.begin_phy_offset = ts, phy
                    index_count += 1
                    self.index_count = index_count  # readers accept the slot only once this covers it
                    key += 1
                last_phy, last_ts = phy, ts
                if key < n:
                    break
            record += 1
            key = 0
        if last_phy >= 0:
            if begin_phy >= 0:
                self.begin_timestamp = begin
                self.begin_phy_offset = begin_phy
                _I64.pack_into(mm, _BEGIN_TIMESTAMP, begin)
                _I64.pack_into(mm, _BEGIN_PHY_OFFSET, begin_phy)
            self.hash_slot_count = slot_count
            self.index_count = index_count
            self.end_phy_offset = last_phy
            self.end_timestamp = last_ts
            _I64.pack_into(mm, _END_TIMESTAMP, last_ts)
            _TAIL.pack_into(mm, _END_PHY_OFFSET, last_phy, slot_count, index_count)
        return record, key

    # ------------------------------------------------------------------ reads
    def is_time_matched(self, begin: int, end: int) -> bool:
        fb, fe = self.begin_timestamp, self.end_timestamp
        return (begin < fb and end > fe) or fb <= begin <= fe or fb <= end <= fe

    def select_phy_offset(self, out: list[int], key: str, max_num: int, begin: int, end: int) -> None:
        """Append to ``out`` (newest first) the phy offsets of ``key``'s chain stored within ``[begin, end]``.

        Only the hash is compared, like RocketMQ: the caller re-checks the key on the decoded message.
        """
        self.select_by_hash(out, key_hash(key), max_num, begin, end)

    def select_by_hash(self, out: list[int], key_hash_value: int, max_num: int, begin: int, end: int) -> None:
        mm = self._mm
        index_count = self.index_count
        slot_value = _I32.unpack_from(
            mm, INDEX_HEADER_SIZE + (key_hash_value % self.hash_slot_num) * HASH_SLOT_SIZE
        )[0]
        if slot_value <= INVALID_INDEX or slot_value > index_count or index_count <= 1:
            return
        file_begin = self.begin_timestamp
        entries_at = self._entries_at
        current = slot_value
        while len(out) < max_num:
            hash_read, phy, time_diff, prev = _ENTRY.unpack_from(mm, entries_at + current * INDEX_ENTRY_SIZE)
            if time_diff < 0:
                break
            time_read = file_begin + time_diff * 1000
            # a record re-indexed after an abnormal restart (offset == end rule) is reported once
            if hash_read == key_hash_value and begin <= time_read <= end and phy not in out:
                out.append(phy)
            if prev <= INVALID_INDEX or prev > index_count or prev == current or time_read < begin:
                break
            current = prev

    def entry(self, number: int) -> tuple[int, int, int, int]:
        """Entry ``number`` as ``(key_hash, phy_offset, time_diff, prev)`` (tools and tests)."""
        return _ENTRY.unpack_from(self._mm, self._entries_at + number * INDEX_ENTRY_SIZE)

    def slot(self, key_hash_value: int) -> int:
        """The chain head stored in ``key_hash_value``'s slot (tools and tests)."""
        return _I32.unpack_from(
            self._mm, INDEX_HEADER_SIZE + (key_hash_value % self.hash_slot_num) * HASH_SLOT_SIZE
        )[0]

    def header_on_disk(self) -> tuple[int, int, int, int, int, int]:
        """The six header fields as currently stored in the file's bytes."""
        return _HEADER.unpack_from(self._mm, 0)

    # ------------------------------------------------------------------ truncation (replication's restart rule)
    def truncate(self, phy_offset: int) -> None:
        """Remove the newest entries whose phy offset is ``>= phy_offset``, unlinking each from its chain.

        Entries are appended in commit-log order, so the doomed ones are a suffix; removing them newest first
        means each is the head of its chain when it goes. ``end_timestamp`` becomes the last kept entry's time
        at the index's one-second precision (rounded up).
        """
        mm = self._mm
        number = self.index_count - 1
        kept_phy = None
        while number >= 1:
            key_hash_value, phy, time_diff, prev = self.entry(number)
            if phy < phy_offset:
                kept_phy, kept_diff = phy, time_diff
                break
            abs_slot_pos = INDEX_HEADER_SIZE + (key_hash_value % self.hash_slot_num) * HASH_SLOT_SIZE
            if _I32.unpack_from(mm, abs_slot_pos)[0] == number:
                _I32.pack_into(mm, abs_slot_pos, prev)
                if prev <= INVALID_INDEX:
                    self.hash_slot_count -= 1
            mm[
                self._entries_at + number * INDEX_ENTRY_SIZE : self._entries_at
                + (number + 1) * INDEX_ENTRY_SIZE
            ] = bytes(INDEX_ENTRY_SIZE)
            number -= 1
        if number == self.index_count - 1:
            return
        self.index_count = number + 1
        if kept_phy is not None:
            self.end_phy_offset = kept_phy
            self.end_timestamp = min(self.end_timestamp, self.begin_timestamp + kept_diff * 1000 + 999)
        self._write_header()

    # ------------------------------------------------------------------ crash repair
    def _slot_values(self) -> array:
        """Every hash slot as an int array (one copy of the slot table, not one unpack per slot)."""
        slots = array("i")
        slots.frombytes(self._mm[INDEX_HEADER_SIZE : self._entries_at])
        if sys.byteorder == "little":
            slots.byteswap()
        return slots

    def repair_after_crash(self) -> int:
        """Bring the file back to what its header says, after the process died while indexing; returns the
        number of entries dropped.

        ``put_records`` writes entries and slots key by key but the header once per slice, so a kill leaves
        entries (and slots pointing at them) past the header's indexCount. Left there, the slots look invalid
        (they exceed the count) and re-indexing overwrites entries chains still use. Writes of one process
        reach the page cache in order, so those entries are a run starting at indexCount, ending at the
        newest slot value or the last non-zero entry: unlinking them newest first (as ``truncate``) restores
        the slots of the header's state. End offset and slot count are then recomputed from what is kept (the
        header's own fields may be torn too), and reput re-indexes from the end offset.
        """
        mm = self._mm
        count = self.index_count
        slots = self._slot_values()
        end = max(count, max(slots, default=0) + 1)
        zero = bytes(INDEX_ENTRY_SIZE)
        at = self._entries_at
        while end < self.index_num and mm[at + end * INDEX_ENTRY_SIZE : at + (end + 1) * INDEX_ENTRY_SIZE] != zero:
            end += 1
        for number in range(end - 1, count - 1, -1):
            key_hash_value, _phy, _diff, prev = self.entry(number)
            abs_slot_pos = INDEX_HEADER_SIZE + (key_hash_value % self.hash_slot_num) * HASH_SLOT_SIZE
            if _I32.unpack_from(mm, abs_slot_pos)[0] == number:
                _I32.pack_into(mm, abs_slot_pos, prev if 0 < prev < number else INVALID_INDEX)
            mm[at + number * INDEX_ENTRY_SIZE : at + (number + 1) * INDEX_ENTRY_SIZE] = zero
        slot_count = self.hash_slot_count
        if end > count:
            slot_count = len(slots) - self._slot_values().count(INVALID_INDEX)
        end_phy = self.entry(count - 1)[1] if count > 1 else self.end_phy_offset
        if (end, slot_count, end_phy) != (count, self.hash_slot_count, self.end_phy_offset):
            self.hash_slot_count = slot_count
            self.end_phy_offset = end_phy
            self._write_header()
        return end - count

    # ------------------------------------------------------------------ lifecycle
    def flush(self) -> None:
        """``IndexFile.flush``: rewrite the whole header, then force the mapping to disk."""
        if self._mf.closed:
            return
        self._write_header()
        self._mf.sync_to_disk()

    def close(self) -> None:
        self._mf.close()

    def destroy(self) -> None:
        self._mf.destroy()

    @property
    def closed(self) -> bool:
        return self._mf.closed

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.file_name}, entries={self.index_count - 1}, "
            f"phy=[{self.begin_phy_offset},{self.end_phy_offset}], ts=[{self.begin_timestamp},{self.end_timestamp}])"
        )
