"""IndexService: the list of index files under ``{root}/index`` (RocketMQ ``IndexService``, docs/design/store-formats.md#index-files).

The reput thread calls ``build_index`` for every record except ROLLBACK; it indexes ``topic#UNIQ_KEY`` then
``topic#k`` for each piece of KEYS. When a file fills, the next one is created seeded with its end values
and the full file is flushed in the background, after which the checkpoint's ``index_msg_timestamp``
records that everything up to its end is durable (abnormal recovery relies on it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from raftmq.store.dispatch import TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK, DispatchRequest
from raftmq.store.errors import StoreError, StoreLoadError
from raftmq.store.index_file import IndexFile, index_file_size, index_key_hash, index_key_hashes
from raftmq.store.java import time_millis_to_human_string
from raftmq.store.json_file import makedirs_durably
from raftmq.store.service_thread import ServiceThread

log = logging.getLogger("raftmq.store.index_service")


# what the reput thread hands over per record: (commit_log_offset, store_timestamp, topic, keys, uniq_key)
IndexRecord = tuple[int, int, str, str | None, str | None]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class QueryOffsetResult:
    """Commit-log offsets found for a key (newest first) and where the index stood when it was asked."""

    phy_offsets: list[int] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phy_offset: int = 0


class IndexService:
    """Builds and queries the key index.

    ``checkpoint`` is the store's ``StoreCheckpoint`` (anything with an ``index_msg_timestamp`` attribute
    and a ``flush()`` method); ``clock`` returns the current time in ms and names new files.
    """

    def __init__(
        self,
        store_path: str,
        hash_slot_num: int,
        index_num: int,
        *,
        checkpoint: Any = None,
        max_msgs_num_batch: int = 64,
        preallocate: bool = True,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        if hash_slot_num < 1 or index_num < 2:
            raise StoreError(
                f"an index file needs max_hash_slot_num >= 1 and max_index_num >= 2 (entry 0 is never used), "
                f"got {hash_slot_num} and {index_num}"
            )
        self.store_path = store_path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.checkpoint = checkpoint
        self.max_msgs_num_batch = max_msgs_num_batch
        self.preallocate = preallocate
        self.clock = clock
        self.index_files: list[IndexFile] = []  # replaced, never mutated: readers iterate a snapshot
        self._lock = threading.Lock()
        self._flushers: list[IndexFileFlush] = []
        self._checkpoint_lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: Any, checkpoint: Any = None, **kwargs: Any) -> IndexService:
        """Build from a ``StoreConfig``."""
        return cls(
            cfg.index_dir,
            cfg.max_hash_slot_num,
            cfg.max_index_num,
            checkpoint=checkpoint,
            max_msgs_num_batch=cfg.max_msgs_num_batch,
            preallocate=cfg.preallocate,
            **kwargs,
        )

    # ------------------------------------------------------------------ load
    def load(self, last_exit_ok: bool) -> None:
        """Open the index files in name order; after an abnormal exit drop files newer than the checkpoint.

        A file whose size does not match the configured slot/entry counts stops the load with a clear error.
        """
        if not os.path.isdir(self.store_path):
            return
        expected = index_file_size(self.hash_slot_num, self.index_num)
        checkpoint_ts = (
            getattr(self.checkpoint, "index_msg_timestamp", 0) if self.checkpoint is not None else 0
        )
        files: list[IndexFile] = []
        try:
            for name in sorted(os.listdir(self.store_path)):
                path = os.path.join(self.store_path, name)
                if name.startswith(".") or not os.path.isfile(path):
                    continue
                if not name.isdigit():
                    raise StoreLoadError(
                        f"unexpected file {path} in the index directory: index file names are "
                        "yyyyMMddHHmmssSSS timestamps"
                    )
                size = os.path.getsize(path)
                if size == 0:  # killed between creating and sizing the file: it never held an entry
                    log.warning("deleting empty index file %s (left by an interrupted file creation)", path)
                    os.unlink(path)
                    continue
                if size != expected:
                    raise StoreLoadError(
                        f"index file {path} has {size} bytes but max_hash_slot_num={self.hash_slot_num} and "
                        f"max_index_num={self.index_num} give {expected} bytes; use the settings the store "
                        "was written with"
                    )
                f = IndexFile(path, self.hash_slot_num, self.index_num, preallocate=self.preallocate)
                f.load()
                if not last_exit_ok and f.end_timestamp > checkpoint_ts:
                    log.info("abnormal exit: deleting index file %s newer than the checkpoint", path)
                    f.destroy()
                    continue
                files.append(f)
        except BaseException:
            for f in files:
                f.close()
            raise
        self.index_files = files

    def repair_after_crash(self) -> None:
        """After an unclean exit, make the newest file's header match its entries and slots (see
        ``IndexFile.repair_after_crash``). Only the newest file can lag: a file that filled up got its
        header written before the next one was created."""
        files = self.index_files
        if files:
            dropped = files[-1].repair_after_crash()
            if dropped:
                log.warning("index file %s: dropped %d entries written past its header by an interrupted "
                            "indexing run; they are indexed again", files[-1].path, dropped)

    # ------------------------------------------------------------------ build
    def build_index(self, req: DispatchRequest) -> None:
        """Index one dispatched record (``IndexService.buildIndex``)."""
        self.build_index_batch((req,))

    def build_index_batch(self, reqs: Sequence[DispatchRequest]) -> None:
        """Index records in commit-log order: the same entries as ``build_index`` on each, in one pass."""
        rollback = TRANSACTION_ROLLBACK_TYPE
        self.build_index_records(
            [
                (r.commit_log_offset, r.store_timestamp, r.topic, None, None)
                if (r.sys_flag & TRANSACTION_TYPE_MASK) == rollback
                else (r.commit_log_offset, r.store_timestamp, r.topic, r.keys, r.uniq_key)
                for r in reqs
            ]
        )

    def build_index_records(self, records: Sequence[IndexRecord]) -> None:
        """``build_index_batch`` on ``(commit_log_offset, store_timestamp, topic, keys, uniq_key)`` tuples, one per
        dispatched record in commit-log order (keys and uniq key None for a ROLLBACK record: it indexes nothing
        but still counts as a record, see the end of this method). The reput thread builds these directly."""
        f = self.get_and_create_last_index_file()
        end = f.end_phy_offset
        hashes_of = index_key_hashes
        batch: list[tuple[list[int], int, int]] = []
        last_keyed = -1  # position in records of the last record that has keys
        for i, (offset, ts, topic, keys, uniq) in enumerate(records):
            # RocketMQ's rule: offset == end is indexed again, because the file that held the rest of that
            # record's keys may be the one an abnormal restart deleted; queries deduplicate offsets.
            if offset < end or (not keys and uniq is None):
                continue
            hashes = hashes_of(topic, uniq, keys)
            if hashes:
                batch.append((hashes, offset, ts))
                end = offset
                last_keyed = i
        record, key = 0, 0
        while batch:
            record, key = f.put_records(batch, record, key)
            if record >= len(batch):
                break
            log.info("index file %s is full, creating the next one", f.file_name)
            f = self.get_and_create_last_index_file()
        if f.is_write_full() and last_keyed < len(records) - 1:
            # RocketMQ gets (and so creates) the next file at the start of every buildIndex: a record after
            # the one that filled the file creates it even when that record has nothing to index
            self.get_and_create_last_index_file()

    def get_and_create_last_index_file(self) -> IndexFile:
        """The newest file if it has room, else a new one seeded with the full file's end values."""
        files = self.index_files
        if files and not files[-1].is_write_full():
            return files[-1]
        with self._lock:
            files = self.index_files
            prev = files[-1] if files else None
            if prev is not None and not prev.is_write_full():
                return prev
            makedirs_durably(self.store_path)
            path = os.path.join(self.store_path, self._new_file_name(prev))
            end_phy = prev.end_phy_offset if prev is not None else 0
            end_ts = prev.end_timestamp if prev is not None else 0
            f = IndexFile(
                path, self.hash_slot_num, self.index_num, end_phy, end_ts, preallocate=self.preallocate
            )
            self.index_files = [*files, f]
            if prev is not None:
                t = IndexFileFlush(self, prev)
                self._flushers = [x for x in self._flushers if x.alive] + [t]
                t.start()
            return f

    def _new_file_name(self, prev: IndexFile | None) -> str:
        """``yyyyMMddHHmmssSSS`` of now (local time); bumped past the newest name so names stay unique and sorted."""
        name = time_millis_to_human_string(self.clock())
        if prev is not None and int(name) <= int(prev.file_name):
            name = str(int(prev.file_name) + 1)
        return name

    def flush_file(self, f: IndexFile) -> None:
        """Force ``f`` to disk; when it is full, record its end timestamp in the checkpoint (``IndexService.flush``)."""
        full_ts = f.end_timestamp if f.is_write_full() else 0
        try:
            f.flush()
        except ValueError:  # closed meanwhile (shutdown or expiry): nothing left to make durable
            return
        if full_ts > 0 and self.checkpoint is not None:
            with self._checkpoint_lock:  # flushes of consecutive full files may finish out of order
                if full_ts > self.checkpoint.index_msg_timestamp:
                    self.checkpoint.index_msg_timestamp = full_ts
                    self.checkpoint.flush()

    def wait_for_flushes(self, timeout: float | None = None) -> None:
        """Join the background flushes of full files (shutdown, tests)."""
        for t in list(self._flushers):
            t.join(timeout)

    def flush(self) -> None:
        """Force every file to disk (at shutdown; RocketMQ 5 does this, 4.9 left it to the OS)."""
        self.wait_for_flushes()
        for f in self.index_files:
            f.flush()

    # ------------------------------------------------------------------ query
    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        """Commit-log offsets indexed under ``topic#key`` stored within ``[begin, end]`` ms, newest first.

        At most ``min(max_num, max_msgs_num_batch)``; hash matches only, the caller re-checks the key.
        """
        result = QueryOffsetResult()
        max_num = min(max_num, self.max_msgs_num_batch)
        files = self.index_files
        if not files or max_num <= 0:
            return result
        result.index_last_update_timestamp = files[-1].end_timestamp
        result.index_last_update_phy_offset = files[-1].end_phy_offset
        h = index_key_hash(topic, key)
        out = result.phy_offsets
        for f in reversed(files):
            try:
                if f.is_time_matched(begin, end):
                    f.select_by_hash(out, h, max_num, begin, end)
            except ValueError:  # the file was deleted by retention while we read it
                continue
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return result

    # ------------------------------------------------------------------ expiry and truncation
    def delete_expired_file(self, offset: int) -> int:
        """Delete the oldest files (never the newest) whose ``end_phy_offset`` is below ``offset``."""
        self.wait_for_flushes()  # never unmap a file a background flush is writing
        with self._lock:
            files = self.index_files
            doomed = []
            for f in files[:-1]:
                if f.end_phy_offset >= offset:
                    break
                doomed.append(f)
            if not doomed:
                return 0
            self.index_files = files[len(doomed) :]
        for f in doomed:
            log.info(
                "deleting expired index file %s (end phy offset %d < %d)", f.path, f.end_phy_offset, offset
            )
            f.destroy()
        return len(doomed)

    def truncate(self, phy_offset: int) -> None:
        """Forget every entry at or after ``phy_offset`` (the commit log was cut there).

        Files whose first entry is at or beyond the cut are deleted; the newest remaining file loses its
        entries beyond the cut, so ``build_index`` indexes the records that are written there next.
        """
        self.wait_for_flushes()
        with self._lock:
            files = list(self.index_files)
            while files:
                f = files[-1]
                if f.index_count > 1 and f.begin_phy_offset >= phy_offset:
                    files.pop()
                    f.destroy()
                    continue
                if f.index_count <= 1 and f.end_phy_offset >= phy_offset:
                    files.pop()  # empty file seeded from entries that are now gone
                    f.destroy()
                    continue
                f.truncate(phy_offset)
                break
            self.index_files = files

    def drop_from(self, position: int) -> int:
        """Delete the index files from ``position`` in the list on (a damaged one and every later one, which
        reput then rebuilds from the commit log); returns the commit-log offset indexing must restart at
        (the end of the file before, or 0)."""
        self.wait_for_flushes()
        with self._lock:
            files = list(self.index_files)
            doomed, kept = files[position:], files[:position]
            self.index_files = kept
        for f in doomed:
            log.warning("deleting index file %s: it is rebuilt from the commit log", f.path)
            f.destroy()
        return kept[-1].end_phy_offset if kept else 0

    def close(self) -> None:
        self.wait_for_flushes()
        for f in self.index_files:
            f.close()

    def destroy(self) -> None:
        """Delete every index file."""
        self.wait_for_flushes()
        with self._lock:
            for f in self.index_files:
                f.destroy()
            self.index_files = []


class IndexFileFlush(ServiceThread):
    """Forces one full index file to disk off the writer's thread (RocketMQ's FlushIndexFileThread), then ends."""

    def __init__(self, service: IndexService, f: IndexFile) -> None:
        super().__init__("FlushIndexFileThread", "index-flush")
        self._service = service
        self._file = f

    def run(self) -> None:
        self._service.flush_file(self._file)
