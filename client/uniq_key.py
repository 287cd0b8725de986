"""Producer-side message ids (UNIQ_KEY), laid out like RocketMQ's MessageClientIDSetter.

32 upper-case hex chars: IPv4 (4 bytes) + pid (2) + a random per-producer value (4, where RocketMQ puts a
class-loader hash) + milliseconds since the start of the month (4) + a counter (2). Every message gets one
before its first send and keeps it on every retry, so a checker can tell a duplicate (same UNIQ_KEY twice) from
a loss (a UNIQ_KEY acknowledged but never read back).
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import secrets
import socket
import struct
import threading
import time

_TAIL = struct.Struct(">IH")


def _local_ipv4() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return socket.inet_aton("127.0.0.1")


class UniqKeyGenerator:
    """Thread-safe generator of UNIQ_KEYs; one per producer."""

    def __init__(self) -> None:
        self._prefix = (_local_ipv4() + struct.pack(">H", os.getpid() & 0xFFFF) + secrets.token_bytes(4)).hex()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start_ms = 0
        self._next_month_ms = 0

    def _since_month_start(self, now_ms: int) -> int:
        if now_ms >= self._next_month_ms:
            now = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC)
            start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            nxt = (start + dt.timedelta(days=32)).replace(day=1)
            self._month_start_ms = int(start.timestamp() * 1000)
            self._next_month_ms = int(nxt.timestamp() * 1000)
        return now_ms - self._month_start_ms

    def next(self) -> str:
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            delta = self._since_month_start(now_ms)
            count = next(self._counter) & 0xFFFF
        return (self._prefix + _TAIL.pack(delta & 0xFFFFFFFF, count).hex()).upper()
