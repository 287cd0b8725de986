"""MessageStore: the facade of the single-node engine (RocketMQ ``DefaultMessageStore``).

Nothing outside ``store/`` touches the parts behind it. Lifecycle::

    st = MessageStore(StoreConfig(root_dir="data/n0"))
    st.open()       # lock, load, recover (normal or abnormal), dispatch the backlog, start threads
    ...
    st.shutdown()   # stop threads, flush everything, remove ``abort`` when caught up, release the lock

Write path:
    ``put_message(msg)`` / ``put_messages(msgs)`` -> ``PutResult`` per message (single node: encode + apply
    under the put lock, then wait for the fsync in SYNC mode; FLUSH_DISK_TIMEOUT when it took too long).
    ``encode_batch(msgs, store_timestamp=None, store_host=None, cluster_name=None) -> bytes`` (leader) and
    ``apply_batch(batch) -> list[AppendResult]`` (every replica, deterministic) are the two halves for
    replication; ``wait_flushed(offset, timeout_s) -> bool`` gives SYNC durability to applied batches.
    Invalid input raises ``MessageIllegalError`` / ``PropertiesSizeExceededError``; a full disk raises
    ``DiskFullError``; a closed store raises ``StoreClosedError``.

Catch-up and truncation (replication):
    ``read_commit_log(offset, max_bytes) -> bytes`` (whole records), ``append_commit_log_raw(offset, data)``,
    ``truncate_to(offset)`` (commit log, consume queues, index), ``confirm_offset`` (reput stops there),
    ``commit_log_min_offset`` / ``commit_log_max_offset``.

Reads (any replica):
    ``get_messages(topic, queue_id, offset, max_count=32, max_bytes=4 MiB, tag_filter=None) -> GetResult``
    with RocketMQ's GetMessageStatus semantics, ``query_messages(topic, key, max_num, begin_ms, end_ms)``,
    ``view_message_by_id(msg_id)``, ``view_message(physical_offset)``, ``get_offset_by_time``,
    ``min_offset_in_queue`` / ``max_offset_in_queue``, ``queue_ids(topic)``, ``dispatch_behind_bytes()``.

Metadata: ``topics`` (TopicConfigTable, ``config/topics.json``), ``subscription_groups`` (SubscriptionGroupTable,
``config/subscriptionGroup.json``), ``consumer_offsets`` (ConsumerOffsetTable,
``config/consumerOffset.json``), ``delete_topic_files(topic)``. Misc: ``add_arrival_listener(fn)``,
``flush()``, ``stats()``, ``retention`` (RetentionService: expiry of old segments; writes are refused with
DiskFullError while its disk-full flag is up), ``retain_from`` (optional callable: the lowest commit-log
offset retention must keep, e.g. for a lagging replica).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from raftmq.store import dispatch_marker
from raftmq.store.checkpoint import StoreCheckpoint
from raftmq.store.commit_log import AppendResult, CommitLog, PutStatus
from raftmq.store.config import CQ_STORE_UNIT_SIZE, StoreConfig
from raftmq.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueueTable, KnownRange, LoadDamage
from raftmq.store.consumer_offsets import ConsumerOffsetTable
from raftmq.store.delay_offsets import DelayOffsetTable
from raftmq.store.derived_check import (
    ConsumeQueueCheck,
    IndexDamage,
    QueueDamage,
    check_consume_queues,
    check_index_files,
)
from raftmq.store.disk_health import DiskHealth
from raftmq.store.errors import (
    ConsumeQueueUnitError,
    DiskFullError,
    StorageIOError,
    StoreClosedError,
    StoreError,
)
from raftmq.store.file_lock import StoreLock
from raftmq.store.flush import GroupCommitService, PeriodicFlushService
from raftmq.store.index_service import IndexService
from raftmq.store.integrity import (
    CorruptionError,
    CorruptReadError,
    CorruptRecord,
    check_read,
    chunk_problem,
    is_quarantine_record,
    verify_records,
)
from raftmq.store.json_file import fsync_dir, makedirs_durably
from raftmq.store.mapped_file import remove_unfinished_segments
from raftmq.store.message import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TIMED_TOPICS,
    Message,
    MessageExt,
    UniqKeyGenerator,
    check_frame,
    decode_message_id,
    decode_record,
)
from raftmq.store.pop_state import PopStateTable
from raftmq.store.queue_units import (
    MAX_HEAL_SCAN_UNITS,
    MAX_HEAL_WALK_BYTES,
    RESERVED,
    message_problem,
    raw_unit_problem,
    read_fields,
    unit_problem,
    units_from_log,
)
from raftmq.store.reput import ReputMessageService
from raftmq.store.retention import RetentionService
from raftmq.store.schedule import DelayLevels, to_schedule_messages
from raftmq.store.scrubber import Scrubber
from raftmq.store.sql_filter import SqlFilter
from raftmq.store.subscription_groups import SubscriptionGroupTable
from raftmq.store.tag_filter import TagFilter
from raftmq.store.timer import to_timer_messages
from raftmq.store.timer_progress import TimerProgressTable
from raftmq.store.topic_config import TopicConfigTable

log = logging.getLogger("raftmq.store.message_store")
POP_STATE_PERSIST_INTERVAL_MS = 1000
TOPIC_FOLD_INTERVAL_MS = 30_000  # topics.json catches up with its change log at least this often

_INTERNAL_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", "TRANS_CHECK_MAX_TIME_TOPIC", "rmq_sys_wheel_timer"})
# RocketMQ scans at most 16,000 bytes of consume queue per pull when filtering (800 units).
MAX_FILTER_UNITS = 16_000 // CQ_STORE_UNIT_SIZE
NO_DAMAGE = "no damage found"  # how integrity_summary starts when nothing was found (cluster status, console)
HEAL_ROUNDS = 4  # runs of wrong consume-queue units one pull rebuilds before it answers
FLUSH_CONSUMER_OFFSET_INTERVAL_MS = 5_000
QUEUE_REBUILD_WAIT_S = 30.0  # a read that found a queue damaged waits this long at most for its rebuild


class GetStatus(enum.Enum):
    """RocketMQ ``GetMessageStatus``."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


PutResult = AppendResult
"""Outcome of one stored message: status, msg_id, uniq_key, topic, queue_id, queue_offset, physical_offset,
store_timestamp, wrote_bytes (offsets are final)."""


@dataclass(slots=True)
class GetResult:
    """Outcome of a pull: messages from ``offset`` and where the next pull should start."""

    status: GetStatus
    messages: list[MessageExt] = field(default_factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0


class MessageStore:
    """One store directory; see the module docstring for the whole API."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self._lock = StoreLock(config.lock_path)
        self._open = False
        self._opening = threading.Lock()
        self.checkpoint: StoreCheckpoint | None = None
        self.commit_log: CommitLog | None = None
        self.consume_queues = ConsumeQueueTable.from_config(config)
        self.index_service: IndexService | None = None
        self.reput: ReputMessageService | None = None
        self.topics = TopicConfigTable(config.config_dir)
        self.subscription_groups = SubscriptionGroupTable(config.config_dir)  # groups' own settings (replicated)
        self.consumer_offsets = ConsumerOffsetTable(config.config_dir)
        self.delay_offsets = DelayOffsetTable(config.config_dir)  # schedule progress (replicated metadata)
        self.timer_progress = TimerProgressTable(config.config_dir)  # timer delivery progress (replicated metadata)
        self.pop_state = PopStateTable(config.config_dir)  # receive/ack/invisible state (replicated metadata)
        self.delay_levels = DelayLevels(config.message_delay_level)
        self._services: list = []
        self.retention: RetentionService | None = None
        # replication may set this to the lowest commit-log offset a lagging replica still has to fetch
        self.retain_from: Callable[[], int] | None = None
        self._group_commit: GroupCommitService | None = None
        # can the filesystem take writes (free space, ENOSPC seen, I/O errors); the node names the member
        self.disk = DiskHealth(config.root_dir, config.disk_min_free_bytes)
        self.last_exit_ok = True
        self.process_crash_only = False
        self.derived_damage: list[str] = []  # derived-file damage found (and rebuilt) at the last open
        self.start_check_records = 0  # commit-log records the last open compared its derived files with
        # damage found so far, by file kind (metric rocketmq_storage_corruption_total)
        self.corruption_found = {"commitlog": 0, "consumequeue": 0, "index": 0}
        self.commit_log_damage: list[CorruptRecord] = []  # reported and not (yet) repaired
        self._damage_listeners: list[Callable[[list[CorruptRecord]], None]] = []
        self._damage_lock = threading.Lock()  # reads and the scrubber report damage from their own threads
        self.scrubber: Scrubber | None = None
        self._put_messages = 0
        self._put_bytes = 0
        self._put_batches = 0
        self._store_host = config.store_host_addr
        self._uniq = UniqKeyGenerator(self._store_host[0])  # UNIQ_KEY of a delayed message sent without one
        # replication sets this before open(): the commit-log end it knows was applied (acknowledged); recovery
        # treats damage below it as corruption even when the checkpoint is older
        self.acknowledged_end_hint = 0
        self.corrupt_reads = 0  # reads refused because the record was damaged (metrics)
        # set by a repair (from peers) before open(): re-dispatch consume queues and index from here at least
        self.redispatch_from_hint: int | None = None
        # replication sets this: called on the flush thread before commit-log bytes are flushed, to make durable
        # first what describes them (the Raft journal, the applied index; docs/design/durability.md)
        self.before_commit_log_flush: Callable[[], None] | None = None
        self._rewind_to: int | None = None  # re-dispatch point asked for by a queue opened while the store opens
        self._heal_lock = threading.Lock()  # one rebuild of wrong consume-queue units at a time (reads find them)
        self._healing: set[tuple[str, int, int]] = set()  # rebuilds running in the background
        self._unhealed_units: set[tuple[str, int, int]] = set()  # counted once as damage that stays

    # ================================================================== lifecycle
    def open(self) -> None:
        """Lock, load and recover in RocketMQ's order, dispatch the backlog, then start the threads."""
        with self._opening:
            if self._open:
                raise StoreError(f"store {self.config.root_dir} is already open")
            makedirs_durably(self.config.root_dir)
            self._lock.acquire()
            if self.commit_log is not None:  # re-opened after a shutdown: start from fresh objects
                self.consume_queues = ConsumeQueueTable.from_config(self.config)
                self.topics = TopicConfigTable(self.config.config_dir)
                self.subscription_groups = SubscriptionGroupTable(self.config.config_dir)
                self.consumer_offsets = ConsumerOffsetTable(self.config.config_dir)
                self.delay_offsets = DelayOffsetTable(self.config.config_dir)
                self.timer_progress = TimerProgressTable(self.config.config_dir)
                self.pop_state = PopStateTable(self.config.config_dir)
                self._services = []
                self._group_commit = None
            try:
                self._load_and_recover()
            except BaseException:
                self._close_files()
                self._lock.release()
                raise
            self._start_services()
            self._touch_abort()
            self._open = True
            log.info("store %s open: commit log [%d, %d), %d consume queues, last exit %s",
                     self.config.root_dir, self.commit_log_min_offset, self.commit_log_max_offset,
                     sum(1 for _ in self.consume_queues.queues()), "clean" if self.last_exit_ok else "ABNORMAL")

    def corruption_hint(self) -> str:
        """What to do about a ``CorruptionError`` (part of its message: the node logs it as its exit reason)."""
        root = self.config.root_dir
        return (f"Nothing was deleted or overwritten. List the damage with `raftmq store check {root}`; a single "
                f"node repairs with `raftmq store repair {root}` (quarantines the damaged records, keeps every "
                "other record at its offset; try --dry-run first); a replicated member repairs from its peers at "
                "start")

    def _load_and_recover(self) -> None:
        cfg = self.config
        self.last_exit_ok = not os.path.exists(cfg.abort_path)
        self.derived_damage = []
        # 1. commit log, 2. consume queues, 3. checkpoint, 4. index (docs/design/store-formats.md#checkpoint-abort-and-lock)
        self.checkpoint = StoreCheckpoint(cfg.checkpoint_path)
        cl = self.commit_log = CommitLog(cfg, self.checkpoint)
        # After a crash of only this process every write is still in the page cache, so index files are
        # whole: keep them (RocketMQ drops the newer ones, which costs a re-index of up to a whole file).
        self.process_crash_only = not self.last_exit_ok and _abort_is_from_this_boot(cfg.abort_path)
        try:
            cl.load()
            cl.acknowledged_end = max(self.checkpoint.flushed_offset, self.acknowledged_end_hint)
            cl.pages_may_be_lost = not self.last_exit_ok and not self.process_crash_only
            cl.verify_before_recovery(self.last_exit_ok)  # corruption stops here, before any file changes
        except CorruptionError as e:
            raise CorruptionError(e.records, hint=self.corruption_hint()) from None
        self.index_service = IndexService.from_config(cfg, self.checkpoint) if cfg.message_index_enable else None
        if self.index_service is not None:
            remove_unfinished_segments(cfg.index_dir)
            self.index_service.load(self.last_exit_ok or self.process_crash_only)
            if not self.last_exit_ok:
                self.index_service.repair_after_crash()
        self.topics.load()
        self.subscription_groups.load()
        self.consumer_offsets.load()
        self.delay_offsets.load()
        self.timer_progress.load()
        self.pop_state.load()
        # 5. recover. From here on files change and the index is rebuilt: mark the store in use now, not only
        # once open() is done as RocketMQ does, so a kill during recovery or the catch-up dispatch below is
        # recovered as the crash it is (an existing marker keeps its time: it tells whether the machine rebooted)
        marker = dispatch_marker.take(cfg.root_dir) if self.last_exit_ok else None
        if self.last_exit_ok:
            self._touch_abort()
        if self.last_exit_ok:
            end = cl.recover_normally()
            redispatch_from = None
        else:
            log.warning("store %s was not shut down cleanly: abnormal recovery (%s)", cfg.root_dir,
                        "the process died, the machine did not restart" if self.process_crash_only
                        else "the machine may have restarted")
            end = cl.recover_abnormally()
            redispatch_from = cl.abnormal_recovery_start  # reput re-dispatches from there (deduplicated)
        if marker is not None and marker.end > end:
            log.warning("store %s: %s says dispatch reached commit-log offset %d but the log ends at %d: opening "
                        "every consume queue", cfg.root_dir, dispatch_marker.FILE_NAME, marker.end, end)
            marker = None
        if marker is not None:  # a clean stop described every queue: none is opened before it is used
            self.consume_queues.adopt({(topic, int(qid)): KnownRange(*line) for key, line in marker.queues.items()
                                       for topic, _, qid in [key.rpartition("/")]})
            max_phy_of_cq = self.consume_queues.max_physic_offset()
        else:
            self.consume_queues.load()
            max_phy_of_cq = self.consume_queues.recover()
        if not cl.mapped_file_queue.mapped_files:
            self.consume_queues.destroy()
            if self.index_service is not None:
                self.index_service.destroy()
            max_phy_of_cq = -1
        elif max_phy_of_cq > end:  # a unit ending exactly at the end is whole
            self._truncate_consume_queues(end)
            max_phy_of_cq = self.consume_queues.max_physic_offset()
        if self.index_service is not None and self.index_service.index_files:
            if self.index_service.index_files[-1].end_phy_offset >= end:
                self.index_service.truncate(end)
        self.consume_queues.correct_min_offsets(cl.min_offset)
        # dispatch what the consume queues / index miss, before anyone reads or writes (RocketMQ start())
        reput_from = max(max_phy_of_cq, cl.min_offset, 0)
        if marker is not None:  # the clean stop had dispatched everything below its end
            reput_from = max(reput_from, marker.end)
        if redispatch_from is not None:
            # After a crash re-dispatch what may be missing (CQ and index writes skip what they already have):
            # from the checkpoint's segment when the machine may have lost dirty pages (consume queues can
            # have holes), and from the end of what the index still holds (its newer files may be dropped).
            if not self.process_crash_only:
                reput_from = min(reput_from, redispatch_from)
            if self.index_service is not None:
                files = self.index_service.index_files
                reput_from = min(reput_from, files[-1].end_phy_offset if files else 0)
            reput_from = max(reput_from, cl.min_offset)
        # consume queues and index are derived data: check what is new against the log (after a clean stop, what
        # follows the end the stop recorded; after a crash, what recovery re-dispatches), cut what is wrong (units
        # simply not written yet past reput_from are not damage: reput writes them now anyway)
        if marker is not None and marker.end <= end:
            check_from = max(marker.end, cl.min_offset)
        else:
            check_from = reput_from if not self.last_exit_ok else cl.min_offset
        if self.redispatch_from_hint is not None:  # repaired bytes: rebuild what was derived from them
            reput_from = max(min(reput_from, self.redispatch_from_hint), cl.min_offset)
            check_from = min(check_from, reput_from)
            self.redispatch_from_hint = None
        self.consume_queues.on_load_damage = self._queue_damaged_at_first_use
        self._rewind_to = None
        rebuild_from, log_queue_offsets = self._check_derived_files(end, reput_from, check_from)
        if marker is not None:
            rebuild_from = self._compare_with_marker(marker, rebuild_from, log_queue_offsets)
        if self._rewind_to is not None:  # a queue used by the check above lacked what the stop left
            rebuild_from = self._rewind_to if rebuild_from is None else min(rebuild_from, self._rewind_to)
        if rebuild_from is not None:
            reput_from = max(min(reput_from, rebuild_from), cl.min_offset)
        self.reput = ReputMessageService(cl, self.consume_queues, self.index_service,
                                         reput_from_offset=reput_from, checkpoint=self.checkpoint,
                                         on_write_error=self._dispatch_write_error)
        while self.reput.dispatch_behind_bytes() > 0:
            before = self.reput.reput_from_offset
            self.reput.do_reput()
            if self.reput.reput_from_offset == before:
                log.error("store %s: dispatch stuck at %d (%s)", cfg.root_dir, before, self.reput.last_error)
                break
        self._rebuild_queue_offset_table()
        # a queue's next offset comes from the log: a consume queue that lost units must never lower it
        own = cl.topic_queue_table
        for key, nxt in log_queue_offsets.items():
            if nxt > own.get(key, 0):
                own[key] = nxt

    def _dispatch_write_error(self, error: OSError, path: str) -> None:
        """Reput could not write a consume-queue or index file: the disk refuses writes (full: until it has room
        again, for the next index file too, so the index can catch up before more needs it)."""
        index = self.index_service
        needs = 0
        if index is not None and path == index.store_path and self.config.preallocate:
            needs = 40 + 4 * index.hash_slot_num + 20 * index.index_num
        self.disk.record_error(error, path, needs)

    def _missing_index_files(self, found: ConsumeQueueCheck, dispatch_from: int) -> list[IndexDamage]:
        """Index files that must exist but do not: the log has keyed records past the end of the last file
        (reput would not index them again: they lie before ``dispatch_from``), or before the first one."""
        assert self.index_service is not None
        files = self.index_service.index_files
        missing = [IndexDamage(files[i + 1].path, i + 1, "keyed records between the end of the file before "
                               f"({files[i].end_phy_offset}) and its first entry ({files[i + 1].begin_phy_offset}) "
                               "are in no index file (a file between them is missing)")
                   for i in sorted(found.index_gap_hits)]
        if missing:
            return missing[:1]
        if found.last_indexed < 0:
            return []
        if not files:
            if found.first_indexed < dispatch_from:
                return [IndexDamage(self.config.index_dir, 0, "no index file, but the commit log holds keyed records "
                                    f"from offset {found.first_indexed}")]
            return []
        last_end = files[-1].end_phy_offset
        if last_end < found.last_indexed and last_end < dispatch_from:
            return [IndexDamage(files[-1].path, len(files), f"the index ends at commit-log offset {last_end} but "
                                f"keyed records follow up to {found.last_indexed} (a later index file is missing)")]
        return []

    def _topic_has_queues(self, topic: str) -> bool:
        """A topic whose consume queues must exist: configured, or an internal one (schedule, transactions,
        retry / DLQ) written by the broker itself. A deleted topic's records stay in the log without queues."""
        return (self.topics.get(topic) is not None or topic.startswith(("%RETRY%", "%DLQ%", "RMQ_SYS_"))
                or topic in _INTERNAL_TOPICS or os.path.isdir(os.path.join(self.config.consume_queue_dir, topic)))

    def _check_derived_files(self, end: int, dispatch_from: int, check_from: int
                             ) -> tuple[int | None, dict[str, int]]:
        """Compare consume queues and index files with the commit log in ``[check_from, end)``
        (``store.derived_check``) and cut the damaged ones; returns the commit-log offset reput must re-dispatch
        from (None: nothing to rebuild) and the next queue offsets the log holds there. Missing units of records
        at or after ``dispatch_from`` are the ordinary lag of a crash (reput dispatches from there anyway), not
        damage. What lies before ``check_from`` is the scrubber's (and every read checks the units it uses)."""
        cl = self.commit_log
        assert cl is not None
        if not self.config.check_derived_files_on_start or not cl.mapped_file_queue.mapped_files:
            return None, {}
        started = time.monotonic()
        rebuild_from: int | None = None
        index_files = self.index_service.index_files if self.index_service is not None else []
        gaps = [(a.end_phy_offset, b.begin_phy_offset) for a, b in zip(index_files, index_files[1:], strict=False)]
        whole = check_from <= cl.min_offset
        found = check_consume_queues(cl, self.consume_queues, max(check_from, cl.min_offset), end, whole_log=whole,
                                     topic_exists=self._topic_has_queues, index_gaps=gaps)
        self.start_check_records = found.records
        self._rewrite_units(found.wrong_units, "start-up check")
        for damage in found.damage.values():
            if damage.commit_log_offset >= dispatch_from and damage.reason.startswith("is missing"):
                continue
            log.error("store %s: %s; rebuilding it from the commit log", self.config.root_dir, damage.describe())
            self.derived_damage.append(damage.describe())
            self.corruption_found["consumequeue"] += 1
            cq = self.consume_queues.get(damage.topic, damage.queue_id)
            if cq is not None:
                cq.cut_at(damage.queue_offset)
            rebuild_from = damage.commit_log_offset if rebuild_from is None else min(
                rebuild_from, damage.commit_log_offset)
        if self.index_service is not None:
            files = self.index_service.index_files
            newer = next((i for i, f in enumerate(files) if f.end_phy_offset >= check_from), len(files))
            bad = check_index_files(files, end, headers_only_before=newer)  # whole: the files covering what is new
            bad += self._missing_index_files(found, dispatch_from)
            if bad:
                for damage in bad:
                    log.error("store %s: %s; rebuilding the index from there", self.config.root_dir,
                              damage.describe())
                    self.derived_damage.append(damage.describe())
                    self.corruption_found["index"] += 1
                restart = self.index_service.drop_from(bad[0].position)
                rebuild_from = restart if rebuild_from is None else min(rebuild_from, restart)
        log.info("store %s: checked consume queues and index against %d records of the commit log (%s) in %.2fs%s",
                 self.config.root_dir, found.records, "all of it" if whole else f"from offset {check_from}",
                 time.monotonic() - started, "" if rebuild_from is None else f"; re-dispatching from offset "
                 f"{rebuild_from}")
        return rebuild_from, found.next_queue_offsets

    def _compare_with_marker(self, marker: dispatch_marker.DispatchMarker, rebuild_from: int | None,
                             next_offsets: dict[str, int]) -> int | None:
        """After a clean stop, no queue's next offset goes below what the stop recorded (each queue's files are
        checked against its line when first used: ``_queue_damaged_at_first_use``), and every index file must
        come back: missing ones are rebuilt from the end of the file before. Returns the new re-dispatch point."""
        for key, (_first, next_qo, _phy, _end) in marker.queues.items():
            topic, _, qid = key.rpartition("/")
            name = f"{topic}-{qid}"
            if next_offsets.get(name, 0) < next_qo:
                next_offsets[name] = next_qo
        index = self.index_service
        if index is not None:
            names = [f.file_name for f in index.index_files]
            lost = next((i for i, n in enumerate(marker.index_files) if i >= len(names) or names[i] != n), None)
            if lost is not None:
                desc = (f"index file {os.path.join(index.store_path, marker.index_files[lost])} is missing: rebuilding "
                        "the index from the end of the file before")
                log.error("store %s: %s", self.config.root_dir, desc)
                self.derived_damage.append(desc)
                self.corruption_found["index"] += 1
                restart = index.drop_from(lost)
                rebuild_from = restart if rebuild_from is None else min(rebuild_from, restart)
        return rebuild_from

    def _queue_damaged_at_first_use(self, cq, damage: LoadDamage) -> None:
        """A queue the last clean stop described, opened on first use, lacks units (a file deleted or rotten
        while the store was stopped) or holds some past its end: the damage is counted, the queue cut, and the
        commit log re-dispatched from the end of its last good unit. A reader waits for that rebuild; the reput
        thread (a dispatch opened the queue) goes on and does it."""
        desc = f"consume queue {cq.topic}-{cq.queue_id} {damage.reason}"
        self.derived_damage.append(desc)
        self.corruption_found["consumequeue"] += 1
        reput = self.reput
        with reput.paused() if reput is not None else contextlib.nullcontext():
            if damage.cut_at is not None:
                cq.cut_at(damage.cut_at)
            if damage.rebuild_after is None:
                return
            restart = self._end_of_unit(cq, damage.rebuild_after)
            if reput is None:  # still opening: the start re-dispatches from there
                self._rewind_to = restart if self._rewind_to is None else min(self._rewind_to, restart)
                return
            reput.rewind(restart)
        if not reput.on_reput_thread():
            reput.wait_dispatched(timeout=QUEUE_REBUILD_WAIT_S)

    def _end_of_unit(self, cq, queue_offset: int) -> int:
        """Where re-dispatch must start to rebuild a queue after ``queue_offset``: the end of that unit's record (the
        log's first offset when there is no such unit)."""
        assert self.commit_log is not None
        unit = cq.unit_at(queue_offset) if queue_offset >= 0 else None
        if unit is None or unit[1] == BLANK_UNIT_SIZE or unit[0] < 0:
            return self.commit_log.min_offset
        return max(self.commit_log.min_offset, unit[0] + unit[1])

    def _truncate_consume_queues(self, offset: int) -> None:
        """Drop units at or beyond ``offset`` and zero the dropped bytes, so a restart cannot recover them."""
        before = [(cq, cq.mapped_file_queue.get_max_offset()) for cq in self.consume_queues.queues()
                  if cq.may_hold_units_from(offset)]
        self.consume_queues.truncate_dirty_logic_files(offset)
        for cq, old_end in before:
            mfq = cq.mapped_file_queue
            new_end = mfq.get_max_offset()
            mf = mfq.find_mapped_file_by_offset(new_end)
            if new_end < old_end and mf is not None:
                pos = new_end - mf.file_from_offset
                stop = min(old_end - mf.file_from_offset, mf.file_size)
                mf.write_at(pos, bytes(stop - pos))

    def _rebuild_queue_offset_table(self, upto: int | None = None) -> None:
        """``recoverTopicQueueTable``: next queue offsets from the consume queues plus undispatched records (those
        below ``upto`` only, when given)."""
        cl = self.commit_log
        assert cl is not None and self.reput is not None
        table = self.consume_queues.queue_offset_table()
        offset = self.reput.reput_from_offset
        end = cl.max_offset if upto is None else min(upto, cl.max_offset)
        while offset < end:
            view = cl.get_data(offset, end)
            if view is None:
                break
            next_offset: int | None = None
            try:
                pos, n = 0, len(view)
                while pos < n:
                    dr = cl.check_message_and_return_size(view, pos, n, False)
                    if dr.success and dr.msg_size > 0:
                        if dr.goes_to_consume_queue:
                            key = f"{dr.topic}-{dr.queue_id}"
                            table[key] = max(table.get(key, 0), dr.consume_queue_offset + 1)
                        pos += dr.msg_size
                    elif dr.success:
                        next_offset = cl.roll_next_file(offset + pos)
                        break
                    elif dr.msg_size > 0:
                        pos += dr.msg_size
                    else:
                        next_offset = -1
                        break
            finally:
                view.release()
            if next_offset == -1:
                break
            offset = offset + pos if next_offset is None else next_offset
        cl.topic_queue_table = {k: v for k, v in table.items() if v > 0}

    def _start_services(self) -> None:
        cfg = self.config
        cl = self.commit_log
        assert cl is not None and self.reput is not None and self.checkpoint is not None
        if cfg.sync_flush:
            self._group_commit = GroupCommitService(self._flush_commit_log_all, cl.flushed_where)
            self._services.append(self._group_commit)
        else:
            self._services.append(PeriodicFlushService(
                "FlushRealTimeService", self._flush_commit_log, cfg.flush_interval_commit_log,
                cfg.flush_commit_log_least_pages, cfg.flush_commit_log_thorough_interval))
        self._services.append(PeriodicFlushService(
            "FlushConsumeQueueService", self._flush_consume_queues, cfg.flush_interval_consume_queue,
            cfg.flush_consume_queue_least_pages, cfg.flush_consume_queue_thorough_interval))
        self._services.append(PeriodicFlushService(
            "ConsumerOffsetPersistService", lambda _least: self.consumer_offsets.persist(only_if_dirty=True),
            FLUSH_CONSUMER_OFFSET_INTERVAL_MS, 0, FLUSH_CONSUMER_OFFSET_INTERVAL_MS))
        self._services.append(PeriodicFlushService(  # pop state changes often; Raft replays what a crash lost
            "PopStatePersistService", lambda _least: self.pop_state.persist(only_if_dirty=True),
            POP_STATE_PERSIST_INTERVAL_MS, 0, POP_STATE_PERSIST_INTERVAL_MS))
        self._services.append(PeriodicFlushService(  # changes are durable in the log; this keeps topics.json fresh
            "TopicTableFoldService", lambda _least: self.topics.fold(), TOPIC_FOLD_INTERVAL_MS, 0,
            TOPIC_FOLD_INTERVAL_MS))
        for s in self._services:
            s.start()
        self.retention = RetentionService(cfg, cl, self.consume_queues, self.index_service,
                                          protect_offset=self._retention_protect_offset)
        self.retention.start()
        self.reput.start()
        if cfg.scrub_rate_bytes_per_s > 0:
            self.scrubber = Scrubber(self, cfg.scrub_rate_bytes_per_s, cfg.scrub_interval_s,
                                     first_delay_s=min(cfg.scrub_first_delay_s, cfg.scrub_interval_s))
            self.scrubber.start()

    # ================================================================== damage found while running
    def add_commit_log_damage_listener(self, fn: Callable[[list[CorruptRecord]], None]) -> None:
        """``fn(records)`` hears of every damaged commit-log range the scrubber or a read finds (from their thread;
        must not block long). The replicated repair path registers here to fetch the range from a healthy peer."""
        self._damage_listeners = [*self._damage_listeners, fn]

    def report_commit_log_damage(self, records: list[CorruptRecord]) -> None:
        """Damaged commit-log ranges found while running (scrubber, reads): counted, logged, kept for ``stats``
        and ``cluster status``, handed to the listeners. Nothing is cut or overwritten here."""
        with self._damage_lock:
            known = self.commit_log_damage
            # a range seen again (next pass, next read; the scrubber and a read may bound it differently) counts once
            new = [r for r in records if not any(k.start < r.end and r.start < k.end for k in known)]
            self.corruption_found["commitlog"] += len(new)
            self.commit_log_damage = [*self.commit_log_damage, *new]
        for r in new:
            log.critical("store %s: commit-log damage: %s", self.config.root_dir, r.describe())
        if new and not self._damage_listeners:
            log.critical("store %s: no repair path is registered for commit-log damage: run `raftmq store check` "
                         "and `raftmq store repair` on a stopped node (single node), or restart it to repair "
                         "from peers", self.config.root_dir)
        for fn in self._damage_listeners:
            try:
                fn(list(records))
            except Exception:
                log.exception("commit-log damage listener %r failed", fn)

    def commit_log_repaired(self, records: Sequence[CorruptRecord]) -> None:
        """The repair path rewrote ``records`` (byte-identical to a peer's): verify them through the store's own
        mapping, forget those now intact, and rebuild consume-queue units derived from the damaged bytes."""
        cl = self._check_open()
        still: list[CorruptRecord] = []
        for r in records:
            mf = cl.mapped_file_queue.find_mapped_file_by_offset(r.start)
            if mf is None:
                continue
            base = mf.file_from_offset
            still += verify_records(mf.buffer, base, r.start - base, r.end - base, mf.path)
            self.commit_log_checked(r.start, r.end, still)
        if records:
            lo, hi = min(r.start for r in records), max(r.end for r in records)
            found = check_consume_queues(cl, self.consume_queues, lo, min(hi, self.reput.reput_from_offset)
                                         if self.reput is not None else hi, topic_exists=self._topic_has_queues)
            if found.damage or found.wrong_units:
                self.rebuild_derived(list(found.damage.values()), found_by="repair", wrong_units=found.wrong_units)
        if still:
            log.error("store %s: still damaged after the repair: %s", self.config.root_dir,
                      "; ".join(r.describe() for r in still))

    def damaged_records_in(self, start: int, end: int) -> list[CorruptRecord]:
        """Damaged records in ``[start, end)`` (``start`` a record boundary) as the checks find them now (repair
        paths: is the damage gone?)."""
        cl = self._check_open()
        mf = cl.mapped_file_queue.find_mapped_file_by_offset(start)
        if mf is None:
            return []
        base = mf.file_from_offset
        return verify_records(mf.buffer, base, start - base, min(end - base, mf.file_size), mf.path)

    def commit_log_checked(self, start: int, end: int, damaged: Sequence[CorruptRecord]) -> None:
        """``[start, end)`` of the commit log was just verified and ``damaged`` is what is still wrong in it:
        earlier reports inside the range that are gone now (repaired) are forgotten."""
        still = {(r.start, r.end) for r in damaged}
        with self._damage_lock:
            self.commit_log_damage = [r for r in self.commit_log_damage
                                      if not start <= r.start < end or (r.start, r.end) in still]

    def _rewrite_units(self, wrong: Sequence[tuple[tuple[str, int], int, tuple[int, int, int]]],
                       found_by: str) -> None:
        """Write the right bytes over consume-queue units that hold wrong ones (counted once per queue)."""
        queues: dict[tuple[str, int], list[int]] = {}
        for key, index, unit in wrong:
            cq = self.consume_queues.get(*key)
            if cq is not None and cq.rewrite_unit(index, unit):
                queues.setdefault(key, []).append(index)
        for (topic, qid), indexes in queues.items():
            shown = ", ".join(map(str, indexes[:10])) + (" ..." if len(indexes) > 10 else "")
            desc = (f"consume queue {topic}-{qid}: {len(indexes)} unit(s) held wrong bytes (queue offsets {shown}); "
                    "rewritten from the commit log")
            log.error("store %s: %s (found by the %s)", self.config.root_dir, desc, found_by)
            self.derived_damage.append(desc)
            self.corruption_found["consumequeue"] += 1

    def rebuild_derived(self, queue_damage: Sequence[QueueDamage], *, index_damage: Sequence[IndexDamage] = (),
                        found_by: str = "check", wrong_units: Sequence[tuple[tuple[str, int], int,
                                                                             tuple[int, int, int]]] = ()) -> int:
        """Rebuild damaged consume queues (from each first bad unit) and index files (from the first damaged one)
        by re-dispatching the commit log through reput; returns the offset dispatch restarts at."""
        cl = self._check_open()
        assert self.reput is not None
        with self.reput.paused():
            self._rewrite_units(wrong_units, found_by)
            restart = self.reput.reput_from_offset
            for d in queue_damage:
                log.error("store %s: %s (found by the %s); rebuilding from the commit log", self.config.root_dir,
                          d.describe(), found_by)
                self.corruption_found["consumequeue"] += 1
                cq = self.consume_queues.get(d.topic, d.queue_id)
                if cq is not None:
                    cq.cut_at(d.queue_offset)
                restart = min(restart, d.commit_log_offset)
            if index_damage and self.index_service is not None:
                for d in index_damage:
                    log.error("store %s: %s (found by the %s); rebuilding the index from there",
                              self.config.root_dir, d.describe(), found_by)
                self.corruption_found["index"] += len(index_damage)
                restart = min(restart, self.index_service.drop_from(index_damage[0].position))
            self.reput.reput_from_offset = max(restart, cl.min_offset)
        return self.reput.reput_from_offset

    def _retention_protect_offset(self) -> int:
        """Retention never deletes what reput has not dispatched or what ``retain_from`` still needs."""
        assert self.reput is not None
        protect = self.reput.reput_from_offset
        if self.retain_from is not None:
            protect = min(protect, self.retain_from())
        return min(protect, self._timer_protect_offset())

    def _timer_protect_offset(self) -> int:
        """The commit-log offset of the oldest timer message not yet delivered (the unit at the replicated
        progress's ``low``): a timer may wait up to ``timer_max_delay_seconds``, longer than the segment holding
        it would otherwise be kept, and retention must not delete an acknowledged message before it is delivered.
        The same on every member (replicated progress), so retention keeps the logs identical."""
        from raftmq.store.message import TIMER_TOPIC

        cq = self.consume_queues.get(TIMER_TOPIC, 0)
        if cq is None:
            return 1 << 62
        low = max(self.timer_progress.get()[0], cq.get_min_offset_in_queue())
        units = cq.read_units(low, 1) if low < cq.get_max_offset_in_queue() else []
        return units[0][0] if units else 1 << 62

    def _flush_commit_log(self, least_pages: int = 0) -> int:
        """The commit log's flush, guarded: after an I/O error nothing is ever reported durable again (Linux
        marks the failed pages clean, so a retried fsync would "succeed" over lost data)."""
        cl = self.commit_log  # also the final flush of shutdown, after the store stopped taking calls
        assert cl is not None
        if self.disk.io_error_reason():
            raise StorageIOError(self.disk.io_error_reason())
        before = self.before_commit_log_flush
        if before is not None and cl.has_unflushed(least_pages):
            before()
        try:
            return cl.flush(least_pages) if least_pages else cl.flush_all()
        except OSError as e:  # any errno, ENOSPC included: written pages were lost, not merely refused
            self.disk.record_io_error(e, self.config.commit_log_dir)
            raise

    def _flush_commit_log_all(self) -> int:
        return self._flush_commit_log(0)

    def _flush_consume_queues(self, least_pages: int) -> None:
        """FlushConsumeQueueService: on a thorough pass, persist the logics timestamp captured before the flush."""
        ckpt = self.checkpoint
        logics_ts = ckpt.logics_msg_timestamp if ckpt is not None else 0
        try:
            if least_pages == 0:
                self.consume_queues.flush_all()
            else:
                self.consume_queues.flush(least_pages)
        except OSError as e:  # as for the commit log: a failed writeback is an I/O error whatever its errno
            self.disk.record_io_error(e, self.config.consume_queue_dir)
            raise
        if least_pages == 0 and ckpt is not None:
            ckpt.logics_msg_timestamp = max(ckpt.logics_msg_timestamp, logics_ts)
            ckpt.flush()

    def _touch_abort(self) -> None:
        with open(self.config.abort_path, "wb") as f:
            os.fsync(f.fileno())
        fsync_dir(self.config.root_dir)

    def shutdown(self) -> None:
        """Stop threads, flush everything, remove ``abort`` when dispatch caught up, release the lock."""
        with self._opening:
            if not self._open:
                return
            self._open = False
            caught_up = False
            try:
                if self.scrubber is not None:
                    self.scrubber.shutdown()
                    self.scrubber = None
                if self.retention is not None:
                    self.retention.shutdown()
                if self.reput is not None:
                    self.reput.shutdown(drain_timeout=self.config.shutdown_dispatch_wait_seconds)
                    caught_up = self.reput.dispatch_behind_bytes() == 0 and self.reput.index_behind_bytes() == 0
                for s in reversed(self._services):
                    s.shutdown()
                self._services = []
                self._flush_everything()
                if caught_up:  # before the abort marker goes: the next start checks only what is new
                    self._write_dispatch_marker()
                if self.checkpoint is not None:
                    self.checkpoint.shutdown()
                self.consumer_offsets.persist()
                self.delay_offsets.persist(only_if_dirty=True)
                self.timer_progress.persist(only_if_dirty=True)
                self.pop_state.persist(only_if_dirty=True)
            finally:
                self._close_files()
                self.topics.close()
                if caught_up:
                    try:
                        os.unlink(self.config.abort_path)
                        fsync_dir(self.config.root_dir)
                    except FileNotFoundError:
                        pass
                else:
                    log.warning("store %s: dispatch not caught up at shutdown; next open recovers abnormally",
                                self.config.root_dir)
                self._lock.release()

    def _write_dispatch_marker(self) -> None:
        assert self.reput is not None
        queues = {f"{cq.topic}/{cq.queue_id}": cq.known_range() for cq in self.consume_queues.queues()
                  if cq.has_files()}
        index = [f.file_name for f in self.index_service.index_files] if self.index_service is not None else []
        try:
            dispatch_marker.write(self.config.root_dir, dispatch_marker.DispatchMarker(self.reput.reput_from_offset,
                                                                                       queues, index))
        except OSError as e:  # the next start checks the whole log instead
            log.warning("store %s: cannot write %s: %s", self.config.root_dir, dispatch_marker.FILE_NAME, e)

    def _close_files(self) -> None:
        if self.index_service is not None:
            self.index_service.close()
        self.consume_queues.close()
        if self.commit_log is not None:
            self.commit_log.close()

    def _flush_everything(self) -> None:
        cl = self.commit_log
        if cl is not None:
            cl.flush_all()
        self.consume_queues.flush_all()
        if self.index_service is not None:
            self.index_service.flush()
        if self.checkpoint is not None and self.reput is not None and self.reput.dispatch_behind_bytes() == 0:
            self.checkpoint.logics_msg_timestamp = max(self.checkpoint.logics_msg_timestamp,
                                                       self.checkpoint.physic_msg_timestamp)
        if self.checkpoint is not None:
            self.checkpoint.flush()

    def flush(self) -> None:
        """Make everything written so far durable (commit log, consume queues, index, checkpoint, offsets)."""
        self._check_open()
        self._flush_everything()
        self.consumer_offsets.persist(only_if_dirty=True)
        self.delay_offsets.persist(only_if_dirty=True)
        self.timer_progress.persist(only_if_dirty=True)
        self.pop_state.persist(only_if_dirty=True)

    @property
    def is_open(self) -> bool:
        return self._open

    def _check_open(self) -> CommitLog:
        if not self._open or self.commit_log is None:
            raise StoreClosedError(f"store {self.config.root_dir} is not open")
        return self.commit_log

    def __enter__(self) -> MessageStore:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ================================================================== writes
    def check_writable(self) -> None:
        """Raise ``DiskFullError`` / ``StorageIOError`` when the disk cannot take a write now (reads still work)."""
        self.disk.check_writable()
        if self.retention is not None and self.retention.disk_full:
            raise DiskFullError(
                f"disk full on {self.disk.member}: {self.config.root_dir} is more than "
                f"{self.config.disk_space_warning_level_ratio:.0%} used, {max(self.disk.free, 0)} bytes free; "
                "writes are refused until retention frees space (lower file_reserved_time) or the disk grows"
            )

    _check_writable = check_writable

    @contextlib.contextmanager
    def _disk_writes(self) -> Iterator[None]:
        """Tell ``disk`` about a commit-log write the filesystem refused (ENOSPC: until space is back; EIO: for
        good), then let the error through."""
        try:
            yield
        except (DiskFullError, OSError) as e:
            cfg = self.config
            self.disk.record_error(e, cfg.commit_log_dir,
                                   cfg.mapped_file_size_commit_log if cfg.preallocate else 0)
            if isinstance(e, DiskFullError):
                raise DiskFullError(self.disk.reason() or str(e)) from e
            raise StorageIOError(self.disk.reason() or str(e)) from e

    def put_message(self, msg: Message) -> PutResult:
        return self.put_messages([msg])[0]

    def put_messages(self, msgs: Sequence[Message]) -> list[PutResult]:
        """Store ``msgs`` as one contiguous append (single-node write path)."""
        cl = self._check_open()
        self._check_writable()
        now = _now_ms()
        cluster = self.config.cluster_name
        stored = to_timer_messages(msgs, now, self.config.timer_max_delay_seconds * 1000, cluster, self._uniq)
        stored = to_schedule_messages(stored, self.delay_levels, cluster, self._uniq)
        with cl.put_lock, self._disk_writes():
            # the batch never leaves this process: no frame, no frame CRC
            batch = cl.encode(stored, now, self._store_host, cluster)
            results = cl.apply_decoded(batch)
        self._after_append(len(results), len(batch.payload))
        for r, m in zip(results, msgs, strict=True):
            r.uniq_key = m.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if self._group_commit is not None and results:
            end = results[-1].physical_offset + results[-1].wrote_bytes
            if not self._group_commit.wait_for_flush(end, self.config.sync_flush_timeout / 1000.0):
                for r in results:
                    r.status = PutStatus.FLUSH_DISK_TIMEOUT
        return results

    def encode_batch(self, msgs: Sequence[Message], store_timestamp: int | None = None,
                     store_host: tuple[str, int] | None = None, cluster_name: str | None = None) -> bytes:
        """Leader half of the write path: validate + encode (offsets 0), see ``CommitLog.encode_batch``."""
        cl = self._check_open()
        self._check_writable()
        cluster = self.config.cluster_name if cluster_name is None else cluster_name
        now = _now_ms() if store_timestamp is None else store_timestamp
        # timers -> rmq_sys_wheel_timer, delayed -> SCHEDULE_TOPIC_XXXX
        msgs = to_timer_messages(msgs, now, self.config.timer_max_delay_seconds * 1000, cluster, self._uniq)
        msgs = to_schedule_messages(msgs, self.delay_levels, cluster, self._uniq)
        return cl.encode_batch(msgs, now, store_host or self._store_host, cluster)

    def apply_batch(self, batch: bytes | bytearray | memoryview) -> list[AppendResult]:
        """Replica half: deterministic append of an encoded batch; no flush wait (see ``wait_flushed``)."""
        cl = self._check_open()
        with self._disk_writes():
            results = cl.apply_batch(batch)
        self._after_append(len(results), sum(r.wrote_bytes for r in results))
        return results

    def _after_append(self, count: int, nbytes: int) -> None:
        """Count an append of ``count`` records, ``nbytes`` in all, and wake reput when it can use it.

        A replica applies a committed entry and then moves the confirm offset, which wakes reput itself; woken
        here as well, reput would take the GIL in the middle of the apply only to find nothing it may dispatch
        (it stops at the confirm offset), on every entry of every member."""
        self._put_batches += 1
        self._put_messages += count
        self._put_bytes += nbytes
        reput = self.reput
        assert reput is not None
        confirm = reput.confirm_offset
        if confirm is None or reput.reput_from_offset < confirm:
            reput.notify()

    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        """True once every byte below ``offset`` is on disk (group commit in SYNC mode, a flush otherwise)."""
        cl = self._check_open()
        if self._group_commit is not None:
            return self._group_commit.wait_for_flush(offset, timeout_s)
        return cl.flush_all() >= offset

    @property
    def flushed_offset(self) -> int:
        cl = self.commit_log
        return cl.flushed_where if cl is not None else 0

    # ================================================================== replication support
    @property
    def confirm_offset(self) -> int:
        """Reput dispatches up to here (default: the end of the commit log)."""
        assert self.reput is not None and self.commit_log is not None
        c = self.reput.confirm_offset
        return self.commit_log.max_offset if c is None else c

    @confirm_offset.setter
    def confirm_offset(self, offset: int | None) -> None:
        assert self.reput is not None
        self.reput.confirm_offset = offset

    @property
    def commit_log_max_offset(self) -> int:
        return self.commit_log.max_offset if self.commit_log is not None else 0

    @property
    def commit_log_min_offset(self) -> int:
        return self.commit_log.min_offset if self.commit_log is not None else 0

    def read_commit_log(self, offset: int, max_bytes: int) -> bytes:
        """Whole records from ``offset`` (within one segment; a closing blank record included)."""
        cl = self._check_open()
        if offset < cl.min_offset or offset > cl.max_offset:
            raise StoreError(f"offset {offset} is outside the commit log [{cl.min_offset}, {cl.max_offset}]")
        return cl.read_raw(offset, max_bytes)

    def read_commit_log_bytes(self, offset: int, max_bytes: int) -> bytes:
        """A copy of the segment bytes from ``offset``, up to ``max_bytes``, not past its segment's end nor the
        log's end; record boundaries ignored (replica checksums). Lock-free: callers read committed bytes only."""
        cl = self._check_open()
        end = cl.max_offset
        if offset < cl.min_offset or offset > end:
            raise StoreError(f"offset {offset} is outside the commit log [{cl.min_offset}, {end}]")
        mf = cl.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return b""
        try:
            return mf.read_bytes(offset - mf.file_from_offset, min(max_bytes, end - offset))
        except ValueError:  # retention unmapped the segment meanwhile
            raise StoreError(f"offset {offset} is no longer in the commit log (its segment was deleted)") from None

    def append_commit_log_raw(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Catch-up: append verified raw records that start exactly at the current end."""
        cl = self._check_open()
        self._check_writable()
        with self._disk_writes():
            cl.append_raw(offset, data)
        assert self.reput is not None
        self.reput.notify()

    def adopt_commit_log_raw(self, offset: int, data: bytes | bytearray | memoryview) -> bool:
        """Catch-up over a withheld tail: True when the log already holds exactly these verified raw records at
        ``offset`` (``CommitLog.adopt_raw``); False when it does not (the caller cuts and appends)."""
        cl = self._check_open()
        return cl.adopt_raw(offset, data)

    def replace_commit_log_range(self, start: int, data: bytes) -> None:
        """Overwrite the damaged commit-log bytes ``[start, start + len(data))`` in place with a replica's copy.

        ``data`` must be whole valid records carrying their own offsets (``integrity.chunk_problem``) that end on a
        record boundary of this log, inside one segment and below the log end; it is written and flushed under
        the put lock. Commit logs of all members are byte-identical, so consume-queue units and index entries
        that point into the range stay right.
        """
        cl = self._check_open()
        end = start + len(data)
        fs = cl.file_size
        if not data or start < cl.min_offset or end > cl.max_offset or start // fs != (end - 1) // fs:
            raise StoreError(f"cannot replace [{start}, {end}): it must be non-empty, inside one segment and "
                             f"inside the commit log [{cl.min_offset}, {cl.max_offset})")
        why = chunk_problem(start, data, fs)
        if why is not None:
            raise StoreError(f"replacement for [{start}, {end}) refused: {why}")
        with cl.put_lock:
            mf = cl.mapped_file_queue.find_mapped_file_by_offset(start)
            if mf is None:
                raise StoreError(f"commit-log segment of offset {start} is gone (retention)")
            if end % fs and not cl.is_record_boundary(end):
                raise StoreError(f"replacement for [{start}, {end}) refused: no record of this log starts at {end}")
            mf.write_at(start - mf.file_from_offset, data)
            mf.sync_to_disk()

    def overwrite_commit_log_block(self, offset: int, data: bytes) -> None:
        """Write the majority's copy of committed bytes ``[offset, offset + len(data))`` in place (anti-entropy:
        this member held them differently). Record boundaries do not matter: the caller checked the bytes against
        the SHA-256 a majority of the group holds. Inside one segment, below the log end; synced under the put
        lock."""
        cl = self._check_open()
        end = offset + len(data)
        fs = cl.file_size
        if not data or offset < cl.min_offset or end > cl.max_offset or offset // fs != (end - 1) // fs:
            raise StoreError(f"cannot overwrite [{offset}, {end}): it must be non-empty, inside one segment and "
                             f"inside the commit log [{cl.min_offset}, {cl.max_offset})")
        with cl.put_lock:
            mf = cl.mapped_file_queue.find_mapped_file_by_offset(offset)
            if mf is None:
                raise StoreError(f"commit-log segment of offset {offset} is gone (retention)")
            mf.write_at(offset - mf.file_from_offset, data)
            mf.sync_to_disk()

    def commit_log_blocks_replaced(self, runs: Sequence[tuple[int, int]]) -> None:
        """Byte ranges ``runs`` were rewritten with the majority's copy (anti-entropy, or the repair of found
        damage): ranges not yet known as damage are counted as commit-log damage; known damaged records they
        touch are verified again (and forgotten when intact, their consume-queue units re-checked)."""
        with self._damage_lock:
            known = self.commit_log_damage
            new = [r for r in runs if not any(k.start < r[1] and r[0] < k.end for k in known)]
            self.corruption_found["commitlog"] += len(new)
            touched = [k for k in known if any(k.start < b and a < k.end for a, b in runs)]
        if touched:
            self.commit_log_repaired(touched)

    def queue_offset_table(self) -> dict[str, int]:
        """Next queue offset per ``topic-queueId`` (a copy): what the next record of each queue will get."""
        cl = self._check_open()
        with cl.put_lock:
            return dict(cl.topic_queue_table)

    def merge_queue_offsets(self, table: dict[str, int]) -> None:
        """Raise next queue offsets to a peer's at the same point of the log (catch-up, snapshot install).

        A member that copied the commit log only from a peer's oldest retained segment has no record of queues
        whose messages all lay in deleted segments; without the peer's table their next message would get queue
        offset 0 here and N on the peer."""
        cl = self._check_open()
        with cl.put_lock:
            own = cl.topic_queue_table
            for key, nxt in table.items():
                if nxt > own.get(key, 0):
                    own[key] = nxt

    def truncate_to(self, offset: int) -> None:
        """Cut the commit log, consume queues and index at ``offset`` (a record boundary) and rebuild offsets."""
        cl = self._check_open()
        assert self.reput is not None
        with cl.put_lock, self.reput.paused():
            if offset > cl.max_offset:
                raise StoreError(f"cannot truncate to {offset}: the commit log ends at {cl.max_offset}")
            if offset < cl.min_offset:
                raise StoreError(f"cannot truncate to {offset}: the commit log starts at {cl.min_offset}")
            if not cl.is_record_boundary(offset):
                raise StoreError(f"cannot truncate to {offset}: no record starts there (pass a record boundary)")
            cl.truncate_dirty_files(offset)
            self._truncate_consume_queues(offset)
            if self.index_service is not None:
                self.index_service.truncate(offset)
            self.reput.reput_from_offset = min(self.reput.reput_from_offset, offset)
            c = self.reput.confirm_offset
            if c is not None and c > offset:
                self.reput.confirm_offset = offset
            self._rebuild_queue_offset_table()
            log.warning("store %s truncated to commit-log offset %d", self.config.root_dir, offset)

    def withhold_tail(self, offset: int) -> None:
        """Keep the commit-log bytes beyond ``offset`` on disk, but as not confirmed: consume queues and index are
        cut back to ``offset``, reput waits there, and next queue offsets are counted up to it.

        Replication calls it at start-up when the Raft entries it knows it applied account for the log only up to
        ``offset`` (after a power cut the commit log and the applied index reach the disk in any order). Those
        bytes are then proven by replaying the entries (``adopt_batch``), or cut (``truncate_to``) once an entry
        shows they are not the group's: never dropped unproven."""
        cl = self._check_open()
        assert self.reput is not None
        with cl.put_lock, self.reput.paused():
            if not cl.min_offset <= offset <= cl.max_offset or not cl.is_record_boundary(offset):
                raise StoreError(f"cannot withhold the commit log beyond {offset}: it must be a record boundary in "
                                 f"[{cl.min_offset}, {cl.max_offset}]")
            self._truncate_consume_queues(offset)
            if self.index_service is not None:
                self.index_service.truncate(offset)
            self.reput.reput_from_offset = min(self.reput.reput_from_offset, offset)
            self.reput.confirm_offset = offset
            self._rebuild_queue_offset_table(upto=offset)
        log.warning("store %s: commit log [%d, %d) kept but withheld until the Raft log confirms it",
                    self.config.root_dir, offset, cl.max_offset)

    def confirm_withheld(self, offset: int) -> None:
        """The withheld commit-log bytes up to ``offset`` (a record boundary) were proven the group's (a peer's
        digests of them match): their records count for the next queue offsets, and reput dispatches them once
        ``confirm_offset`` passes them. Nothing is written; the bytes beyond ``offset`` stay withheld."""
        cl = self._check_open()
        assert self.reput is not None
        with cl.put_lock, self.reput.paused():
            if not self.reput.reput_from_offset <= offset <= cl.max_offset or not cl.is_record_boundary(offset):
                raise StoreError(f"cannot confirm the withheld commit log up to {offset}: it must be a record "
                                 f"boundary in [{self.reput.reput_from_offset}, {cl.max_offset}]")
            self._rebuild_queue_offset_table(upto=offset)

    def adopt_batch(self, batch: bytes | bytearray | memoryview, at: int) -> list[AppendResult] | None:
        """Results of applying ``batch`` at ``at`` when the withheld commit log already holds exactly the bytes the
        apply would write (``CommitLog.match_batch``); None when it does not. Nothing is written either way."""
        cl = self._check_open()
        return cl.match_batch(cl.parse_batch(batch), at)

    # ================================================================== reads
    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
                     max_bytes: int = 4 << 20, tag_filter: TagFilter | None = None,
                     message_filter: SqlFilter | None = None) -> GetResult:
        """Pull up to ``max_count`` messages from queue offset ``offset`` (RocketMQ ``getMessage``);
        ``message_filter`` (SQL92 on properties) is compiled once by the caller and run on each decoded message.

        Every unit used is compared with the record it points at (``store.queue_units``); a wrong one is rebuilt
        from the commit log before the answer. When that is impossible the pull returns the messages before it
        and the next pull (starting at it) fails with ``ConsumeQueueUnitError``: a unit is never skipped."""
        cl = self._check_open()
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=0)
        min_o, max_o = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        if max_o == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, min_o, max_o)
        if offset < min_o:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, [], min_o, min_o, max_o)
        if offset == max_o:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, min_o, max_o)
        if offset > max_o:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], min_o if min_o == 0 else max_o, min_o, max_o)
        for _round in range(HEAL_ROUNDS):
            got, bad = self._read_queue(cl, cq, offset, max_count, max_bytes, tag_filter, message_filter)
            if bad is None:
                return got
            qo, problem = bad
            why = self.heal_queue_units(topic, queue_id, qo)
            if why:
                if got.messages:  # the good ones before it; the next pull starts at the wrong unit and fails
                    return got
                raise ConsumeQueueUnitError(
                    f"consume queue {topic}-{queue_id}: the unit at queue offset {qo} {problem}, and it could not be "
                    f"rebuilt from the commit log ({why}); the read stops there rather than skip a message. Run "
                    f"`raftmq store check {self.config.root_dir}` (a replicated member repairs the commit log from "
                    "its peers)")
        return got

    def _read_queue(self, cl: CommitLog, cq, offset: int, max_count: int, max_bytes: int,
                    tag_filter: TagFilter | None, message_filter: SqlFilter | None
                    ) -> tuple[GetResult, tuple[int, str] | None]:
        """One pass of ``get_messages`` from ``offset``: the result up to the first wrong unit, and that unit's
        queue offset and problem (None when every unit used was right)."""
        topic, queue_id = cq.topic, cq.queue_id
        min_o, max_o = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        units = cq.read_units(offset, max(MAX_FILTER_UNITS, max_count))
        if not units:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, [], cq.roll_next_file(offset), min_o, max_o), None
        status = GetStatus.NO_MATCHED_MESSAGE
        messages: list[MessageExt] = []
        size_total = 0
        cl_min = cl.min_offset
        consumed = 0
        check_crc = self.config.check_crc_on_read
        seen_live = False  # a unit above the log's first offset was met: later ones cannot be below it

        def result() -> GetResult:
            return GetResult(status, messages, offset + consumed, min_o, max_o)

        for unit in units:
            phy, size, tags_code = unit
            if len(messages) >= max_count or (messages and size_total + size > max_bytes):
                break
            qo = offset + consumed
            consumed += 1
            if size == BLANK_UNIT_SIZE:
                if (phy, tags_code) != (0, 0):
                    consumed -= 1
                    return result(), (qo, f"is a blank unit with offset {phy} and tags {tags_code}")
                continue
            if phy < cl_min and not seen_live and phy >= 0 and size > 0:
                if not messages:
                    status = GetStatus.MESSAGE_WAS_REMOVING
                continue
            seen_live = True
            raw = cl.get_message(phy, size) if phy >= 0 and size > 0 else None
            if raw is None:
                if 0 <= phy < cl.min_offset:  # retention deleted its segment meanwhile
                    if not messages:
                        status = GetStatus.MESSAGE_WAS_REMOVING
                    continue
                consumed -= 1
                return result(), (qo, f"points at [{phy}, {phy + size}), not inside the commit log "
                                      f"[{cl.min_offset}, {cl.max_offset})")
            filtered = (tag_filter is not None and not tag_filter.matches_code(tags_code)) or (
                message_filter is not None and not message_filter.matches_code(tags_code))
            if filtered:  # skipped by its tags code: that code must be the record's, or a message is skipped
                problem = raw_unit_problem(cl, raw, topic, queue_id, qo, unit)
                if problem and problem != RESERVED:
                    consumed -= 1
                    return result(), (qo, problem)
                continue
            r = decode_record(raw, 0, check_crc=check_crc)
            if r.message is None or r.message.physical_offset != phy:
                problem = raw_unit_problem(cl, raw, topic, queue_id, qo, unit)
                consumed -= 1
                if problem:  # the unit points at the wrong place, not at its damaged record
                    return result(), (qo, problem)
                bad = self._corrupt_read(raw, phy)
                if messages or bad is None:  # what precedes it; the next pull starts at the damaged one and fails
                    return result(), None
                raise bad
            m = r.message
            problem = message_problem(m, r.size, topic, queue_id, qo, unit,
                                      read_fields(cl, raw).tags_code if m.topic in TIMED_TOPICS else None)
            if problem == RESERVED:
                continue
            if problem:
                consumed -= 1
                return result(), (qo, problem)
            if tag_filter is not None and not tag_filter.matches_tags(m.tags):
                continue
            if message_filter is not None and not message_filter.matches_message(m):
                continue
            messages.append(m)
            size_total += size
            status = GetStatus.FOUND
        return result(), None

    def heal_queue_units(self, topic: str, queue_id: int, queue_offset: int,
                         max_walk: int | None = MAX_HEAL_WALK_BYTES) -> str:
        """Rebuild the wrong units around ``queue_offset`` from the commit log (``store.queue_units``); returns ""
        when the unit there is right afterwards, else why it is not. The commit log walked is bounded by the
        nearest right units on both sides; beyond ``max_walk`` bytes the rebuild continues in the background."""
        cl = self._check_open()
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return "the queue no longer exists"
        with self._heal_lock:
            if unit_problem(cl, topic, queue_id, queue_offset, cq.unit_at(queue_offset)) in ("", RESERVED):
                return ""
            lo_q, lo_phy = self._right_neighbour(cl, cq, queue_offset, -1)
            hi_q, hi_phy = self._right_neighbour(cl, cq, queue_offset, 1)
            if max_walk is not None and hi_phy - lo_phy > max_walk:
                self._heal_in_background(topic, queue_id, queue_offset)
                return (f"its record lies in [{lo_phy}, {hi_phy}) of the commit log, more than {max_walk} bytes to "
                        "walk during a read; it is being rebuilt in the background: retry in a while")
            right, stopped = units_from_log(cl, topic, queue_id, lo_phy, hi_phy, range(lo_q + 1, hi_q))
            wrong = [((topic, queue_id), q, u) for q, u in sorted(right.items()) if cq.unit_at(q) != u]
            if wrong:
                assert self.reput is not None
                with self.reput.paused():
                    self._rewrite_units(wrong, "read")
            if queue_offset in right:
                return ""
            key = (topic, queue_id, queue_offset)
            if key not in self._unhealed_units:
                self._unhealed_units.add(key)
                self.corruption_found["consumequeue"] += 1
            where = f"no record of queue offset {queue_offset} in [{lo_phy}, {hi_phy})"
            if stopped < hi_phy:  # the commit log is damaged where its record lies: that is found damage too
                where = f"an unreadable record at commit-log offset {stopped} stopped the walk"
                self._report_damage_at(stopped, hi_phy)
            log.error("store %s: consume queue %s-%d: the unit at queue offset %d cannot be rebuilt: %s",
                      self.config.root_dir, topic, queue_id, queue_offset, where)
            return where

    def _report_damage_at(self, start: int, end: int) -> None:
        """Verify the records of ``start``'s segment from there (to ``end`` at most) and report what is damaged."""
        assert self.commit_log is not None
        mf = self.commit_log.mapped_file_queue.find_mapped_file_by_offset(start)
        if mf is None:
            return
        base = mf.file_from_offset
        damage = verify_records(mf.buffer, base, start - base, min(end - base, mf.wrote_position), mf.path)
        if damage:
            self.report_commit_log_damage(damage)

    def _right_neighbour(self, cl: CommitLog, cq, queue_offset: int, step: int) -> tuple[int, int]:
        """The nearest unit before (``step`` -1) or after (+1) ``queue_offset`` that points at its record, and
        the commit-log bound it gives (the end of its record / its start); the queue's end (or the log's first
        offset, or the dispatched end) when none is found within ``MAX_HEAL_SCAN_UNITS`` units."""
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        q = queue_offset + step
        for _ in range(MAX_HEAL_SCAN_UNITS):
            if not lo <= q < hi:
                break
            unit = cq.unit_at(q)
            if unit is not None and unit[1] != BLANK_UNIT_SIZE and unit[0] >= cl.min_offset and \
                    unit_problem(cl, cq.topic, cq.queue_id, q, unit) == "":
                return q, (unit[0] + unit[1] if step < 0 else unit[0])
            q += step
        if step < 0:
            return q, cl.min_offset
        assert self.reput is not None
        return max(q, queue_offset + 1), self.reput.reput_from_offset

    def _heal_in_background(self, topic: str, queue_id: int, queue_offset: int) -> None:
        key = (topic, queue_id, queue_offset)
        if key in self._healing:
            return
        self._healing.add(key)

        def run() -> None:
            try:
                self.heal_queue_units(topic, queue_id, queue_offset, max_walk=None)
            except StoreError as e:
                log.error("store %s: rebuilding consume queue %s-%d failed: %s", self.config.root_dir, topic,
                          queue_id, e)
            finally:
                self._healing.discard(key)

        threading.Thread(target=run, name="queue-unit-heal", daemon=True).start()

    def reserve_queue_offsets(self, topic: str, queue_id: int, upto: int) -> None:
        """Pad the queue with blank units up to queue offset ``upto`` (``store repair``): offsets of messages
        that were lost to damage are never handed out again. Only while nothing else writes (repair)."""
        cl = self._check_open()
        with cl.put_lock:
            cq = self.consume_queues.find_or_create(topic, queue_id)
            if cq.get_max_offset_in_queue() >= upto:
                return
            cq._fill_blank_until(upto * CQ_STORE_UNIT_SIZE)
            cq.mapped_file_queue.flush_all()
            key = f"{topic}-{queue_id}"
            cl.topic_queue_table[key] = max(cl.topic_queue_table.get(key, 0), upto)

    def query_messages(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[MessageExt]:
        """Messages whose KEYS or UNIQ_KEY equal ``key``, stored within [begin_ms, end_ms], oldest first."""
        cl = self._check_open()
        if self.index_service is None:
            raise StoreError("message index is disabled (message_index_enable=false): query by key is unavailable")
        # the index keeps whole seconds since its file's begin time (an entry reads as up to 999 ms early):
        # widen the window for the index, then filter on the exact store timestamp below
        found = self.index_service.query_offset(topic, key, max_num, begin_ms - 999, end_ms)
        out: list[MessageExt] = []
        for phy in sorted(set(found.phy_offsets)):
            size = cl.get_record_size(phy)
            if size <= 0:
                continue
            raw = cl.get_message(phy, size)
            if raw is None:
                continue
            m = decode_record(raw, 0, check_crc=self.config.check_crc_on_read).message
            if m is None or m.physical_offset != phy:
                bad = self._corrupt_read(raw, phy)
                if bad is not None:
                    raise bad
                continue
            if m.topic != topic or not begin_ms <= m.store_timestamp <= end_ms:
                continue
            if key in m.keys or m.uniq_key == key:
                out.append(m)
        return out

    def view_message(self, physical_offset: int) -> MessageExt | None:
        """The message whose record starts at ``physical_offset``, or None (also beyond the confirm offset: bytes
        not confirmed yet are not served)."""
        cl = self._check_open()
        if physical_offset >= self.confirm_offset:
            return None
        size = cl.get_record_size(physical_offset)
        if size <= 0:
            return None
        raw = cl.get_message(physical_offset, size)
        if raw is None:
            return None
        m = decode_record(raw, 0, check_crc=self.config.check_crc_on_read).message
        if m is None or m.physical_offset != physical_offset:
            bad = self._corrupt_read(raw, physical_offset)
            if bad is not None:
                raise bad
        if m is not None and is_quarantine_record(m.topic, m.properties):
            return None  # a filler or tombstone over damaged bytes (store repair): the message that was here is gone
        return m

    def _corrupt_read(self, raw: bytes, offset: int) -> CorruptReadError | None:
        """The error for a damaged record read at ``offset`` (None when ``offset`` is no record start at all:
        a wrong pointer, not damaged data). Counted in ``corrupt_reads``."""
        assert self.commit_log is not None
        mf = self.commit_log.mapped_file_queue.find_mapped_file_by_offset(offset)
        path = mf.path if mf is not None else self.config.commit_log_dir
        bad = check_read(raw, offset, path, self.config.check_crc_on_read)
        if bad is None:
            return None
        self.corrupt_reads += 1
        log.error("read refused: %s", bad.describe())
        self.report_commit_log_damage([bad])  # counted and shown like the scrubber's findings; repair listeners
        return CorruptReadError(bad)

    def view_message_by_id(self, msg_id: str) -> MessageExt | None:
        """Resolve an offset msgId (any node resolves any id: the offset is the same everywhere)."""
        _host, offset = decode_message_id(msg_id)
        return self.view_message(offset)

    def get_offset_by_time(self, topic: str, queue_id: int, ts_ms: int) -> int:
        cl = self._check_open()
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(ts_ms, cl.store_timestamp_at, cl.min_offset)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq is not None else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq is not None else 0

    def queue_ids(self, topic: str) -> list[int]:
        return self.consume_queues.queue_ids(topic)

    def dispatch_behind_bytes(self) -> int:
        return self.reput.dispatch_behind_bytes() if self.reput is not None else 0

    def records_since(self, since_ms: int, end: int) -> Iterator[tuple[int, int, str, str]]:
        """(physical offset, store time, topic, properties string) of the records below ``end`` stored at
        ``since_ms`` or later, and possibly a few older ones, in log order; the properties string is RocketMQ's
        (``string_to_properties`` parses it). Store times never decrease along the log
        (``CommitLog.monotonic_store_timestamp``), so the scan starts at the last segment whose first record is
        older than ``since_ms``. Bytes that are not whole records end a segment's scan (a torn or damaged record);
        the next segment goes on. Light on purpose: a restart reads a whole de-duplication window this way."""
        cl = self._check_open()
        files = list(cl.mapped_file_queue.mapped_files)
        start = 0
        for i, mf in enumerate(files):
            size = cl.get_record_size(mf.file_from_offset)
            ts = cl.store_timestamp_at(mf.file_from_offset, size) if size > 0 else -1
            if 0 <= ts < since_ms:
                start = i
        for mf in files[start:]:
            if mf.file_from_offset >= end:
                break
            data = cl.get_data(mf.file_from_offset, end)
            if data is None:
                continue
            pos, limit = 0, len(data)
            while pos < limit:
                try:
                    status, size, _reason, parts = check_frame(data, pos, limit, False)
                except (struct.error, IndexError, ValueError):
                    break
                if parts is None:
                    break  # a blank record (end of segment) or bytes that are not a record
                f, _bw, _body_pos, _body_len, tpos, topic_len, ppos, props_len = parts
                if f[11] >= since_ms:
                    topic = bytes(data[tpos + 1:tpos + 1 + topic_len]).decode("utf-8", "replace")
                    props = bytes(data[ppos + 2:ppos + 2 + props_len]).decode("utf-8", "replace")
                    yield f[6], f[11], topic, props
                pos += size

    def add_arrival_listener(self, fn: Callable[[str, int, int], None]) -> None:
        """``fn(topic, queue_id, max_offset)`` from the reput thread, once per queue per pass; must not block."""
        assert self.reput is not None, "open the store first"
        self.reput.add_arrival_listener(fn)

    def delete_topic_files(self, topic: str) -> None:
        """Drop the consume queues and queue offsets of a deleted topic."""
        cl = self._check_open()
        assert self.reput is not None
        with cl.put_lock, self.reput.paused():
            self.consume_queues.delete_topic(topic)
            prefix = topic + "-"
            for key in [k for k in cl.topic_queue_table if k.startswith(prefix) and k[len(prefix):].isdigit()]:
                del cl.topic_queue_table[key]

    # ================================================================== stats
    def disk_used_ratio(self) -> float:
        try:
            u = shutil.disk_usage(self.config.root_dir)
        except OSError:
            return 0.0
        return (u.total - u.free) / u.total if u.total else 0.0

    def stats(self) -> dict[str, object]:
        cl = self.commit_log
        reput = self.reput
        return {
            "commit_log_min_offset": self.commit_log_min_offset,
            "commit_log_max_offset": self.commit_log_max_offset,
            "commit_log_flushed_offset": self.flushed_offset,
            "confirm_offset": self.confirm_offset if reput is not None and cl is not None else 0,
            "dispatch_behind_bytes": self.dispatch_behind_bytes(),
            "index_behind_bytes": reput.index_behind_bytes() if reput is not None else 0,
            "dispatched_messages": reput.dispatched_messages if reput is not None else 0,
            "dispatch_last_error": reput.last_error if reput is not None else "",
            "put_messages_total": self._put_messages,
            "put_bytes_total": self._put_bytes,
            "put_batches_total": self._put_batches,
            "group_commit_flushes": self._group_commit.flush_count if self._group_commit is not None else 0,
            "commit_log_files": len(cl.mapped_file_queue.mapped_files) if cl is not None else 0,
            "consume_queues": sum(1 for _ in self.consume_queues.queues()),
            "index_files": len(self.index_service.index_files) if self.index_service is not None else 0,
            "topics": len(self.topics),
            "disk_used_ratio": self.disk_used_ratio(),
            "disk_full": self.retention.disk_full if self.retention is not None else False,
            "last_exit_ok": self.last_exit_ok,
            "delay_messages_pending": self.delay_messages_pending(),
            "corruption_found": dict(self.corruption_found),
            "commit_log_damage_ranges": len(self.commit_log_damage),
            "disk_problem": self.disk.reason(),
            **(self.scrubber.stats() if self.scrubber is not None else {}),
        }

    def integrity_summary(self) -> str:
        """One line for ``cluster status``: scrub progress and damage found (by file kind)."""
        sc = self.scrubber
        found = self.corruption_found
        damage = ", ".join(f"{n} {k}" for k, n in found.items() if n) or NO_DAMAGE
        if sc is None:
            scrub = "scrubber off"
        else:
            last = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sc.last_full_scrub_ms / 1000))
                    if sc.last_full_scrub_ms else "none yet")
            scrub = f"scrub at offset {sc.position}, {sc.bytes_scrubbed} bytes read, last full pass {last}"
        open_damage = f"; {len(self.commit_log_damage)} commit-log range(s) damaged" if self.commit_log_damage else ""
        return f"{damage}{open_damage}; {scrub}"

    def delay_messages_pending(self) -> int:
        """Delayed messages stored but not yet delivered (schedule-queue units past the delivery progress)."""
        from raftmq.store.message import SCHEDULE_TOPIC

        pending = 0
        for qid in self.consume_queues.queue_ids(SCHEDULE_TOPIC):
            cq = self.consume_queues.get(SCHEDULE_TOPIC, qid)
            if cq is not None:
                pending += max(0, cq.get_max_offset_in_queue() - self.delay_offsets.get(qid + 1))
        return pending


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _abort_is_from_this_boot(abort_path: str) -> bool:
    """True when the ``abort`` marker was written after the machine last booted (Linux ``/proc/stat``)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return os.stat(abort_path).st_mtime > boot
    except (OSError, StopIteration, ValueError, IndexError):
        return False

