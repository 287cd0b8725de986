"""MappedFile: one fixed-size, preallocated, memory-mapped segment (RocketMQ ``MappedFile``).

Writes go into the mapping (page cache); ``flush`` makes them durable (``sync_mapped``) following RocketMQ's
least-pages rule. Segment files are named by the 20-digit offset of their first byte.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading

from raftmq.store.config import OS_PAGE_SIZE
from raftmq.store.errors import StoreLoadError
from raftmq.store.json_file import fsync_dir
from raftmq.store.lazy_files import LazyFiles

log = logging.getLogger("raftmq.store.mapped_file")

_datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def sync_mapped(path: str, inode: int, mapping: mmap.mmap | None) -> None:
    """Make every write through ``mapping`` (of file ``path``, inode ``inode``) durable.

    Why not just ``mapping.flush()``: CPython holds the GIL for the whole msync, so each flush stalled every other
    thread of the process (the Raft tick, the gRPC event loop) for the disk's round trip. On Linux msync(MS_SYNC)
    of a shared mapping is an fdatasync of that range of the file, and a mapping's dirty pages are the file's
    page cache, so an fdatasync of the file does the same with the GIL released (only a segment's tail is dirty,
    so the whole file costs no more than the range). When the file cannot be opened again as the same file (no
    descriptor to spare, the name gone or replaced) it msyncs as before: that is no disk fault.
    ``mapping`` is None for a file not mapped now (store.lazy_files): its writes are in the page cache, and only
    the descriptor can sync them.
    """
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        if mapping is None:
            raise
        mapping.flush()
        return
    try:
        if os.fstat(fd).st_ino == inode:
            sync_fd(fd)
        elif mapping is not None:
            mapping.flush()
        else:
            raise OSError(errno.ESTALE, f"{path} was replaced by another file; its writes cannot be synced")
    finally:
        os.close(fd)


def sync_fd(fd: int) -> None:
    """fdatasync ``fd`` with the GIL released while the disk works (see ``sync_mapped``)."""
    _datasync(fd)


class MappedFile:
    """A segment of ``file_size`` bytes starting at logical offset ``file_from_offset`` (its file name).

    A new file is created at full size (blocks reserved with ``posix_fallocate`` when ``preallocate``, so a
    full disk fails here rather than with SIGBUS on a later write into the mapping). An existing file must
    have exactly ``file_size`` bytes. Positions of an existing file start at ``file_size`` (RocketMQ's rule)
    until recovery sets them; a new file starts empty.

    With ``lazy`` (store.lazy_files) the file is mapped only while it is used, and its creation leaves the
    directory to be synced later; without, it stays mapped until ``close``.
    """

    def __init__(self, path: str, file_size: int, *, preallocate: bool = True, lazy: LazyFiles | None = None) -> None:
        self.path = path
        self.file_name = os.path.basename(path)
        try:
            self.file_from_offset = int(self.file_name)
        except ValueError:
            raise StoreLoadError(f"segment file name {path!r} is not a 20-digit offset") from None
        self.file_size = file_size
        self._lazy = lazy
        self._mm: mmap.mmap | None = None
        self._map_lock = threading.Lock()
        self.used = False  # touched since LazyFiles last looked
        exists = os.path.exists(path)
        fd = os.open(path, os.O_RDWR) if exists else self._create(path, file_size, preallocate, lazy)
        try:
            st = os.fstat(fd)
            actual, self._inode = st.st_size, st.st_ino
            if actual != file_size:
                raise StoreLoadError(
                    f"segment {path} has {actual} bytes but the configured segment size is {file_size} bytes; "
                    "the store was written with a different segment size (fix the size setting) "
                    "or the file is damaged"
                )
            if lazy is None:
                self._mm = self._map_fd(fd)
        finally:
            os.close(fd)  # the mapping keeps its own descriptor: one open file per segment, not two
        start = 0 if not exists else file_size
        self._wrote = start
        self._flushed = start
        self._flush_lock = threading.Lock()
        self.store_timestamp = 0  # store timestamp of the last message appended (commit log)
        self.closed = False

    def _map_fd(self, fd: int) -> mmap.mmap:
        return mmap.mmap(fd, self.file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def _map(self) -> mmap.mmap:
        """Map a lazy file on its first use since it was unmapped (ValueError once closed, as a closed mapping)."""
        with self._map_lock:
            mm = self._mm
            if mm is not None:
                return mm
            if self.closed:
                raise ValueError(f"segment {self.path} is closed")
            fd = os.open(self.path, os.O_RDWR)
            try:
                mm = self._map_fd(fd)
            finally:
                os.close(fd)
            mm.madvise(mmap.MADV_RANDOM)  # a touch faults in its page, not the device's read-ahead window
            self._mm = mm
        assert self._lazy is not None
        self._lazy.mapped(self)
        return mm

    def unmap(self) -> None:
        """LazyFiles: drop this file's mapping; whoever still holds it (a reader's view, a writer mid-copy) keeps it
        alive until done, then it is unmapped and its descriptor closed."""
        self._mm = None

    @classmethod
    def _create(cls, path: str, size: int, preallocate: bool, lazy: LazyFiles | None = None) -> int:
        """Create the file at full size under a temporary name, then rename it into place.

        A process killed meanwhile leaves only a ``.*.creating`` file (removed at the next load), never a
        short segment that would stop the store from opening. The new name must survive a power loss too: its
        directory is synced now, or by ``lazy`` before the checkpoint counts on the file.
        """
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f".{name}.creating")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            cls._allocate(fd, size, preallocate)
            os.rename(tmp, path)
            if lazy is not None:
                lazy.created_in(directory or ".")
            else:
                fsync_dir(directory or ".")
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        return fd

    @staticmethod
    def _allocate(fd: int, size: int, preallocate: bool) -> None:
        if preallocate:
            try:
                os.posix_fallocate(fd, 0, size)
                return
            except OSError as e:  # file systems without fallocate: fall back to a sparse file
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
        os.ftruncate(fd, size)

    # ------------------------------------------------------------------ positions
    @property
    def wrote_position(self) -> int:
        return self._wrote

    @wrote_position.setter
    def wrote_position(self, pos: int) -> None:
        self._wrote = pos

    @property
    def flushed_position(self) -> int:
        return self._flushed

    @flushed_position.setter
    def flushed_position(self, pos: int) -> None:
        self._flushed = pos

    @property
    def buffer(self) -> mmap.mmap:
        """The writable mapping (for in-place patches by the owner of the segment). Keep it in a local while
        using it: a lazy file may be unmapped meanwhile, and the local keeps the mapping alive."""
        mm = self._mm
        self.used = True
        return mm if mm is not None else self._map()

    def is_full(self) -> bool:
        return self._wrote >= self.file_size

    def remaining(self) -> int:
        return self.file_size - self._wrote

    # ------------------------------------------------------------------ I/O
    def append(self, data: bytes | bytearray | memoryview) -> bool:
        """Write ``data`` at the write position; False (nothing written) when it does not fit."""
        n = len(data)
        pos = self._wrote
        if pos + n > self.file_size:
            return False
        self.buffer[pos : pos + n] = data
        self._wrote = pos + n
        return True

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``pos`` without moving the write position."""
        n = len(data)
        if pos < 0 or pos + n > self.file_size:
            raise ValueError(f"write of {n} bytes at {pos} outside segment {self.path} of {self.file_size}")
        self.buffer[pos : pos + n] = data

    def read(self, pos: int, size: int) -> memoryview:
        """A view of ``size`` bytes at ``pos`` (clipped to the segment). Release it promptly."""
        end = min(pos + size, self.file_size)
        return memoryview(self.buffer)[pos:end]

    def read_bytes(self, pos: int, size: int) -> bytes:
        """A copy of ``size`` bytes at ``pos`` (clipped to the segment)."""
        return self.buffer[pos : min(pos + size, self.file_size)]

    def is_able_to_flush(self, least_pages: int) -> bool:
        """RocketMQ's rule: full; or >= least_pages new 4 KiB pages; or (least_pages == 0) anything new."""
        flushed, wrote = self._flushed, self._wrote
        if self.is_full() and wrote > flushed:
            return True
        if least_pages > 0:
            return (wrote // OS_PAGE_SIZE) - (flushed // OS_PAGE_SIZE) >= least_pages
        return wrote > flushed

    def flush(self, least_pages: int) -> int:
        """Make the written bytes durable when the least-pages rule allows; returns the flushed position."""
        with self._flush_lock:
            if self.closed or not self.is_able_to_flush(least_pages):
                return self._flushed
            wrote = self._wrote
            if wrote > self._flushed:
                sync_mapped(self.path, self._inode, self._mm)
            self._flushed = wrote
            return wrote

    def sync_to_disk(self) -> None:
        """Make every write so far durable, in-place patches behind the write position included."""
        with self._flush_lock:
            if not self.closed:
                sync_mapped(self.path, self._inode, self._mm)

    def last_modified(self) -> int:
        """File modification time in ms (retention by age)."""
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Unmap and close. A mapping still viewed by a reader is freed when the last view goes."""
        with self._flush_lock:  # never unmap, nor let destroy delete the file, under a running flush
            if self.closed:
                return
            self.closed = True
            with self._map_lock:
                mm, self._mm = self._mm, None
            if self._lazy is not None:
                self._lazy.forget(self)
            if mm is None:
                return
            try:
                mm.close()
            except BufferError:
                log.debug("segment %s still has readers; its mapping is released with the last view", self.path)

    def destroy(self) -> None:
        """Close and delete the segment file."""
        self.close()
        _unlink_quietly(self.path)
        log.info("deleted segment %s", self.path)

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, wrote={self._wrote}, flushed={self._flushed})"


def remove_unfinished_segments(directory: str) -> None:
    """Delete ``.*.creating`` files left by a process killed while creating a segment."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(".") and name.endswith(".creating"):
            log.warning("removing unfinished segment file %s", os.path.join(directory, name))
            _unlink_quietly(os.path.join(directory, name))


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
