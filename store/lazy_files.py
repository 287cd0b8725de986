"""LazyFiles: how a store keeps thousands of small consume-queue files cheaply (docs/design/topic-table.md#queue-files).

Why: a consume-queue file used to be mapped from the start to the end of the process: one descriptor and one
mapping per file (a node with 8,000 used queues held 8,020 descriptors, and Linux allows 65,530 mappings per
process), and the first touch of each mapping read ahead up to the device's read-ahead window (140 KB of page
cache resident per file, although a file of a quiet queue holds one 20-byte unit). Here a file is mapped when it is
read or written, with ``MADV_RANDOM`` (a touch faults in one page), and unmapped again when it was not used
for a sweep interval or when more than ``max_mapped`` files are mapped (the one mapped longest ago and not used
since goes first). A reader or writer holding the mapping keeps it alive: unmapping drops only the file's own
reference, so nobody ever touches a closed mapping.

Creating a file in a new directory used to sync that directory (and the parents it created) at once, two or
three syncs for the first message of every queue, on the reput thread. Consume queues are derived data and
recovery trusts them only up to the checkpoint, which the consume-queue flush moves after it synced the files:
so the directories of new files are recorded here and synced by ``sync_directories``, which that flush calls
before it syncs the files (one journal commit for all of them).
"""

from __future__ import annotations

import collections
import logging
import resource
import threading
import time
from typing import Any

from raftmq.store.json_file import fsync_dir, makedirs_durably

log = logging.getLogger("raftmq.store.lazy_files")


def descriptor_budget(max_mapped: int) -> int:
    """``max_mapped`` lowered to half the process's soft descriptor limit (each mapping holds a descriptor, and
    the commit log, index and sockets need the rest): a low ``ulimit -n`` costs remapping, never a failed read."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or max_mapped <= soft // 2:
        return max_mapped
    budget = max(1, soft // 2)
    log.warning("at most %d consume-queue files mapped at once, not %d: the descriptor limit (ulimit -n) is %d",
                budget, max_mapped, soft)
    return budget


class LazyFiles:
    """The mapped files of one store's consume queues, and the directories their creation left unsynced."""

    def __init__(self, max_mapped: int = 4096, idle_seconds: float = 60.0) -> None:
        if max_mapped < 1:
            raise ValueError(f"max_mapped must be at least 1, got {max_mapped}")
        self.max_mapped = max_mapped
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._mapped: collections.OrderedDict[int, Any] = collections.OrderedDict()  # id -> MappedFile, oldest first
        self._unsynced_dirs: set[str] = set()
        self._last_sweep = time.monotonic()
        self.unmapped = 0  # mappings released so far (idle or over the limit)

    # ------------------------------------------------------------------ mappings
    @property
    def mapped_count(self) -> int:
        return len(self._mapped)

    def mapped(self, mf: Any) -> None:
        """``mf`` (a MappedFile) was just mapped: count it, and release the oldest unused mappings over the limit."""
        with self._lock:
            self._mapped[id(mf)] = mf
            chances = len(self._mapped)
            while len(self._mapped) > self.max_mapped and chances > 0:
                chances -= 1
                _key, oldest = self._mapped.popitem(last=False)
                if oldest.used and oldest is not mf:  # used since it was last looked at: one more round
                    oldest.used = False
                    self._mapped[id(oldest)] = oldest
                    continue
                self._release(oldest)
            while len(self._mapped) > self.max_mapped:  # everything was in use: the oldest goes anyway
                _key, oldest = self._mapped.popitem(last=False)
                self._release(oldest)

    def forget(self, mf: Any) -> None:
        """``mf`` was closed (its mapping is gone with it)."""
        with self._lock:
            self._mapped.pop(id(mf), None)

    def sweep(self, now: float | None = None) -> int:
        """Unmap every file not used since the previous sweep; returns how many (the consume-queue flush calls it
        every second, and it sweeps once ``idle_seconds`` have passed)."""
        now = time.monotonic() if now is None else now
        if now - self._last_sweep < self.idle_seconds:
            return 0
        self._last_sweep = now
        released = 0
        with self._lock:
            for key, mf in list(self._mapped.items()):
                if mf.used:
                    mf.used = False
                    continue
                del self._mapped[key]
                self._release(mf)
                released += 1
        return released

    def _release(self, mf: Any) -> None:
        mf.unmap()
        self.unmapped += 1

    # ------------------------------------------------------------------ directories
    def makedirs(self, directory: str) -> None:
        """``os.makedirs``; the parents of the directories it created are synced by ``sync_directories``."""
        makedirs_durably(directory, sync_parent=self.created_in)

    def created_in(self, directory: str) -> None:
        """A name was created in ``directory`` and is not durable until ``sync_directories``."""
        with self._lock:
            self._unsynced_dirs.add(directory)

    def sync_directories(self) -> int:
        """Sync every directory a file or directory was created in since the last call (parents first); a
        directory deleted meanwhile is skipped. Returns how many were synced."""
        with self._lock:
            dirs, self._unsynced_dirs = self._unsynced_dirs, set()
        done = 0
        try:
            for d in sorted(dirs, key=len):
                try:
                    fsync_dir(d)
                    done += 1
                except FileNotFoundError:
                    pass
        except BaseException:
            with self._lock:  # try them again next time
                self._unsynced_dirs |= dirs
            raise
        return done
