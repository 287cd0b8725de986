"""MappedFileQueue: an ordered list of equal-sized segments forming one logical byte space.

Used by the commit log (1 GiB segments) and by every consume queue (6,000,000-byte segments). The list is
replaced, never mutated in place (copy on write), so readers can iterate a snapshot without a lock while the
writer appends segments and the retention thread removes them from the front.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time

from raftmq.store.errors import StoreLoadError
from raftmq.store.java import offset_to_file_name
from raftmq.store.json_file import makedirs_durably
from raftmq.store.lazy_files import LazyFiles
from raftmq.store.mapped_file import MappedFile, remove_unfinished_segments

log = logging.getLogger("raftmq.store.mapped_file_queue")

_I64 = struct.Struct(">q")
DELETE_FILES_BATCH_MAX = 10


class MappedFileQueue:
    """Segments of ``mapped_file_size`` bytes in ``store_path`` named by their 20-digit start offset."""

    def __init__(self, store_path: str, mapped_file_size: int, *, preallocate: bool = True,
                 lazy: LazyFiles | None = None) -> None:
        """``lazy``: segments mapped only while used, created without a directory sync each (store.lazy_files)."""
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.preallocate = preallocate
        self.lazy = lazy
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self._lock = threading.Lock()  # serialises changes to the list

    # ------------------------------------------------------------------ load
    def load(self) -> None:
        """Open every segment in name order; a segment of the wrong size stops the load with a clear error."""
        if not os.path.isdir(self.store_path):
            return
        remove_unfinished_segments(self.store_path)
        names = sorted(n for n in os.listdir(self.store_path) if not n.startswith("."))
        if names:
            last = os.path.join(self.store_path, names[-1])
            if os.path.isfile(last) and os.path.getsize(last) == 0:
                # a segment created by a process killed before it was sized holds no data
                log.warning("removing empty trailing segment file %s (creation was interrupted)", last)
                os.unlink(last)
                names.pop()
        files: list[MappedFile] = []
        try:
            for name in names:
                path = os.path.join(self.store_path, name)
                if not os.path.isfile(path):
                    continue
                if not (len(name) == 20 and name.isdigit()):
                    raise StoreLoadError(
                        f"unexpected file {path} in a segment directory: segment names are 20-digit offsets"
                    )
                size = os.path.getsize(path)
                if size != self.mapped_file_size:
                    raise StoreLoadError(
                        f"segment {path} has {size} bytes but the configured segment size is "
                        f"{self.mapped_file_size} bytes; the store was written with a different segment size "
                        "(fix the size setting) or the file is damaged"
                    )
                files.append(MappedFile(path, self.mapped_file_size, preallocate=self.preallocate, lazy=self.lazy))
        except BaseException:
            for mf in files:
                mf.close()
            raise
        for prev, cur in zip(files, files[1:], strict=False):
            if cur.file_from_offset - prev.file_from_offset != self.mapped_file_size:
                log.warning("segment gap in %s between %s and %s", self.store_path, prev.path, cur.path)
        self.mapped_files = files

    # ------------------------------------------------------------------ lookup
    def get_first_mapped_file(self) -> MappedFile | None:
        files = self.mapped_files
        return files[0] if files else None

    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The last segment; with ``need_create``, a new one when there is none or the last is full."""
        files = self.mapped_files
        last = files[-1] if files else None
        if not need_create or (last is not None and not last.is_full()):
            return last
        with self._lock:
            files = self.mapped_files
            last = files[-1] if files else None
            if last is not None and not last.is_full():
                return last
            if last is None:
                create_offset = start_offset - start_offset % self.mapped_file_size
            else:
                create_offset = last.file_from_offset + self.mapped_file_size
            if self.lazy is not None:
                self.lazy.makedirs(self.store_path)
            else:
                makedirs_durably(self.store_path)
            path = os.path.join(self.store_path, offset_to_file_name(create_offset))
            mf = MappedFile(path, self.mapped_file_size, preallocate=self.preallocate, lazy=self.lazy)
            mf.wrote_position = 0
            mf.flushed_position = 0
            self.mapped_files = [*files, mf]
            return mf

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        """The segment holding ``offset`` (``first.from <= offset < last.from + size``)."""
        files = self.mapped_files
        if not files:
            return None
        first, last = files[0], files[-1]
        size = self.mapped_file_size
        if first.file_from_offset <= offset < last.file_from_offset + size:
            idx = offset // size - first.file_from_offset // size
            if 0 <= idx < len(files):
                mf = files[idx]
                if mf.file_from_offset <= offset < mf.file_from_offset + size:
                    return mf
            for mf in files:
                if mf.file_from_offset <= offset < mf.file_from_offset + size:
                    return mf
        return first if return_first_on_not_found else None

    def get_min_offset(self) -> int:
        files = self.mapped_files
        return files[0].file_from_offset if files else -1

    def get_max_offset(self) -> int:
        files = self.mapped_files
        if not files:
            return 0
        last = files[-1]
        return last.file_from_offset + last.wrote_position

    def get_max_wrote_position(self) -> int:
        return self.get_max_offset()

    def how_much_fall_behind(self) -> int:
        """Bytes written but not yet flushed."""
        return max(0, self.get_max_offset() - self.flushed_where)

    # ------------------------------------------------------------------ flush
    def flush(self, least_pages: int) -> bool:
        """Flush the segment at ``flushed_where``; True when nothing new became durable (RocketMQ's result)."""
        files = self.mapped_files
        if files and self.flushed_where < files[0].file_from_offset:  # segments below were deleted
            self.flushed_where = files[0].file_from_offset
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None:
            return True
        where = mf.file_from_offset + mf.flush(least_pages)
        result = where == self.flushed_where
        self.flushed_where = where
        return result

    def wants_flush(self, least_pages: int) -> bool:
        """Whether ``flush(least_pages)`` would flush something now."""
        where = max(self.flushed_where, self.mapped_files[0].file_from_offset) if self.mapped_files else 0
        mf = self.find_mapped_file_by_offset(where, where == 0)
        return mf is not None and mf.is_able_to_flush(least_pages)

    def flush_all(self) -> None:
        """Flush until everything written is durable (thorough flush across segment boundaries)."""
        while self.flushed_where < self.get_max_offset():
            before = self.flushed_where
            self.flush(0)
            if self.flushed_where == before:
                break

    # ------------------------------------------------------------------ truncation and deletion
    def truncate_dirty_files(self, offset: int) -> None:
        """Set positions of the segment containing ``offset``; delete segments wholly beyond it."""
        with self._lock:
            keep: list[MappedFile] = []
            for mf in self.mapped_files:
                tail = mf.file_from_offset + self.mapped_file_size
                if tail > offset:
                    if offset >= mf.file_from_offset:
                        pos = offset % self.mapped_file_size
                        mf.wrote_position = pos
                        mf.flushed_position = pos
                        keep.append(mf)
                    else:
                        mf.destroy()
                else:
                    keep.append(mf)
            self.mapped_files = keep
            self.flushed_where = min(self.flushed_where, offset)

    def delete_last_mapped_file(self) -> None:
        with self._lock:
            files = self.mapped_files
            if files:
                files[-1].destroy()
                self.mapped_files = files[:-1]

    def delete_expired_file_by_time(
        self, expired_ms: int, delete_files_interval: int, interval_forcibly: int, clean_immediately: bool
    ) -> int:
        """Delete up to 10 segments (never the last) older than ``expired_ms``; returns how many."""
        del interval_forcibly  # views keep an unmapped segment alive by themselves (see MappedFile.close)
        files = self.mapped_files
        now = int(time.time() * 1000)
        doomed: list[MappedFile] = []
        for mf in files[:-1]:
            if not (clean_immediately or now >= mf.last_modified() + expired_ms):
                break
            doomed.append(mf)
            if len(doomed) >= DELETE_FILES_BATCH_MAX:
                break
        for i, mf in enumerate(doomed):
            self._remove_front(mf)
            if delete_files_interval > 0 and i + 1 < len(doomed):
                time.sleep(delete_files_interval / 1000.0)
        return len(doomed)

    def delete_expired_file_by_offset(self, offset: int, unit_size: int) -> int:
        """Delete segments (never the last) whose last ``unit_size`` unit points below ``offset`` (CQ rule)."""
        files = self.mapped_files
        doomed: list[MappedFile] = []
        for mf in files[:-1]:
            phy = _I64.unpack_from(mf.buffer, self.mapped_file_size - unit_size)[0]
            if phy >= offset:
                break
            doomed.append(mf)
        for mf in doomed:
            self._remove_front(mf)
        return len(doomed)

    def delete_first_mapped_file(self, mf: MappedFile) -> None:
        """Remove ``mf`` (the oldest segment) from the queue and delete it; retention decides which and when."""
        self._remove_front(mf)

    def _remove_front(self, mf: MappedFile) -> None:
        with self._lock:
            self.mapped_files = [f for f in self.mapped_files if f is not mf]
        mf.destroy()

    def reset_offset(self, offset: int) -> None:
        """Make ``offset`` the end of the queue (positions set, later segments deleted)."""
        self.truncate_dirty_files(offset)

    def close(self) -> None:
        for mf in self.mapped_files:
            mf.close()

    def destroy(self) -> None:
        """Delete every segment and the directory if empty."""
        with self._lock:
            for mf in self.mapped_files:
                mf.destroy()
            self.mapped_files = []
            self.flushed_where = 0
        try:
            os.rmdir(self.store_path)
        except OSError:
            pass
