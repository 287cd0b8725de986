"""DiskHealth: can the store's filesystem take the next write? (free space, ENOSPC seen, I/O errors)

Why its own object: a write that cannot be stored must be refused at once with the reason (not retried for
seconds as "busy"), readiness must say so, and the store must notice by itself when space comes back. Three
states feed it:

* free space below ``disk_min_free_bytes`` (measured with ``statvfs``, at most every ``_PROBE_S``);
* an ENOSPC / EDQUOT seen by a write (segment creation, fallocate, a consume-queue or index file): refuses
  writes until free space is back above the threshold;
* an I/O error on a write, and *any* error of an msync / fsync (ENOSPC included: a thin-provisioned or
  loop-backed volume reports lost writeback that way, and Linux then marks the pages clean, so the next fsync
  "succeeds" over lost data): what is on this disk can no longer be trusted to be what was written, so writes
  stay refused until the process restarts (and recovery checks the files). It is never cleared by itself and
  never retried as if nothing happened.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time

from raftmq.store.errors import DiskFullError, StorageIOError

log = logging.getLogger("raftmq.store.disk_health")

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_PROBE_S = 0.2  # statvfs at most this often on the write path


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer can still use on ``path``'s filesystem (-1 when it cannot be measured)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1
    return st.f_bavail * st.f_frsize


def volume_bytes(path: str) -> int:
    """Size of the filesystem ``path`` is (or will be) on: its nearest existing directory's (-1 when unknown)."""
    p = os.path.abspath(path)
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    try:
        st = os.statvfs(p)
    except OSError:
        return -1
    return st.f_blocks * st.f_frsize


class DiskHealth:
    """Write admission for one store directory; see the module docstring."""

    def __init__(self, path: str, min_free_bytes: int, member: str = "") -> None:
        self.path = path
        self.min_free_bytes = max(0, min_free_bytes)
        self.member = member or path  # the node sets its id: messages say "disk full on <member>"
        self._lock = threading.Lock()
        self._full_path = ""  # where the last ENOSPC happened ("" when none is pending)
        self._full_needs = 0  # free bytes that write needed (a preallocated segment): cleared only above it
        self._io_error = ""  # sticky until restart
        self._free = -1
        self._probed_at = 0.0
        self.full_events = 0  # times writes were turned away for space (metrics)
        self.io_errors = 0

    # ------------------------------------------------------------------ probes
    def _probe(self, force: bool = False) -> int:
        now = time.monotonic()
        if force or now - self._probed_at >= _PROBE_S:
            self._free = free_bytes(self.path)
            self._probed_at = now
        return self._free

    @property
    def free(self) -> int:
        return self._probe()

    def full_reason(self) -> str:
        """Why writes are refused for space ("" when they are not); clears a past ENOSPC once space is back."""
        free = self._probe()
        low = 0 <= free < self.min_free_bytes
        with self._lock:
            if self._full_path and not low:
                free = self._probe(force=True)
                if free < 0 or free >= max(self.min_free_bytes, self._full_needs):
                    log.warning("disk of %s has %d bytes free again: writes accepted", self.path, free)
                    self._full_path = ""
            where = self._full_path or (self.path if low else "")
        if not where:
            return ""
        return f"disk full on {self.member}: {where}, {max(free, 0)} bytes free"

    def io_error_reason(self) -> str:
        return self._io_error

    def reason(self) -> str:
        """Why this store cannot take writes now, "" when it can."""
        return self._io_error or self.full_reason()

    def check_writable(self) -> None:
        """Raise ``StorageIOError`` / ``DiskFullError`` when a write cannot be taken now."""
        if self._io_error:
            raise StorageIOError(self._io_error)
        reason = self.full_reason()
        if reason:
            self.full_events += 1
            raise DiskFullError(reason)

    # ------------------------------------------------------------------ errors seen by writers
    def record_error(self, exc: BaseException, path: str, needs: int = 0) -> None:
        """A write to ``path`` failed with ``exc``: remember it (ENOSPC until space is back, EIO for good).

        ``needs``: the free bytes that write needed (a preallocated segment), so writes resume only once it fits.
        """
        err = exc.__cause__ if isinstance(exc, DiskFullError) and exc.__cause__ is not None else exc
        code = getattr(err, "errno", None)
        if code in _NO_SPACE or isinstance(exc, DiskFullError):
            with self._lock:
                if not self._full_path:
                    log.error("disk full on %s: %s (%s); refusing writes until space is freed", self.member,
                              path, err)
                self._full_path = path
                self._full_needs = needs
            self._probe(force=True)
            return
        if isinstance(err, OSError):
            self.record_io_error(err, path)

    def record_io_error(self, exc: OSError, path: str) -> None:
        """An I/O error on a write or fsync of ``path``: this member stops taking writes until it restarts."""
        with self._lock:
            self.io_errors += 1
            if self._io_error:
                return
            self._io_error = (f"I/O error on {self.member}: {path}: {exc.strerror or exc}; writes stopped and "
                              "the member stays not ready (what reached the disk is unknown): check the disk, "
                              "then restart the node")
        log.critical("%s", self._io_error)


def is_no_space(exc: BaseException) -> bool:
    return getattr(exc, "errno", None) in _NO_SPACE
