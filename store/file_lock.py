"""The store's ``lock`` file: an exclusive lock so two processes can never open one store directory.

Like RocketMQ it writes ``lock`` into the file and takes an exclusive POSIX record lock on byte 0 (the lock
a JVM's ``FileChannel.tryLock`` takes, so a Java broker and raftmq also exclude each other). POSIX locks do
not conflict inside one process, so an in-process registry also refuses a second open in this process.
"""

from __future__ import annotations

import fcntl
import os
import threading

from raftmq.store.errors import StoreLockedError

_held: set[str] = set()
_held_lock = threading.Lock()


class StoreLock:
    """Held from ``acquire`` to ``release``; ``StoreLockedError`` when someone else holds it."""

    def __init__(self, path: str) -> None:
        self.path = os.path.realpath(path)
        self._fd: int | None = None

    def acquire(self) -> None:
        with _held_lock:
            if self.path in _held:
                raise StoreLockedError(
                    f"store lock {self.path} is already held by another MessageStore in this process; "
                    "shut that one down first"
                )
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError:
                os.close(fd)
                raise StoreLockedError(
                    f"store directory {os.path.dirname(self.path)} is in use by another process "
                    f"(lock {self.path} is held); stop that process or use another data directory"
                ) from None
            os.pwrite(fd, b"lock", 0)
            _held.add(self.path)
            self._fd = fd

    def release(self) -> None:
        with _held_lock:
            if self._fd is None:
                return
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)
            finally:
                os.close(self._fd)
                self._fd = None
                _held.discard(self.path)
