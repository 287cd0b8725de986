"""StoreConfig: every size, interval and switch of the store, with RocketMQ 4.9's defaults.

Tests shrink the sizes (segments of a few KiB) so that rolls, expiry and recovery are exercised quickly;
production keeps the defaults, which match RocketMQ's MessageStoreConfig so that store directories are
interchangeable with a RocketMQ broker's.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from raftmq.store.errors import StoreError
from raftmq.store.message import parse_delay_levels

CQ_STORE_UNIT_SIZE = 20
OS_PAGE_SIZE = 4096
END_FILE_MIN_BLANK_LENGTH = 8


@dataclass
class StoreConfig:
    """Configuration of one store directory (RocketMQ ``MessageStoreConfig`` in snake_case)."""

    root_dir: str = "store"
    # --- sizes
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_STORE_UNIT_SIZE
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    max_message_size: int = 1024 * 1024 * 4
    # --- flush
    flush_disk_type: str = "ASYNC"  # ASYNC | SYNC
    flush_interval_commit_log: int = 500  # ms
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000  # ms
    flush_commit_log_timed: bool = True
    sync_flush_timeout: int = 5_000  # ms a SYNC put waits for its fsync before FLUSH_DISK_TIMEOUT
    flush_interval_consume_queue: int = 1_000  # ms
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000  # ms
    # --- retention
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"  # hours of day (";"-separated) when expired files are deleted
    clean_resource_interval: int = 10_000  # ms
    delete_commit_log_files_interval: int = 100  # ms between two file deletions
    delete_consume_queue_files_interval: int = 100  # ms
    destroy_mapped_file_interval_forcibly: int = 120_000  # ms
    disk_max_used_space_ratio: float = 0.75
    disk_space_warning_level_ratio: float = 0.90  # above: writes refused
    disk_space_clean_forcibly_ratio: float = 0.85  # above: delete expired files immediately
    clean_file_forcibly_enable: bool = True
    # writes are refused (RESOURCE_EXHAUSTED "disk full on <member>: <path>, N bytes free", /ready false) while
    # the store's filesystem has less than this free, and after an ENOSPC until it has this much again
    disk_min_free_bytes: int = 64 * 1024 * 1024
    # --- recovery, index, dispatch
    check_crc_on_recover: bool = True
    # at start, walk the whole commit log once and compare every consume-queue unit and index file with it;
    # damaged or missing units / files are rebuilt from the log (they are derived data). Costs one sequential
    # read of the log (README "Damaged disks"); off: only the scrubber finds derived-file damage.
    check_derived_files_on_start: bool = True
    # background scrubber: re-reads sealed commit-log segments at most this fast, checking record CRCs and the
    # consume queues / index built from them (0: off); the first pass starts scrub_first_delay_s after the store
    # opened (at most scrub_interval_s), the next ones scrub_interval_s after the previous pass ended
    scrub_rate_bytes_per_s: int = 4 * 1024 * 1024
    scrub_interval_s: int = 3600
    scrub_first_delay_s: int = 60
    # pull / view / query verify each returned record (header + body CRC, own position) and refuse a damaged
    # one (CorruptReadError -> gRPC DATA_LOSS) instead of returning its bytes; cost: bench/read_crc_bench.py
    check_crc_on_read: bool = True
    message_index_enable: bool = True
    message_index_safe: bool = False
    max_msgs_num_batch: int = 64  # max results of one index query
    reput_interval_ms: int = 1
    # --- reads (RocketMQ getMessage limits)
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    # --- delay levels (ScheduleMessageService)
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    # --- timer messages (RocketMQ 5 TimerMessageStore; store.timer): a message with TIMER_DELIVER_MS further
    # than this in the future is refused (RocketMQ 5 timerMaxDelaySec, default 3 days)
    timer_max_delay_seconds: int = 3 * 24 * 3600
    # --- transactional messages (BrokerConfig transactionTimeOut / transactionCheckInterval / transactionCheckMax)
    transaction_timeout_ms: int = 6_000  # a half message without an outcome this long is checked with its producer
    transaction_check_interval_ms: int = 60_000  # how often the leader scans the half queue
    transaction_check_max: int = 15  # checks before a half message goes to TRANS_CHECK_MAX_TIME_TOPIC
    # --- identity written into records (group-level, contract 7)
    store_host: str = "127.0.0.1:10911"
    cluster_name: str = "DefaultCluster"
    preallocate: bool = True  # reserve disk blocks when a segment is created (ENOSPC at create, not in mmap)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ derived paths
    @property
    def commit_log_dir(self) -> str:
        return os.path.join(self.root_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.root_dir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.root_dir, "index")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.root_dir, "checkpoint")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.root_dir, "abort")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.root_dir, "lock")

    @property
    def config_dir(self) -> str:
        return os.path.join(self.root_dir, "config")

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC"

    @property
    def consume_queue_file_size(self) -> int:
        """RocketMQ rounds the configured CQ file size up to whole 20-byte units."""
        n = self.mapped_file_size_consume_queue
        return -(-n // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    @property
    def store_host_addr(self) -> tuple[str, int]:
        return parse_host_port(self.store_host)

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Reject settings that cannot work, naming the field and the allowed range."""
        if self.flush_disk_type not in ("ASYNC", "SYNC"):
            raise StoreError(f"flush_disk_type must be ASYNC or SYNC, got {self.flush_disk_type!r}")
        if self.mapped_file_size_commit_log < OS_PAGE_SIZE:
            raise StoreError(
                f"mapped_file_size_commit_log must be at least {OS_PAGE_SIZE} bytes, "
                f"got {self.mapped_file_size_commit_log}"
            )
        if self.mapped_file_size_consume_queue < CQ_STORE_UNIT_SIZE:
            raise StoreError(
                f"mapped_file_size_consume_queue must be at least {CQ_STORE_UNIT_SIZE}, "
                f"got {self.mapped_file_size_consume_queue}"
            )
        for name in ("transaction_timeout_ms", "transaction_check_interval_ms", "transaction_check_max"):
            if getattr(self, name) < 1:
                raise StoreError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.timer_max_delay_seconds < 1:
            raise StoreError(f"timer_max_delay_seconds must be at least 1, got {self.timer_max_delay_seconds}")
        for name in ("max_hash_slot_num", "max_index_num", "max_message_size", "max_msgs_num_batch"):
            if getattr(self, name) <= 0:
                raise StoreError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0.0 < self.disk_max_used_space_ratio <= 1.0:
            raise StoreError(
                f"disk_max_used_space_ratio must be in (0, 1], got {self.disk_max_used_space_ratio}"
            )
        if self.file_reserved_time <= 0:
            raise StoreError(f"file_reserved_time (hours) must be positive, got {self.file_reserved_time}")
        parse_host_port(self.store_host)
        if not parse_delay_levels(self.message_delay_level):
            raise StoreError(f"message_delay_level {self.message_delay_level!r} has no levels; give at least one, "
                             'e.g. "1s 5s 10s"')

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> StoreConfig:
        """Build from a mapping (the node YAML's ``store:`` section); unknown keys are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise StoreError(f"unknown store setting(s) {unknown}; valid names: {sorted(names)}")
        return cls(**values)


QUEUE_FILES_COUNTED = 4  # consume-queue files a store needs room for at least (a topic of 4 queues)


def store_footprint(cfg: StoreConfig) -> int:
    """Bytes a store needs on its volume just to keep taking writes across a segment roll: two commit-log
    segments and two index files (the one being written and the next, each allocated whole when created), a few
    consume-queue files, and ``disk_min_free_bytes`` left over."""
    index_file = 40 + 4 * cfg.max_hash_slot_num + 20 * cfg.max_index_num if cfg.message_index_enable else 0
    return (2 * cfg.mapped_file_size_commit_log + 2 * index_file + QUEUE_FILES_COUNTED * cfg.consume_queue_file_size
            + cfg.disk_min_free_bytes)


def volume_problem(cfg: StoreConfig, volume_bytes: int, where: str) -> str:
    """Why a volume of ``volume_bytes`` (the filesystem of ``where``) is too small for these sizes, with the settings
    that fit it; "" when it is big enough. Writes are refused above ``disk_space_warning_level_ratio``, so only that
    share of the volume counts."""
    usable = int(volume_bytes * cfg.disk_space_warning_level_ratio)
    need = store_footprint(cfg)
    if need <= usable:
        return ""
    min_free = min(cfg.disk_min_free_bytes, max(1 << 20, volume_bytes // 20))
    budget = min(usable, volume_bytes - min_free) - min_free
    segment = 1 << max(12, (max(budget, 1) // 8).bit_length() - 1)  # a power of two: 8 segments fit
    slots = max(1000, segment // 2 // 84 // 1000 * 1000)  # an index file of half a segment, 4 entries per slot
    queue_units = max(1000, min(300_000, budget // 64 // CQ_STORE_UNIT_SIZE // 1000 * 1000))
    suggested = {"mapped_file_size_commit_log": segment, "max_hash_slot_num": slots, "max_index_num": 4 * slots,
                 "mapped_file_size_consume_queue": queue_units * CQ_STORE_UNIT_SIZE, "disk_min_free_bytes": min_free}
    changes = ", ".join(f"store.{k}={v}" for k, v in suggested.items() if getattr(cfg, k) != v)
    index_file = 40 + 4 * cfg.max_hash_slot_num + 20 * cfg.max_index_num
    return (f"the volume of {where} holds {_mib(volume_bytes)} ({_mib(usable)} usable below "
            f"disk_space_warning_level_ratio {cfg.disk_space_warning_level_ratio}), too small for the configured "
            f"sizes: {_mib(cfg.mapped_file_size_commit_log)} commit-log segments and {_mib(index_file)} index files "
            f"need {_mib(need)} (two of each, {QUEUE_FILES_COUNTED} consume-queue files of "
            f"{_mib(cfg.consume_queue_file_size)} and disk_min_free_bytes); set {changes}, or give the node a volume of "
            f"at least {_mib(int(need / cfg.disk_space_warning_level_ratio) + 1)}")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n < 1 << 30 else f"{n / (1 << 30):.2f} GiB"


def parse_host_port(value: str) -> tuple[str, int]:
    """Parse ``host:port`` or ``[v6]:port`` into ``(host, port)`` with a clear error."""
    text = value.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise StoreError(f"expected host:port (or [ipv6]:port), got {value!r}")
    return host, int(port)
