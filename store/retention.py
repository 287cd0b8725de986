"""Retention: RocketMQ's clean services — expire old commit-log segments, then what pointed into them.

``CleanCommitLogService`` deletes the oldest commit-log segments (never the one being written) once they
are older than ``file_reserved_time`` hours, at the hours in ``delete_when``, or at any hour when a disk
is fuller than ``disk_max_used_space_ratio``; above ``disk_space_clean_forcibly_ratio`` age no longer
matters. At most 10 segments go per pass, ``delete_commit_log_files_interval`` ms apart.
``CleanConsumeQueueService`` then deletes consume-queue files wholly below the new commit-log minimum
(correcting each queue's min offset) and index files that end below it.

``RetentionService.run_once(now_ms)`` is one pass of both, which the service's thread runs every
``clean_resource_interval`` ms and tests call directly.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raftmq.store.consume_queue import ConsumeQueueTable
from raftmq.store.index_service import IndexService
from raftmq.store.mapped_file_queue import DELETE_FILES_BATCH_MAX
from raftmq.store.service_thread import ServiceThread

log = logging.getLogger("raftmq.store.retention")

MAX_MANUAL_DELETE_FILE_TIMES = 20
_HOUR_MS = 3_600_000


def disk_used_ratio(path: str) -> float:
    """``UtilAll.getDiskPartitionSpaceUsedPercent``: (total - free) / total of the partition, -1 on error."""
    try:
        os.makedirs(path, exist_ok=True)
        st = os.statvfs(path)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    return (total - st.f_bfree * st.f_frsize) / total


def is_hour_to_delete(delete_when: str, now_ms: int) -> bool:
    """``UtilAll.isItTimeToDo``: is the local hour of ``now_ms`` one of the ``;``-separated hours?"""
    hour = time.localtime(now_ms / 1000.0).tm_hour
    for item in delete_when.split(";"):
        item = item.strip()
        if item.isdigit() and int(item) == hour:
            return True
    return False


@dataclass
class RetentionResult:
    """What one pass deleted."""

    commit_log_files: int = 0
    consume_queue_files: int = 0
    index_files: int = 0


class CleanCommitLogService:
    """Deletes expired commit-log segments (RocketMQ ``CleanCommitLogService``).

    ``disk_ratio(path)`` measures a partition (``disk_used_ratio`` by default); ``protect_offset()``, when
    given, is an offset no deletion may reach past (e.g. what reput or a lagging replica still needs).
    """

    def __init__(
        self,
        cfg: Any,
        commit_log: Any,
        *,
        disk_ratio: Callable[[str], float] = disk_used_ratio,
        protect_offset: Callable[[], int] | None = None,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        self.cfg = cfg
        self.commit_log = commit_log
        self.disk_ratio = disk_ratio
        self.protect_offset = protect_offset
        self.sleep = sleep
        self.manual_delete_times = 0
        self.clean_immediately = False
        self.disk_full = False  # above disk_space_warning_level_ratio: the store should refuse writes
        self.physic_ratio = 0.0
        self.logics_ratio = 0.0

    def delete_files_manually(self) -> None:
        """``executeDeleteFilesManually``: the next 20 passes delete expired files whatever the hour."""
        self.manual_delete_times = MAX_MANUAL_DELETE_FILE_TIMES

    def is_space_to_delete(self) -> bool:
        """Measure both partitions; sets ``clean_immediately`` and ``disk_full`` as RocketMQ does."""
        cfg = self.cfg
        self.clean_immediately = False
        self.physic_ratio = self.disk_ratio(cfg.commit_log_dir)
        if self.physic_ratio > cfg.disk_space_warning_level_ratio:
            if not self.disk_full:
                log.error(
                    "disk of %s is %.0f%% full: refusing writes until space is reclaimed",
                    cfg.commit_log_dir,
                    self.physic_ratio * 100,
                )
            self.disk_full = True
            self.clean_immediately = True
        elif self.physic_ratio > cfg.disk_space_clean_forcibly_ratio:
            self.clean_immediately = True
        elif self.disk_full:
            log.info(
                "disk of %s is %.0f%% full: writes allowed again", cfg.commit_log_dir, self.physic_ratio * 100
            )
            self.disk_full = False
        if self.physic_ratio < 0 or self.physic_ratio > cfg.disk_max_used_space_ratio:
            log.info("commit-log disk %.0f%% full: reclaiming space", self.physic_ratio * 100)
            return True
        self.logics_ratio = self.disk_ratio(cfg.consume_queue_dir)
        if (
            self.logics_ratio > cfg.disk_space_warning_level_ratio
            or self.logics_ratio > cfg.disk_space_clean_forcibly_ratio
        ):
            self.clean_immediately = True
        if self.logics_ratio < 0 or self.logics_ratio > cfg.disk_max_used_space_ratio:
            log.info("consume-queue disk %.0f%% full: reclaiming space", self.logics_ratio * 100)
            return True
        return False

    def run_once(self, now_ms: int) -> int:
        """One pass; returns the number of segments deleted."""
        cfg = self.cfg
        time_up = is_hour_to_delete(cfg.delete_when, now_ms)
        space_full = self.is_space_to_delete()
        manual = self.manual_delete_times > 0
        if not (time_up or space_full or manual):
            return 0
        if manual:
            self.manual_delete_times -= 1
        clean_at_once = cfg.clean_file_forcibly_enable and self.clean_immediately
        return self.delete_expired_files(now_ms, cfg.file_reserved_time * _HOUR_MS, clean_at_once)

    def delete_expired_files(self, now_ms: int, expired_ms: int, clean_at_once: bool) -> int:
        """Delete up to 10 of the oldest segments (never the last) older than ``expired_ms``, in order."""
        mfq = self.commit_log.mapped_file_queue
        protect = self.protect_offset() if self.protect_offset is not None else None
        doomed = []
        for mf in mfq.mapped_files[:-1]:
            if protect is not None and mf.file_from_offset + mf.file_size > protect:
                break
            if not (clean_at_once or now_ms >= mf.last_modified() + expired_ms):
                break  # never delete from the middle
            doomed.append(mf)
            if len(doomed) >= DELETE_FILES_BATCH_MAX:
                break
        interval = self.cfg.delete_commit_log_files_interval
        for i, mf in enumerate(doomed):
            log.info("retention: deleting commit-log segment %s", mf.path)
            mfq.delete_first_mapped_file(mf)
            if interval > 0 and i + 1 < len(doomed):
                self.sleep(interval / 1000.0)
        return len(doomed)


class CleanConsumeQueueService:
    """Deletes consume-queue and index files that only point below the commit log's minimum."""

    def __init__(
        self,
        cfg: Any,
        commit_log: Any,
        consume_queues: ConsumeQueueTable,
        index_service: IndexService | None,
        *,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        self.cfg = cfg
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index_service = index_service
        self.sleep = sleep
        self.last_physical_min_offset = 0

    def run_once(self) -> tuple[int, int]:
        """One pass; returns ``(consume-queue files, index files)`` deleted."""
        min_offset = self.commit_log.min_offset
        if min_offset <= self.last_physical_min_offset:
            return 0, 0
        self.last_physical_min_offset = min_offset
        cq_files = self.consume_queues.delete_expired_files(
            min_offset, self.cfg.delete_consume_queue_files_interval, self.sleep
        )
        index_files = (
            self.index_service.delete_expired_file(min_offset) if self.index_service is not None else 0
        )
        return cq_files, index_files


class RetentionService(ServiceThread):
    """Both clean services and the thread that runs them every ``clean_resource_interval`` ms."""

    def __init__(
        self,
        cfg: Any,
        commit_log: Any,
        consume_queues: ConsumeQueueTable,
        index_service: IndexService | None,
        *,
        disk_ratio: Callable[[str], float] = disk_used_ratio,
        protect_offset: Callable[[], int] | None = None,
        clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        super().__init__("RetentionService", "retention")
        self.cfg = cfg
        self.clock = clock
        self.commit_log_cleaner = CleanCommitLogService(
            cfg, commit_log, disk_ratio=disk_ratio, protect_offset=protect_offset, sleep=self.wait
        )
        self.consume_queue_cleaner = CleanConsumeQueueService(
            cfg, commit_log, consume_queues, index_service, sleep=self.wait
        )

    @property
    def disk_full(self) -> bool:
        """True while the commit-log disk is above ``disk_space_warning_level_ratio`` (refuse writes)."""
        return self.commit_log_cleaner.disk_full

    def delete_files_manually(self) -> None:
        self.commit_log_cleaner.delete_files_manually()

    def run_once(self, now_ms: int | None = None) -> RetentionResult:
        """One pass of both services (the commit log first, then what pointed into it)."""
        now = self.clock() if now_ms is None else now_ms
        result = RetentionResult()
        result.commit_log_files = self.commit_log_cleaner.run_once(now)
        result.consume_queue_files, result.index_files = self.consume_queue_cleaner.run_once()
        return result

    def run(self) -> None:
        interval = self.cfg.clean_resource_interval / 1000.0
        while not self.wait(interval):
            try:
                self.run_once()
            except Exception:
                log.exception("retention pass failed")
