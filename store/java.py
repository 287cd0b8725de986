"""The JDK behaviours RocketMQ's file formats depend on, reproduced exactly (docs/design/store-formats.md#java-behaviours-the-bytes-depend-on).

``String.hashCode`` decides tags codes and index slots, ``HashMap`` iteration order decides the byte order
of the properties string, and ``CRC32 & 0x7FFFFFFF`` is the body CRC. All three were checked against a JDK.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable
from functools import lru_cache

_INT_MASK = 0xFFFFFFFF


@lru_cache(maxsize=8192)
def java_string_hash(s: str) -> int:
    """``java.lang.String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, int32 wrap-around."""
    h = 0
    if s.isascii():
        for ch in s.encode("ascii"):
            h = (31 * h + ch) & _INT_MASK
    else:
        b = s.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(b), 2):
            h = (31 * h + ((b[i] << 8) | b[i + 1])) & _INT_MASK
    return h - (1 << 32) if h & 0x80000000 else h


def masked_crc32(data: bytes | bytearray | memoryview) -> int:
    """``UtilAll.crc32``: java.util.zip.CRC32 masked with 0x7FFFFFFF (never negative; empty body -> 0)."""
    return zlib.crc32(data) & 0x7FFFFFFF


def _spread(h: int) -> int:
    """``HashMap.hash``: ``h ^ (h >>> 16)`` on the unsigned 32-bit value."""
    u = h & _INT_MASK
    return u ^ (u >> 16)


class JavaHashMap:
    """Key order of a ``java.util.HashMap<String, String>`` under a sequence of puts and removes.

    Buckets are visited in index order and entries inside a bucket in insertion order; a resize keeps
    the relative order inside each bucket; a bucket reaching 9 entries while the table is smaller than 64
    forces a resize (treeification itself is not modelled: unrealistic for message properties).
    """

    __slots__ = ("_cap", "_buckets", "_values", "_threshold")

    def __init__(self, initial_capacity: int = 16) -> None:
        cap = 1
        while cap < initial_capacity:
            cap <<= 1
        self._cap = cap
        self._buckets: list[list[str]] | None = None  # the JDK allocates the table on the first put
        self._values: dict[str, str] = {}
        self._threshold = int(cap * 0.75)

    def _bucket_of(self, key: str) -> int:
        return _spread(java_string_hash(key)) & (self._cap - 1)

    def _resize(self, new_cap: int) -> None:
        old = self._buckets or []
        self._cap = new_cap
        self._threshold = int(new_cap * 0.75)
        buckets: list[list[str]] = [[] for _ in range(new_cap)]
        for bucket in old:  # old bucket j splits into j and j+oldCap, each keeping its order
            for key in bucket:
                buckets[_spread(java_string_hash(key)) & (new_cap - 1)].append(key)
        self._buckets = buckets

    def put(self, key: str, value: str) -> None:
        if self._buckets is None:
            self._resize(self._cap)
        if key in self._values:
            self._values[key] = value  # existing entry keeps its place
            return
        self._values[key] = value
        assert self._buckets is not None
        bucket = self._buckets[self._bucket_of(key)]
        bucket.append(key)
        if len(bucket) >= 9 and self._cap < 64:  # treeifyBin on a small table resizes instead
            self._resize(self._cap * 2)
        if len(self._values) > self._threshold:
            self._resize(self._cap * 2)

    def remove(self, key: str) -> None:
        if key not in self._values:
            return
        del self._values[key]
        assert self._buckets is not None
        self._buckets[self._bucket_of(key)].remove(key)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        if self._buckets is None:
            return []
        return [k for bucket in self._buckets for k in bucket]

    def items(self) -> list[tuple[str, str]]:
        return [(k, self._values[k]) for k in self.keys()]


def hashmap_order(keys: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """Iteration order of a fresh HashMap after putting ``keys`` in the given order."""
    m = JavaHashMap(initial_capacity)
    for k in keys:
        m.put(k, "")
    return m.keys()


def time_millis_to_human_string(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: ``yyyyMMddHHmmssSSS`` in local time (index file names)."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000.0)) + f"{ms % 1000:03d}"


def offset_to_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: the offset zero-padded to 20 digits."""
    return f"{offset:020d}"
