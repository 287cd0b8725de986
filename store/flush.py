"""Flush services: when the page cache reaches the disk (RocketMQ's FlushRealTimeService,
GroupCommitService and FlushConsumeQueueService).

* ASYNC: a thread flushes the commit log every ``flush_interval_commit_log`` ms when at least
  ``flush_commit_log_least_pages`` pages are dirty, and everything every ``..._thorough_interval`` ms.
* SYNC: a put waits on ``GroupCommitService.wait_for_flush``; one fsync serves every put waiting at that time
  (group commit), so concurrent writers share the cost of the disk flush.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from raftmq.store.service_thread import ServiceThread

log = logging.getLogger("raftmq.store.flush")


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class PeriodicFlushService(ServiceThread):
    """Flush with a least-pages rule every ``interval_ms``, thoroughly every ``thorough_ms``; final flush on stop."""

    shutdown_timeout = 10.0

    def __init__(self, name: str, flush: Callable[[int], object], interval_ms: int, least_pages: int,
                 thorough_ms: int, after_thorough: Callable[[], object] | None = None) -> None:
        super().__init__(name)
        self._flush = flush
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.thorough_ms = thorough_ms
        self._after_thorough = after_thorough
        self._wake = threading.Event()

    def wakeup(self) -> None:
        self._wake.set()

    def run(self) -> None:
        last_thorough = _now_ms()
        failed = ""
        while not self.stopped:
            self._wake.wait(self.interval_ms / 1000.0)
            self._wake.clear()
            now = _now_ms()
            least = self.least_pages
            if now >= last_thorough + self.thorough_ms:
                last_thorough = now
                least = 0
            try:
                self._flush(least)
                if least == 0 and self._after_thorough is not None:
                    self._after_thorough()
                failed = ""
            except Exception as e:
                if str(e) != failed:  # the same failure every interval is logged once
                    log.exception("%s: flush failed; retrying in %d ms", self.name, self.interval_ms)
                failed = str(e)
        try:  # RocketMQ flushes once more on the way out
            self._flush(0)
            if self._after_thorough is not None:
                self._after_thorough()
        except Exception:
            log.exception("%s: final flush failed", self.name)


class GroupCommitService(ServiceThread):
    """SYNC flush: callers wait until the flushed offset reaches their record's end; one flush per group."""

    shutdown_timeout = 10.0

    def __init__(self, flush_all: Callable[[], int], flushed_where: int) -> None:
        super().__init__("GroupCommitService")
        self._flush_all = flush_all
        self._cond = threading.Condition()
        self._requested = 0
        self._flushed = flushed_where
        self.flush_count = 0  # fsync rounds performed (one per group of waiting puts)
        self.error: BaseException | None = None

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def wakeup(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_for_flush(self, offset: int, timeout_s: float) -> bool:
        """Block until everything below ``offset`` is durable; False on timeout (FLUSH_DISK_TIMEOUT)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if self._flushed >= offset:
                return True
            if offset > self._requested:
                self._requested = offset
                self._cond.notify_all()
            while self._flushed < offset:
                left = deadline - time.monotonic()
                if left <= 0 or self.stopped:
                    return self._flushed >= offset
                self._cond.wait(left)
            return True

    def run(self) -> None:
        while True:
            with self._cond:
                while self._requested <= self._flushed and not self.stopped:
                    self._cond.wait()
                stopping = self.stopped  # one last flush for whoever still waits, then stop
            try:
                flushed = self._flush_all()
                self.error = None
            except Exception as e:  # waiters time out with FLUSH_DISK_TIMEOUT; keep trying
                repeated = self.error is not None and str(self.error) == str(e)
                self.error = e
                if not repeated:  # the same failure over and over is logged once
                    log.exception("group commit flush failed")
                if stopping:
                    break
                time.sleep(0.5 if repeated else 0.01)
                continue
            with self._cond:
                self.flush_count += 1
                self._flushed = max(self._flushed, flushed)
                self._cond.notify_all()
            if stopping:
                break
