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
from raftmq.store.setting import setting

CQ_STORE_UNIT_SIZE = 20
OS_PAGE_SIZE = 4096
END_FILE_MIN_BLANK_LENGTH = 8


@dataclass
class StoreConfig:
    """The single-node engine: segment sizes, flushing, retention, recovery and integrity checks, delayed,
    timer and transactional messages. Names and defaults are RocketMQ 4.9's ``MessageStoreConfig`` in snake_case.

    Each field documents itself (``store.setting``): docs/operations/configuration.md is generated from it."""

    root_dir: str = setting("The store directory: `commitlog/`, `consumequeue/`, `index/`, `config/`, "
                            "`checkpoint`, `abort`, `lock`.", "store")
    # --- sizes
    mapped_file_size_commit_log: int = setting(
        "Bytes of one commit-log segment, preallocated on disk when the segment is created. Must be equal on "
        "every member (catch-up refuses otherwise).", 1024 * 1024 * 1024)
    mapped_file_size_consume_queue: int = setting(
        "Bytes of one consume-queue file (20-byte units, one per message; rounded up to whole units).",
        300_000 * CQ_STORE_UNIT_SIZE)
    max_mapped_consume_queue_files: int = setting(
        "Consume-queue files mapped at once at most (each also holds a file descriptor); a file is mapped when it "
        "is read or written, and the one mapped longest ago and not used since is unmapped to make room "
        "(docs/operations/capacity.md).", 4096)
    consume_queue_idle_seconds: int = setting(
        "Seconds after which a consume-queue file nobody read or wrote is unmapped (its descriptor closed, its "
        "pages left to the page cache).", 60)
    shutdown_dispatch_wait_seconds: float = setting(
        "At a clean stop, seconds to wait for dispatch (reput) to catch up with the commit log, so the next start is "
        "clean; past them the stop goes on and the next start recovers as after a crash. Keep it inside the "
        "pod's termination grace period.", 20.0)
    max_hash_slot_num: int = setting("Hash slots of one index file (4 bytes each).", 5_000_000)
    max_index_num: int = setting(
        "Index entries of one index file (20 bytes each): with the slots about 400 MB per file by default.",
        5_000_000 * 4)
    max_message_size: int = setting(
        "Largest message body, and largest batch, in bytes. The gRPC port accepts requests up to twice this "
        "plus 1 MiB.", 1024 * 1024 * 4)
    # --- flush
    flush_disk_type: str = setting(
        "`ASYNC`: a put is acknowledged once in the page cache and flushed every `flush_interval_commit_log`; "
        "`SYNC`: a put waits for its fsync (one fsync serves every put waiting then). On a single node this is the "
        "durability; a replicated group's durability is `cluster.durability`.", "ASYNC", choices=("ASYNC", "SYNC"))
    flush_interval_commit_log: int = setting("Milliseconds between two commit-log flushes (ASYNC; > 0).", 500)
    flush_commit_log_least_pages: int = setting(
        "A commit-log flush runs only when at least this many 4 KiB pages are dirty (ASYNC).", 4)
    flush_commit_log_thorough_interval: int = setting(
        "Milliseconds after which a commit-log flush ignores `flush_commit_log_least_pages` (> 0).", 10_000)
    flush_commit_log_timed: bool = setting(
        "Accepted for RocketMQ compatibility and not used: the flush thread always sleeps the interval.", True)
    sync_flush_timeout: int = setting(
        "Milliseconds a SYNC put waits for its fsync before it answers FLUSH_DISK_TIMEOUT (> 0).", 5_000)
    flush_interval_consume_queue: int = setting("Milliseconds between two consume-queue flushes (> 0).", 1_000)
    flush_consume_queue_least_pages: int = setting(
        "A consume-queue flush runs only when at least this many 4 KiB pages are dirty.", 2)
    flush_consume_queue_thorough_interval: int = setting(
        "Milliseconds after which a consume-queue flush ignores `flush_consume_queue_least_pages` (> 0).", 60_000)
    # --- retention
    file_reserved_time: int = setting(
        "Hours a commit-log segment is kept after its last write; then it expires (consume-queue and index files "
        "that point only into deleted segments follow it).", 72)
    delete_when: str = setting(
        "Local hours of the day, `;`-separated (e.g. `04;16`), at which expired files are deleted (at any hour "
        "when the disk is fuller than `disk_max_used_space_ratio`).", "04")
    clean_resource_interval: int = setting("Milliseconds between two retention checks (> 0).", 10_000)
    delete_commit_log_files_interval: int = setting(
        "Milliseconds of pause between two commit-log segment deletions (0: none).", 100)
    delete_consume_queue_files_interval: int = setting(
        "Milliseconds of pause between two consume-queue file deletions (0: none).", 100)
    destroy_mapped_file_interval_forcibly: int = setting(
        "Accepted for RocketMQ compatibility and not used: a deleted file's mapping is released at once.",
        120_000)
    disk_max_used_space_ratio: float = setting(
        "Disk use, a fraction in (0, 1], above which expired files are deleted at any hour, not only at "
        "`delete_when`.", 0.75)
    disk_space_warning_level_ratio: float = setting(
        "Disk use, a fraction in (0, 1], above which writes are refused (disk full) until files are deleted.",
        0.90)
    disk_space_clean_forcibly_ratio: float = setting(
        "Disk use, a fraction in (0, 1], above which segments are deleted before they expire (with "
        "`clean_file_forcibly_enable`).", 0.85)
    clean_file_forcibly_enable: bool = setting(
        "Allow the deletion of unexpired segments above `disk_space_clean_forcibly_ratio`.", True)
    disk_min_free_bytes: int = setting(
        "Writes are refused (RESOURCE_EXHAUSTED `disk full on <member>: <path>, N bytes free`, `/ready` 503) "
        "while the store's filesystem has less than this many bytes free, and after an ENOSPC until it has "
        "this much again.", 64 * 1024 * 1024)
    # --- recovery, index, dispatch
    check_crc_on_recover: bool = setting(
        "Verify each record's body CRC while recovering the commit log at start.", True)
    check_derived_files_on_start: bool = setting(
        "At start, compare the consume queues and index files with the commit log and rebuild damaged or "
        "missing ones from it. After a clean stop only what is new is checked: the queue ranges, file holes and "
        "index file names against `dispatched.json` (written at the stop), and the log past it record by record; "
        "after a crash what recovery re-dispatches, and without `dispatched.json` the whole log once "
        "(docs/operations/damaged-disks.md). Older damage is the scrubber's and the reads' to find; off: only "
        "they find it.", True)
    scrub_rate_bytes_per_s: int = setting(
        "Bytes per second at most at which the background scrubber re-reads the commit log (the sealed "
        "segments oldest first, then the one being written up to what reput has dispatched), checking record "
        "CRCs and the consume queues and index built from them (0: scrubber off).", 4 * 1024 * 1024)
    scrub_interval_s: int = setting(
        "Seconds from the end of a scrub pass to the start of the next.", 3600)
    scrub_first_delay_s: int = setting(
        "Seconds from the store's start to the first scrub pass (at most `scrub_interval_s`).", 60)
    check_crc_on_read: bool = setting(
        "Pull, view and query verify each record they return (header, body CRC, own offset) and refuse a "
        "damaged one with DATA_LOSS instead of returning its bytes (cost: `bench/read_crc_bench.py`).", True)
    message_index_enable: bool = setting(
        "Build the key and UNIQ_KEY index (`raftmq query`, `raftmq view --topic`).", True)
    message_index_safe: bool = setting(
        "After a crash, recover from the checkpoint's index time as well (the oldest of the commit-log, "
        "consume-queue and index times), as RocketMQ's `messageIndexSafe`.", False)
    max_msgs_num_batch: int = setting("Most results of one query by key (> 0).", 64)
    reput_interval_ms: int = setting(
        "Accepted for RocketMQ compatibility and not used: the reput thread is woken by every append.", 1)
    # --- reads (RocketMQ getMessage limits)
    max_transfer_bytes_on_message_in_memory: int = setting(
        "Accepted for RocketMQ compatibility and not used: a pull's size is bounded by its request "
        "(`max_bytes`, at most 32 MiB).", 256 * 1024)
    max_transfer_count_on_message_in_memory: int = setting(
        "Accepted for RocketMQ compatibility and not used: a pull's count is bounded by its request "
        "(`max_count`, at most 1024).", 32)
    # --- delay levels (ScheduleMessageService)
    message_delay_level: str = setting(
        "The delay of each delay level (`--delay-level N` is the N-th), space-separated, with units s, m, h, d.",
        "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    # --- timer messages (RocketMQ 5 TimerMessageStore; store.timer)
    timer_max_delay_seconds: int = setting(
        "A timer message (`--deliver-at`) due further than this many seconds ahead is refused "
        "(RocketMQ 5's `timerMaxDelaySec`, 3 days).", 3 * 24 * 3600)
    # --- transactional messages (BrokerConfig transactionTimeOut / transactionCheckInterval / transactionCheckMax)
    transaction_timeout_ms: int = setting(
        "Milliseconds a half message may stay without an outcome before the leader asks its producer group.", 6_000)
    transaction_check_interval_ms: int = setting(
        "Milliseconds between two scans of the open transactions by the leader.", 60_000)
    transaction_check_max: int = setting(
        "Checks of one half message before it is given up and moved to `TRANS_CHECK_MAX_TIME_TOPIC`.", 15)
    # --- identity written into records (group-level: the same on every member)
    store_host: str = setting("STOREHOST (IP:port) written into every record and msgId.", "127.0.0.1:10911")
    cluster_name: str = setting("CLUSTER property written into every record.", "DefaultCluster")
    preallocate: bool = setting(
        "Reserve each new segment's disk blocks when it is created, so a full disk fails the creation "
        "(ENOSPC, writes refused) instead of a later write into the mapping.", True)

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
        if self.shutdown_dispatch_wait_seconds < 0:
            raise StoreError(f"shutdown_dispatch_wait_seconds must be >= 0, got {self.shutdown_dispatch_wait_seconds}")
        if self.timer_max_delay_seconds < 1:
            raise StoreError(f"timer_max_delay_seconds must be at least 1, got {self.timer_max_delay_seconds}")
        for name in ("max_hash_slot_num", "max_index_num", "max_message_size", "max_msgs_num_batch",
                     "max_mapped_consume_queue_files", "consume_queue_idle_seconds"):
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
