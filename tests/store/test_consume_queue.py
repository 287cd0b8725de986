"""ConsumeQueue (docs/design/store-formats.md#consume-queues) with files of a few units: layout, recovery, truncation, expiry, time search."""

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftmq.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue, ConsumeQueueTable
from raftmq.store.errors import StoreLoadError

UNITS = 4
FILE = UNITS * 20


def _cq(tmp_path, topic="T", qid=0):
    return ConsumeQueue(topic, qid, str(tmp_path / "consumequeue"), FILE)


def _fill(cq, n, start=0, size=100):
    """Units for queue offsets start..start+n-1 at phy = 1000 + 100*i."""
    for i in range(start, start + n):
        assert cq.put_message_position_info(1000 + 100 * i, size, i * 7 - 3, i)


def _files(cq):
    return sorted(os.listdir(cq.queue_dir))


def test_units_layout_and_file_names(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 6)
    assert _files(cq) == [f"{0:020d}", f"{FILE:020d}"]
    raw = open(os.path.join(cq.queue_dir, f"{0:020d}"), "rb").read()
    assert len(raw) == FILE
    assert raw[:20] == struct.pack(">qiq", 1000, 100, -3)
    # negative tagsCode is sign-extended to 8 bytes
    assert raw[12:20] == bytes.fromhex("FFFFFFFFFFFFFFFD")
    second = open(os.path.join(cq.queue_dir, f"{FILE:020d}"), "rb").read()
    assert second[:20] == struct.pack(">qiq", 1400, 100, 25)
    assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (0, 6)
    assert cq.max_physic_offset == 1600
    cq.close()


def test_duplicates_are_skipped(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 3)
    assert cq.put_message_position_info(1100, 100, 4, 1)  # already built (by max phy offset)
    cq.max_physic_offset = -1
    assert cq.put_message_position_info(1100, 100, 4, 1)  # already built (by position)
    assert cq.get_max_offset_in_queue() == 3
    assert cq.read_units(0, 10) == [(1000, 100, -3), (1100, 100, 4), (1200, 100, 11)]
    cq.close()


def test_fill_pre_blank_when_a_queue_starts_mid_way(tmp_path):
    cq = _cq(tmp_path)
    assert cq.put_message_position_info(5000, 50, 9, 6)  # first file is [4, 8): units 4 and 5 are blank
    assert _files(cq) == [f"{FILE:020d}"]
    assert cq.get_min_offset_in_queue() == 6 and cq.get_max_offset_in_queue() == 7
    raw = open(os.path.join(cq.queue_dir, f"{FILE:020d}"), "rb").read()
    blank = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)
    assert raw[:40] == blank * 2
    assert raw[40:60] == struct.pack(">qiq", 5000, 50, 9)
    assert cq.get_index_buffer(5) is None  # below the minimum
    assert cq.read_units(6, 5) == [(5000, 50, 9)]
    cq.correct_min_offset(0)  # blank units never become the minimum
    assert cq.get_min_offset_in_queue() == 6
    cq.close()


def test_gap_is_filled_so_units_keep_their_positions(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 2)
    assert cq.put_message_position_info(9000, 10, 0, 5)
    units = cq.read_units(0, 10)
    assert [u[1] for u in units] == [100, 100, BLANK_UNIT_SIZE, BLANK_UNIT_SIZE, BLANK_UNIT_SIZE, 10]
    assert cq.get_unit(5) == (9000, 10, 0)
    cq.close()


def test_index_buffer_and_read_units_across_files(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 7)
    view = cq.get_index_buffer(2)
    assert len(view) == 2 * 20  # to the end of the file holding offset 2
    view.release()
    view = cq.get_index_buffer(5)
    assert len(view) == 2 * 20  # offsets 5 and 6 written in the second file
    view.release()
    assert cq.get_index_buffer(7) is None and cq.get_index_buffer(-1) is None
    assert [u[0] for u in cq.read_units(1, 5)] == [1100, 1200, 1300, 1400, 1500]
    assert cq.roll_next_file(5) == 8
    cq.close()


def test_recover_finds_the_end_and_max_physic_offset(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 10)  # three files: 4 + 4 + 2
    cq.flush_all()
    cq.close()
    again = _cq(tmp_path)
    again.load()
    again.recover()
    assert again.get_max_offset_in_queue() == 10
    assert again.max_physic_offset == 1000 + 100 * 9 + 100
    _fill(again, 2, start=10)
    assert again.read_units(9, 5) == [(1900, 100, 60), (2000, 100, 67), (2100, 100, 74)]
    again.close()


def test_recover_stops_at_a_torn_unit_and_clears_what_follows(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 3)
    cq.close()
    path = os.path.join(cq.queue_dir, f"{0:020d}")
    with open(path, "r+b") as fh:  # unit 1 gets a size of 0 (torn)
        fh.seek(20 + 8)
        fh.write(struct.pack(">i", 0))
    again = _cq(tmp_path)
    again.load()
    again.recover()
    assert again.get_max_offset_in_queue() == 1
    assert again.max_physic_offset == 1100
    again.put_message_position_info(7000, 10, 0, 1)  # unit 1 rewritten: stale unit 2 must not come back
    again.close()
    third = _cq(tmp_path)
    third.load()
    third.recover()
    assert third.read_units(0, 10) == [(1000, 100, -3), (7000, 10, 0)]
    third.close()


def test_truncated_units_do_not_come_back_after_a_restart(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 4)
    cq.truncate_dirty_logic_files(1200)  # keeps units 0 and 1
    cq.put_message_position_info(1200, 50, 0, 2)  # the log was rewritten differently after the cut
    cq.close()
    again = _cq(tmp_path)
    again.load()
    again.recover()
    assert again.read_units(0, 10) == [(1000, 100, -3), (1100, 100, 4), (1200, 50, 0)]
    again.close()


def test_recover_with_only_blank_units_does_not_invent_a_physical_offset(tmp_path):
    cq = _cq(tmp_path)
    cq.put_message_position_info(5000, 50, 0, 2)
    cq.close()
    path = os.path.join(cq.queue_dir, f"{0:020d}")
    with open(path, "r+b") as fh:  # lose the real unit, keep the blanks
        fh.seek(40)
        fh.write(bytes(20))
    again = _cq(tmp_path)
    again.load()
    again.recover()
    assert again.get_max_offset_in_queue() == 2
    assert again.max_physic_offset == -1
    again.close()


def test_truncate_dirty_logic_files(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 10)  # phy 1000..1900
    cq.truncate_dirty_logic_files(1450)  # keep units with phy < 1450: offsets 0..4
    assert cq.get_max_offset_in_queue() == 5
    assert cq.max_physic_offset == 1500
    assert _files(cq) == [f"{0:020d}", f"{FILE:020d}"]
    _fill(cq, 1, start=5)
    assert cq.get_unit(5) == (1500, 100, 32)
    cq.truncate_dirty_logic_files(1400)  # the second file's first unit is at 1400: whole file goes
    assert _files(cq) == [f"{0:020d}"]
    assert cq.get_max_offset_in_queue() == 4
    cq.truncate_dirty_logic_files(0)
    assert _files(cq) == [] and cq.get_max_offset_in_queue() == 0
    cq.close()


def test_truncate_does_not_keep_an_empty_first_unit(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 4)  # first file full
    cq.mapped_file_queue.get_last_mapped_file(0)  # an empty next file exists (rolled, nothing written)
    cq.truncate_dirty_logic_files(5000)
    assert cq.get_max_offset_in_queue() == 4
    cq.close()


def test_delete_expired_file_and_correct_min_offset(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 10)  # files [0,4) phy 1000..1300, [4,8) 1400..1700, [8,10)
    assert cq.delete_expired_file(1350) == 1
    assert _files(cq) == [f"{FILE:020d}", f"{2 * FILE:020d}"]
    assert cq.get_min_offset_in_queue() == 4
    assert cq.get_index_buffer(3) is None
    assert cq.delete_expired_file(1500) == 0  # last unit of [4,8) is 1700 >= 1500
    assert cq.get_min_offset_in_queue() == 5  # but the minimum moves within the first file
    assert cq.delete_expired_file(10**9) == 1  # never the last file
    # every unit left points below the commit log's minimum: the queue is empty, not pointing at gone files
    assert cq.get_min_offset_in_queue() == 10 and cq.get_max_offset_in_queue() == 10
    _fill(cq, 1, start=10)
    assert cq.read_units(10, 5) == [(2000, 100, 67)]
    cq.close()


def test_offset_by_store_time(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 9)
    store_ts = {1000 + 100 * i: 10_000 + 1000 * i for i in range(9)}
    calls = []

    def ts_at(phy, size):
        calls.append(phy)
        assert size == 100
        return store_ts[phy]

    assert cq.get_offset_in_queue_by_time(0, ts_at) == 0
    assert cq.get_offset_in_queue_by_time(13_000, ts_at) == 3
    assert cq.get_offset_in_queue_by_time(13_001, ts_at) == 4
    assert cq.get_offset_in_queue_by_time(18_000, ts_at) == 8
    assert cq.get_offset_in_queue_by_time(99_999, ts_at) == 9  # after everything: the next offset
    calls.clear()
    cq.get_offset_in_queue_by_time(15_500, ts_at)
    assert len(calls) <= 4  # binary search, not a scan
    # units whose message is gone from the commit log count as older
    assert cq.get_offset_in_queue_by_time(0, ts_at, min_phy_offset=1250) == 3
    assert _cq(tmp_path, qid=1).get_offset_in_queue_by_time(5, ts_at) == 0  # empty queue
    cq.close()


def test_destroy_resets(tmp_path):
    cq = _cq(tmp_path)
    _fill(cq, 5)
    cq.destroy()
    assert not os.path.exists(cq.queue_dir)
    assert cq.max_physic_offset == -1 and cq.get_max_offset_in_queue() == 0
    _fill(cq, 1)
    assert cq.get_max_offset_in_queue() == 1
    cq.close()


def test_flush_least_pages(tmp_path):
    cq = ConsumeQueue("T", 0, str(tmp_path), 4096 * 5)
    _fill(cq, 10)
    assert cq.flush(1) is True  # less than one page written: nothing to do
    assert cq.flush(0) is False  # thorough: becomes durable
    assert cq.mapped_file_queue.flushed_where == 200
    cq.close()


def test_table_load_recover_and_topics(tmp_path):
    root = str(tmp_path / "consumequeue")
    table = ConsumeQueueTable(root, FILE)
    _fill(table.find_or_create("A", 0), 3)
    _fill(table.find_or_create("A", 1), 5, start=0)
    _fill(table.find_or_create("B", 3), 2)
    assert table.find_or_create("A", 0) is table.get("A", 0)
    table.find_or_create("C", 0)  # no files until written
    table.flush_all()
    table.close()
    os.makedirs(os.path.join(root, "A", "not-a-queue"))
    with open(os.path.join(root, "stray-file"), "w") as fh:
        fh.write("x")

    again = ConsumeQueueTable(root, FILE)
    again.load()
    assert again.topics() == ["A", "B"]
    assert again.queue_ids("A") == [0, 1] and again.queue_ids("C") == []
    assert again.recover() == 1000 + 100 * 4 + 100
    assert again.max_physic_offset() == 1500
    assert again.queue_offset_table() == {"A-0": 3, "A-1": 5, "B-3": 2}
    again.truncate_dirty_logic_files(1150)
    assert again.queue_offset_table() == {"A-0": 2, "A-1": 2, "B-3": 2}
    again.delete_topic("A")
    assert again.topics() == ["B"] and not os.path.exists(os.path.join(root, "A"))
    again.destroy()
    assert again.topics() == [] and os.listdir(root) == ["stray-file"]


def test_table_load_rejects_wrong_file_size(tmp_path):
    root = str(tmp_path / "consumequeue")
    table = ConsumeQueueTable(root, FILE)
    _fill(table.find_or_create("A", 0), 3)
    table.close()
    with pytest.raises(StoreLoadError, match="segment size"):
        ConsumeQueueTable(root, FILE * 2).load()


def test_table_expiry_pauses_between_deletions(tmp_path):
    table = ConsumeQueueTable(str(tmp_path), FILE)
    for qid in range(3):
        _fill(table.find_or_create("A", qid), 9)
    pauses = []
    assert table.delete_expired_files(1500, interval_ms=100, sleep=pauses.append) == 3
    assert pauses == [0.1, 0.1, 0.1]
    assert all(cq.get_min_offset_in_queue() == 5 for cq in table.queues())
    table.close()


def _queue_bytes(cq):
    out = {}
    for name in _files(cq) if os.path.isdir(cq.queue_dir) else []:
        with open(os.path.join(cq.queue_dir, name), "rb") as f:
            out[name] = f.read()
    return out


class _QueueModel:
    """What ``putMessagePositionInfo`` leaves in a queue's files, written out unit by unit as a reference."""

    def __init__(self):
        self.units = {}  # queue offset -> (phy, size, tags)
        self.start = None  # first queue offset of the first file
        self.end = None  # next queue offset
        self.files_end = None  # queue offset where the created files end
        self.max_end = -1
        self.min_offset = 0

    def put(self, phy, size, tags, c):
        if phy + size <= self.max_end:
            return
        if self.end is None:  # the first file: fillPreBlank up to c, the queue's minimum starts at c
            self.start = self.end = self.files_end = c - c % UNITS
            self.min_offset = c
        if self.files_end == self.end:  # the last file is full (or there is none): the next one is created
            self.files_end += UNITS  # first, even when the unit then turns out to be built already
        if c < self.end:
            return
        for gap in range(self.end, c):
            self.units[gap] = (0, BLANK_UNIT_SIZE, 0)
        self.units[c] = (phy, size, tags)
        self.end = c + 1
        self.files_end = max(self.files_end, self.end + (-self.end) % UNITS)
        self.max_end = phy + size

    def files(self):
        out = {}
        if self.end is None:
            return out
        for first in range(self.start, self.files_end, UNITS):
            data = b"".join(
                struct.pack(">qiq", *self.units[i]) if i < self.end else bytes(20) for i in range(first, first + UNITS)
            )
            out[f"{first * 20:020d}"] = data
        return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 6), st.lists(st.tuples(st.sampled_from([1, 1, 1, 1, 0, 2, 3]), st.integers(1, 3),
                                             st.integers(-5, 5)), max_size=30))
def test_puts_write_what_rocketmq_writes_unit_by_unit(tmp_path_factory, first, steps):
    """Units continuing the queue (the fast branch) mixed with re-puts, gaps, a first unit past 0 and file rolls."""
    cq = ConsumeQueue("T", 0, str(tmp_path_factory.mktemp("units") / "consumequeue"), FILE)
    model = _QueueModel()
    c, phy = first - 1, 1000
    for step, size, tags in steps:  # step 1 continues the queue; 0 repeats the last unit, 2-3 leave a gap
        c, phy = max(c + step, 0), phy + 100 * step
        assert cq.put_message_position_info(phy, 50 * size, tags, c)
        model.put(phy, 50 * size, tags, c)
    assert _queue_bytes(cq) == model.files()
    assert cq.max_physic_offset == model.max_end
    assert cq.get_max_offset_in_queue() == (model.end or 0)
    if model.end is not None:
        assert cq.get_min_offset_in_queue() == model.min_offset


def test_truncate_with_an_empty_last_file_keeps_max_physic_offset_at_the_last_unit(tmp_path):
    """A kill right after a queue's next file was created leaves it empty; truncating the queue at the
    commit log's end must not treat everything below that end as built (the units the empty file was about
    to get would be skipped by re-dispatch and lost from the queue)."""
    cq = _cq(tmp_path)
    _fill(cq, UNITS)  # the first file is full: units at phy 1000..1300, last ends at 1400
    cq.mapped_file_queue.get_last_mapped_file(UNITS * 20)  # the next file, created and left empty
    assert len(_files(cq)) == 2
    cq.truncate_dirty_logic_files(5000)
    assert cq.max_physic_offset == 1400
    assert cq.put_message_position_info(1400, 100, 0, UNITS)  # written, not skipped as already built
    assert cq.get_max_offset_in_queue() == UNITS + 1
    assert cq.read_units(UNITS, 1) == [(1400, 100, 0)]
