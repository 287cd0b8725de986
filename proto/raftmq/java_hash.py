"""``java.lang.String.hashCode``, exactly: RocketMQ's files (tags codes, index slots) and its queue choices (a FIFO
message group's queue) depend on it. Neutral, so the store (store/java.py), the node and the SDK compute the same
value (docs/design/store-formats.md#java-behaviours-the-bytes-depend-on).
"""

from __future__ import annotations

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
