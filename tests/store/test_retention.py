"""Retention over a real commit log, consume queues and index: age, hour, disk pressure, limits, cascade."""

import os
import time

import pytest

from raftmq.store.checkpoint import StoreCheckpoint
from raftmq.store.commit_log import CommitLog
from raftmq.store.config import StoreConfig
from raftmq.store.consume_queue import ConsumeQueueTable
from raftmq.store.index_service import IndexService
from raftmq.store.message import Message
from raftmq.store.reput import ReputMessageService
from raftmq.store.retention import RetentionService, disk_used_ratio, is_hour_to_delete

HOUR = 3_600_000
HOST = ("127.0.0.1", 10911)


def _local_hour(ms):
    return time.localtime(ms / 1000).tm_hour


class Store:
    def __init__(self, tmp_path, now_ms, ratio=0.1, **overrides):
        cfg = dict(
            root_dir=str(tmp_path),
            mapped_file_size_commit_log=4096,
            mapped_file_size_consume_queue=4 * 20,
            max_hash_slot_num=4,
            max_index_num=5,
            preallocate=False,
            delete_when=str(_local_hour(now_ms)),
            delete_commit_log_files_interval=0,
            delete_consume_queue_files_interval=0,
        )
        cfg.update(overrides)
        self.cfg = StoreConfig(**cfg)
        self.checkpoint = StoreCheckpoint(self.cfg.checkpoint_path)
        self.commit_log = CommitLog(self.cfg, self.checkpoint)
        self.commit_log.load()
        self.cqs = ConsumeQueueTable.from_config(self.cfg)
        self.index = IndexService.from_config(self.cfg, self.checkpoint)
        self.reput = ReputMessageService(self.commit_log, self.cqs, self.index)
        self.ratio = ratio
        self.retention = RetentionService(
            self.cfg, self.commit_log, self.cqs, self.index, disk_ratio=lambda path: self.ratio
        )

    def fill(self, n, ts):
        for i in range(n):
            m = Message(topic="T", queue_id=i % 2, body=b"y" * 400, properties={"KEYS": f"k{i}"})
            self.commit_log.apply_batch(self.commit_log.encode_batch([m], ts, HOST, "DefaultCluster"))
        self.reput.do_reput()

    def segments(self):
        return self.commit_log.mapped_file_queue.mapped_files

    def age_segments(self, mtime_ms):
        for mf in self.segments():
            os.utime(mf.path, (mtime_ms / 1000, mtime_ms / 1000))

    def close(self):
        self.retention.shutdown()
        self.index.close()
        self.cqs.close()
        self.commit_log.close()
        self.checkpoint.shutdown()


NOW = int(time.time() * 1000)


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path, NOW)
    yield s
    s.close()


def test_expired_segments_go_at_the_delete_hour_then_queues_and_index_follow(store):
    store.fill(60, NOW - 100 * HOUR)  # ~8 records per 4 KiB segment
    n_segments = len(store.segments())
    assert n_segments >= 8
    store.age_segments(NOW - 73 * HOUR)
    cq_files_before = sum(len(cq.mapped_file_queue.mapped_files) for cq in store.cqs.queues())
    index_files_before = len(store.index.index_files)

    result = store.retention.run_once(NOW)
    assert result.commit_log_files == n_segments - 1  # never the segment being written
    new_min = store.commit_log.min_offset
    assert new_min == store.segments()[-1].file_from_offset
    assert result.consume_queue_files > 0 and result.index_files > 0
    for cq in store.cqs.queues():
        # no remaining unit except in the (kept) last file points below the commit log
        files = cq.mapped_file_queue.mapped_files
        assert len(files) >= 1
        first_unit = cq.get_unit(cq.get_min_offset_in_queue())
        assert first_unit is None or first_unit[0] >= new_min
    assert sum(len(cq.mapped_file_queue.mapped_files) for cq in store.cqs.queues()) < cq_files_before
    assert len(store.index.index_files) < index_files_before
    assert all(f.end_phy_offset >= new_min for f in store.index.index_files[:-1])
    # keys of deleted messages no longer resolve, live ones still do
    assert store.index.query_offset("T", "k59", 5, 0, 2**62).phy_offsets != []


def test_young_segments_and_other_hours_are_left_alone(store):
    store.fill(40, NOW)
    n = len(store.segments())
    store.age_segments(NOW - 71 * HOUR)  # younger than 72 h
    assert store.retention.run_once(NOW).commit_log_files == 0
    store.age_segments(NOW - 73 * HOUR)
    other_hour = NOW + 5 * HOUR  # delete_when names NOW's hour only
    assert not is_hour_to_delete(store.cfg.delete_when, other_hour)
    assert store.retention.run_once(other_hour).commit_log_files == 0
    assert len(store.segments()) == n


def test_never_from_the_middle(store):
    store.fill(40, NOW)
    store.age_segments(NOW - 73 * HOUR)
    second = store.segments()[1]
    os.utime(second.path, (NOW / 1000, NOW / 1000))  # a young segment after the oldest
    assert store.retention.run_once(NOW).commit_log_files == 1


def test_at_most_ten_per_pass_with_pauses_between(tmp_path):
    s = Store(tmp_path, NOW, delete_commit_log_files_interval=100)
    try:
        pauses = []
        s.retention.commit_log_cleaner.sleep = pauses.append
        s.fill(120, NOW)
        assert len(s.segments()) > 12
        s.age_segments(NOW - 80 * HOUR)
        assert s.retention.run_once(NOW).commit_log_files == 10
        assert pauses == [0.1] * 9
    finally:
        s.close()


def test_disk_pressure(store):
    store.fill(40, NOW)
    n = len(store.segments())
    other_hour = NOW + 5 * HOUR
    store.ratio = 0.80  # above disk_max_used_space_ratio: expired files go at any hour, young ones stay
    assert store.retention.run_once(other_hour).commit_log_files == 0
    store.age_segments(NOW - 73 * HOUR)
    os.utime(store.segments()[3].path, (NOW / 1000, NOW / 1000))
    assert store.retention.run_once(other_hour).commit_log_files == 3
    assert not store.retention.disk_full
    store.ratio = 0.95  # above the warning level: writes should stop, and age no longer matters
    assert store.retention.run_once(other_hour).commit_log_files == min(10, n - 3 - 1)
    assert store.retention.disk_full
    store.ratio = 0.5
    store.retention.run_once(other_hour)
    assert not store.retention.disk_full


def test_manual_deletion_runs_at_any_hour(store):
    store.fill(30, NOW)
    store.age_segments(NOW - 73 * HOUR)
    store.retention.delete_files_manually()
    assert store.retention.run_once(NOW + 5 * HOUR).commit_log_files > 0


def test_protect_offset_keeps_what_is_still_needed(tmp_path):
    s = Store(tmp_path, NOW)
    try:
        s.fill(40, NOW)
        s.age_segments(NOW - 73 * HOUR)
        keep_from = s.segments()[2].file_from_offset + 10
        s.retention.commit_log_cleaner.protect_offset = lambda: keep_from
        assert s.retention.run_once(NOW).commit_log_files == 2
        assert s.commit_log.min_offset == s.segments()[0].file_from_offset <= keep_from
    finally:
        s.close()


def test_thread_runs_passes_and_stops(tmp_path):
    # The thread reads the wall clock, which may have left NOW's hour by the time this test runs.
    every_hour = ";".join(str(h) for h in range(24))
    s = Store(tmp_path, NOW, clean_resource_interval=10, delete_when=every_hour)
    try:
        s.fill(30, NOW)
        s.age_segments(NOW - 73 * HOUR)
        s.retention.start()
        deadline = time.monotonic() + 10
        while len(s.segments()) > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(s.segments()) == 1
    finally:
        s.close()


def test_delete_hours_and_disk_ratio():
    t = NOW
    h = _local_hour(t)
    assert is_hour_to_delete(f"{(h + 1) % 24};{h}", t)
    assert not is_hour_to_delete(f"{(h + 1) % 24}", t)
    assert not is_hour_to_delete("", t)
    assert 0.0 <= disk_used_ratio("/") <= 1.0
