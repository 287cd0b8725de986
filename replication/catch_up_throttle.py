"""Serving-side limits on commit-log catch-up (FetchCommitLog): a byte rate and a number of streams per node.

Why: a wiped or new member copies the whole commit log from a peer. Unthrottled, that copy reads the peer's disk
and spends its CPU as fast as the network allows, and the peer may be the leader serving producers. One token
bucket per node is shared by every concurrent fetch, so two rebuilding members together get the configured rate,
not twice it; the stream cap bounds how many copies (and page-cache sweeps) run at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` bytes per second with bursts up to ``burst`` bytes; ``rate`` 0 means unlimited.

    ``reserve(n)`` takes ``n`` tokens at once, going into debt when there are not enough, and returns how long the
    caller must wait before using them. Debt makes a chunk larger than the burst possible and keeps concurrent
    callers in line: each waits for the debt of those who reserved before it.
    """

    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic):
        if rate < 0:
            raise ValueError(f"rate must be >= 0 bytes/s (0 = unlimited), got {rate}")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else rate)
        if self.rate and self.burst <= 0:
            raise ValueError(f"burst must be > 0 bytes, got {burst}")
        self._clock = clock
        self._tokens = self.burst
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self, n: int) -> float:
        """Take ``n`` tokens now; the seconds to wait before sending them (0.0 when there were enough)."""
        if not self.rate:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= n
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def refund(self, n: int) -> None:
        """Give back tokens reserved but not used (a short read at the end of a segment)."""
        if self.rate and n > 0:
            with self._lock:
                self._tokens = min(self.burst, self._tokens + n)


class CatchUpThrottle:
    """One node's FetchCommitLog budget: ``bytes_per_s`` shared by at most ``max_streams`` concurrent fetches.

    Counters for metrics: ``bytes_served`` (commit-log bytes sent to catching-up peers), ``streams`` (running now)
    and ``refused`` (fetches turned away because ``max_streams`` were running).
    """

    def __init__(self, bytes_per_s: int, max_streams: int, clock: Callable[[], float] = time.monotonic):
        if max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {max_streams}")
        # a burst of a quarter second: smooth enough for the disk, and chunks are capped to it (see chunk_bytes)
        self.bucket = TokenBucket(bytes_per_s, max(64 << 10, bytes_per_s // 4), clock) if bytes_per_s else \
            TokenBucket(0)
        self.max_streams = max_streams
        self.streams = 0
        self.refused = 0
        self.bytes_served = 0
        self._lock = threading.Lock()

    def chunk_bytes(self, asked: int) -> int:
        """The chunk size to read: what the peer asked for, at most one burst when the rate is limited."""
        return min(asked, int(self.bucket.burst)) if self.bucket.rate else asked

    def try_open(self) -> bool:
        """Start a stream if fewer than ``max_streams`` run; False (counted as refused) otherwise."""
        with self._lock:
            if self.streams >= self.max_streams:
                self.refused += 1
                return False
            self.streams += 1
            return True

    def close(self) -> None:
        with self._lock:
            self.streams -= 1

    def served(self, n: int) -> None:
        with self._lock:
            self.bytes_served += n
