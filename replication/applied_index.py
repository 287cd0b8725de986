"""AppliedIndex: which Raft index produced which commit-log range, in a small side file next to the store.

Why: the commit log is RocketMQ's format and has no room for Raft indexes, yet apply must be idempotent when
pysyncobj replays its journal after a restart, and a replica that copied commit-log bytes from a peer must know
which Raft entries those bytes already contain. Every applied command appends one 24-byte frame
(raft index, commit-log start, commit-log end) -- metadata commands too, with start == end -- so "the last
applied Raft index" and "the commit-log end it produced" are always known together.

Only the recent tail is kept (rewritten when it grows past ``keep * 2`` frames), which is all that restart,
replay and catch-up need.

Durability (docs/design/durability.md): frames are appended without a sync; the store's commit-log flush syncs
this file first (``RaftWritePath._before_commit_log_flush``), and a snapshot syncs it before the dump is written.
At start-up recovery drops frames whose bytes did not reach the disk or whose entries the Raft log no longer
holds; commit-log bytes no frame accounts for are withheld, never cut unproven.
"""

from __future__ import annotations

import os
import struct
import threading

from raftmq.store.json_file import fsync_dir

_FRAME = struct.Struct(">QQQ")


class AppliedIndex:
    def __init__(self, path: str, keep: int = 65536):
        self.path = path
        self.keep = keep
        self._lock = threading.Lock()
        self._frames: list[tuple[int, int, int]] = []
        data = b""
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
        usable = len(data) - len(data) % _FRAME.size  # a torn last frame is dropped
        for off in range(0, usable, _FRAME.size):
            self._frames.append(_FRAME.unpack_from(data, off))
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if usable != len(data):
            os.ftruncate(self._fd, usable)
        os.lseek(self._fd, 0, os.SEEK_END)

    def close(self) -> None:
        """Sync and close (a clean stop leaves the frames on disk with the commit log they describe)."""
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1

    @property
    def last(self) -> tuple[int, int]:
        """(last applied Raft index, commit-log end after it); (0, 0) when nothing was applied."""
        with self._lock:
            if not self._frames:
                return 0, 0
            idx, _, end = self._frames[-1]
            return idx, end

    def append(self, index: int, start: int, end: int) -> None:
        with self._lock:
            self._frames.append((index, start, end))
            os.write(self._fd, _FRAME.pack(index, start, end))
            if len(self._frames) > 2 * self.keep:
                self._rewrite(self._frames[-self.keep:])

    def reset(self, frames: list[tuple[int, int, int]]) -> None:
        """Replace everything (catch-up installed a peer's state)."""
        with self._lock:
            self._rewrite(list(frames))

    def drop_beyond(self, offset: int) -> tuple[int, int]:
        """Forget frames whose range ends after ``offset`` (the commit log was recovered or truncated to it)."""
        with self._lock:
            keep = [f for f in self._frames if f[2] <= offset]
            if len(keep) != len(self._frames):
                self._rewrite(keep)
        return self.last

    def frames_after(self, index: int) -> list[tuple[int, int, int]]:
        """The frames of Raft entries after ``index`` (a copy)."""
        with self._lock:
            return [f for f in self._frames if f[0] > index]

    def drop_beyond_index(self, index: int) -> tuple[int, int]:
        """Forget frames of Raft entries after ``index`` (the Raft log no longer holds them)."""
        with self._lock:
            keep = [f for f in self._frames if f[0] <= index]
            if len(keep) != len(self._frames):
                self._rewrite(keep)
        return self.last

    def end_at_or_before(self, index: int) -> tuple[int, int] | None:
        """(index, end) of the last frame with raft index <= ``index``; None if that is older than the tail."""
        with self._lock:
            found = None
            for f in reversed(self._frames):
                if f[0] <= index:
                    found = (f[0], f[2])
                    break
            return found

    def fsync(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)

    def _rewrite(self, frames: list[tuple[int, int, int]]) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(_FRAME.pack(*fr) for fr in frames))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self._frames = frames
