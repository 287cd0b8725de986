"""One regular file's bytes: a durable file on the backing disk, overlaid by volatile chunks until an fsync.

Writes land in 64 KiB chunks held in memory (a chunk is filled from the durable bytes when first written, like a
page cache); reads see the chunks over the durable file. ``sync`` writes only the dirty spans of the dirty
chunks, so an fsync of a big mapped segment with a few dirty pages costs a few small writes. Dropping the object
without ``sync`` is the power cut: the durable file never saw those writes.

A truncate is volatile too: durable bytes at or past ``_visible_durable`` (the smallest size a truncate set
since the last sync) read as zeros, and the durable file is cut only by ``sync`` or ``sync_size``.
"""

from __future__ import annotations

import os

CHUNK = 64 * 1024


class FileData:
    """The current content of one file (``size`` bytes) and the durable content under ``backing_path``."""

    __slots__ = ("backing_path", "size", "durable_size", "_visible_durable", "_set_size", "_chunks", "_spans",
                 "_fd")

    def __init__(self, backing_path: str) -> None:
        self.backing_path = backing_path
        self._fd = os.open(backing_path, os.O_RDWR | os.O_CREAT, 0o600)
        self.durable_size = os.fstat(self._fd).st_size
        self.size = self.durable_size
        self._visible_durable = self.durable_size
        self._set_size: int | None = None  # the size the last truncate/fallocate set since the last sync
        self._chunks: dict[int, bytearray] = {}  # chunk index -> CHUNK bytes (zeros past ``size``)
        self._spans: dict[int, list[int]] = {}  # chunk index -> [lo, hi) written within the chunk

    # ------------------------------------------------------------------ state
    @property
    def unsynced_bytes(self) -> int:
        """Bytes written since the last sync (the dirty spans; an overwrite of one byte range counts once)."""
        return sum(hi - lo for lo, hi in self._spans.values())

    @property
    def synced(self) -> bool:
        """Nothing to lose at a cut: no unsynced write and the durable size is the current size."""
        return not self._spans and self.size == self.durable_size and self._visible_durable == self.durable_size

    @property
    def size_change_pending(self) -> bool:
        """A truncate or fallocate set the size since the last sync (metadata ``sync_size`` can make durable)."""
        return self._set_size is not None

    # ------------------------------------------------------------------ I/O
    def _durable(self, start: int, end: int) -> bytes:
        """The durable bytes of [start, end) as the current file sees them: zeros past a truncate or the end."""
        limit = min(end, self._visible_durable)
        data = os.pread(self._fd, limit - start, start) if limit > start else b""
        return data if len(data) == end - start else data + bytes(end - start - len(data))

    def read(self, offset: int, length: int) -> bytes:
        end = min(offset + length, self.size)
        if offset >= end:
            return b""
        if not self._chunks:
            return self._durable(offset, end)
        pieces = []
        run_start = offset  # start of a run of clean chunks, read from the durable file in one pread
        pos = offset
        while pos < end:
            index = pos // CHUNK
            chunk_start = index * CHUNK
            stop = min(chunk_start + CHUNK, end)
            chunk = self._chunks.get(index)
            if chunk is not None:
                if run_start < pos:
                    pieces.append(self._durable(run_start, pos))
                pieces.append(memoryview(chunk)[pos - chunk_start : stop - chunk_start])
                run_start = stop
            pos = stop
        if run_start < end:
            pieces.append(self._durable(run_start, end))
        return b"".join(pieces)

    def write(self, offset: int, data: bytes) -> None:
        view = memoryview(data)
        end = offset + len(data)
        pos = offset
        while pos < end:
            index = pos // CHUNK
            chunk_start = index * CHUNK
            lo = pos - chunk_start
            hi = min(CHUNK, end - chunk_start)
            piece = view[pos - offset : pos - offset + hi - lo]
            chunk = self._chunks.get(index)
            if chunk is None:
                if lo == 0 and hi == CHUNK:
                    chunk = self._chunks[index] = bytearray(piece)
                    self._spans[index] = [0, CHUNK]
                    pos += hi - lo
                    continue
                chunk = self._chunks[index] = bytearray(self._durable(chunk_start, chunk_start + CHUNK))
                self._spans[index] = [lo, hi]
            else:
                span = self._spans[index]
                span[0], span[1] = min(span[0], lo), max(span[1], hi)
            chunk[lo:hi] = piece
            pos += hi - lo
        if end > self.size:
            self.size = end

    def truncate(self, size: int) -> None:
        """Set the size (a volatile metadata change: ``sync`` or ``sync_size`` makes it durable)."""
        if size < self.size:
            for index in [i for i in self._chunks if i * CHUNK >= size]:
                del self._chunks[index]
                del self._spans[index]
            index, cut = divmod(size, CHUNK)
            chunk = self._chunks.get(index)
            if chunk is not None:
                chunk[cut:] = bytes(CHUNK - cut)
                span = self._spans[index]
                span[1] = max(min(span[1], cut), span[0])
            self._visible_durable = min(self._visible_durable, size)
        self.size = size
        self._set_size = size

    # ------------------------------------------------------------------ durability
    def sync(self) -> int:
        """Make the current content and size durable; returns the bytes written to the durable file."""
        if self._visible_durable < self.durable_size:
            os.ftruncate(self._fd, self._visible_durable)
        on_disk = min(self.durable_size, self._visible_durable)
        written = 0
        for index in sorted(self._spans):
            lo, hi = self._spans[index]
            start = index * CHUNK
            hi = min(hi, self.size - start)
            if hi > lo:
                written += os.pwrite(self._fd, memoryview(self._chunks[index])[lo:hi], start + lo)
                on_disk = max(on_disk, start + hi)
        if on_disk != self.size:
            os.ftruncate(self._fd, self.size)
        self._chunks.clear()
        self._spans.clear()
        self.durable_size = self._visible_durable = self.size
        self._set_size = None
        return written

    def sync_size(self) -> None:
        """Make only the size set by the last truncate/fallocate durable (the ext4-like metadata commit of the
        any-fsync mode); written data stays volatile."""
        if self._set_size is None:
            return
        if self._visible_durable < self.durable_size:
            os.ftruncate(self._fd, self._visible_durable)
        os.ftruncate(self._fd, self._set_size)
        # The durable file now reads zeros in [_visible_durable, _set_size), as the current file does there
        # wherever no chunk covers it, so all of it is visible again.
        self.durable_size = self._visible_durable = self._set_size
        self._set_size = None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
