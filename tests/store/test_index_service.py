"""IndexService: build from dispatch requests, roll files, query newest first, load, expiry, truncation."""

import os
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.store.dispatch import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    DispatchRequest,
)
from raftmq.store.errors import StoreLoadError
from raftmq.store.index_file import key_hash
from raftmq.store.index_service import IndexService
from raftmq.store.java import java_string_hash, time_millis_to_human_string

T0 = 1_700_000_000_000


class RecordingCheckpoint:
    """Stands in for StoreCheckpoint's two members the index uses (the real class is store-core's)."""

    def __init__(self, index_msg_timestamp=0):
        self.index_msg_timestamp = index_msg_timestamp
        self.flushes = 0

    def flush(self):
        self.flushes += 1


def _svc(tmp_path, slots=4, entries=4, checkpoint=None, clock=lambda: T0, **kw):
    return IndexService(str(tmp_path / "index"), slots, entries, checkpoint=checkpoint, clock=clock, **kw)


def _req(phy, ts, uniq=None, keys=None, topic="T", sys_flag=0):
    return DispatchRequest(
        topic=topic,
        commit_log_offset=phy,
        msg_size=100,
        store_timestamp=ts,
        uniq_key=uniq,
        keys=keys,
        sys_flag=sys_flag,
    )


def _entries(f):
    return [f.entry(n) for n in range(1, f.index_count)]


def test_uniq_key_first_then_each_non_empty_key(tmp_path):
    svc = _svc(tmp_path, entries=10)
    svc.build_index(_req(0, T0, uniq="U1", keys="k1  k2 "))
    (f,) = svc.index_files
    assert [e[0] for e in _entries(f)] == [key_hash("T#U1"), key_hash("T#k1"), key_hash("T#k2")]
    assert all(e[1] == 0 for e in _entries(f))
    svc.close()


def test_transaction_types_and_already_indexed_records(tmp_path):
    svc = _svc(tmp_path, entries=10)
    svc.build_index(_req(0, T0, keys="a", sys_flag=TRANSACTION_PREPARED_TYPE))
    svc.build_index(_req(100, T0, keys="b", sys_flag=TRANSACTION_ROLLBACK_TYPE))
    svc.build_index(_req(200, T0, keys="c", sys_flag=TRANSACTION_COMMIT_TYPE))
    svc.build_index(_req(0, T0, keys="a"))  # re-dispatch of an older record: skipped
    (f,) = svc.index_files
    assert [e[1] for e in _entries(f)] == [0, 200]
    svc.build_index(_req(200, T0, keys="c"))  # the last record is indexed again (RocketMQ's rule)
    assert [e[1] for e in _entries(f)] == [0, 200, 200]
    svc.close()


def test_new_file_when_full_seeded_with_previous_end_and_flushed_to_checkpoint(tmp_path):
    cp = RecordingCheckpoint()
    names = iter([T0, T0 + 60_000])
    svc = _svc(tmp_path, entries=3, checkpoint=cp, clock=lambda: next(names))
    svc.build_index(_req(0, T0, keys="a"))
    svc.build_index(_req(100, T0 + 1000, keys="b"))
    svc.build_index(_req(200, T0 + 1000 + 4999, keys="c"))  # first file full: rolls
    svc.wait_for_flushes()
    first, second = svc.index_files
    assert first.file_name == time_millis_to_human_string(T0)
    assert second.file_name == time_millis_to_human_string(T0 + 60_000)
    assert len(first.file_name) == 17 and int(second.file_name) > int(first.file_name)
    assert second.entry(1)[1:3] == (200, 4)  # timeDiff against the previous file's end (quirk: docs/design/store-formats.md#index-files)
    assert second.begin_timestamp == T0 + 5999 and second.begin_phy_offset == 200
    assert cp.index_msg_timestamp == T0 + 1000 and cp.flushes == 1
    svc.close()


def test_file_names_stay_unique_within_one_millisecond(tmp_path):
    svc = _svc(tmp_path, entries=2)  # one entry per file, clock frozen
    for i in range(3):
        svc.build_index(_req(i * 10, T0 + i, keys="k"))
    names = [f.file_name for f in svc.index_files]
    assert len(set(names)) == 3 and names == sorted(names)
    res = svc.query_offset("T", "k", 10, 0, 2**62)
    assert res.phy_offsets == [20, 10, 0]
    svc.close()


def test_query_newest_to_oldest_across_files_with_limits(tmp_path):
    svc = _svc(tmp_path, slots=2, entries=3, max_msgs_num_batch=3)
    for i in range(8):
        svc.build_index(_req(i * 100, T0 + i * 10_000, keys="K" if i % 2 else "other"))
    assert len(svc.index_files) == 4
    res = svc.query_offset("T", "K", 100, 0, 2**62)
    assert res.phy_offsets == [700, 500, 300]  # capped at max_msgs_num_batch, newest first
    assert res.index_last_update_phy_offset == 700
    assert res.index_last_update_timestamp == T0 + 70_000
    assert svc.query_offset("T", "K", 2, 0, 2**62).phy_offsets == [700, 500]
    # K is always the second entry of its file; a file's first entry reads back 10 s late here, because its
    # timeDiff was measured from the previous file's end (RocketMQ's own behaviour, docs/design/store-formats.md#index-files)
    assert svc.query_offset("T", "K", 10, T0 + 25_000, T0 + 55_000).phy_offsets == [500, 300]
    assert svc.query_offset("OtherTopic", "K", 10, 0, 2**62).phy_offsets == []
    svc.close()


def test_record_split_across_files_is_whole_again_after_abnormal_exit(tmp_path):
    cp = RecordingCheckpoint()
    clock = iter(range(T0, T0 + 100_000, 1000))
    svc = _svc(tmp_path, entries=4, checkpoint=cp, clock=lambda: next(clock))  # 3 entries per file
    svc.build_index(_req(0, T0, keys="a b"))
    svc.build_index(_req(100, T0, keys="c d"))  # c fills the first file, d starts the second
    svc.wait_for_flushes()
    svc.build_index(_req(200, T0 + 1000, keys="e"))
    svc.close()
    assert cp.index_msg_timestamp == T0
    crashed = _svc(tmp_path, entries=4, checkpoint=cp, clock=lambda: next(clock))
    crashed.load(last_exit_ok=False)  # the second file (d, e) is newer than the checkpoint: deleted
    assert len(crashed.index_files) == 1
    for phy, keys in ((0, "a b"), (100, "c d"), (200, "e")):  # abnormal recovery re-dispatches
        crashed.build_index(_req(phy, T0 if phy < 200 else T0 + 1000, keys=keys))
    for key, phy in (("a", 0), ("c", 100), ("d", 100), ("e", 200)):
        assert phy in crashed.query_offset("T", key, 10, 0, 2**62).phy_offsets, key
    crashed.close()


def test_load_normal_and_after_abnormal_exit(tmp_path):
    cp = RecordingCheckpoint()
    clock = iter(range(T0, T0 + 100_000, 1000))
    svc = _svc(tmp_path, entries=3, checkpoint=cp, clock=lambda: next(clock))
    for i in range(5):
        svc.build_index(_req(i * 100, T0 + i * 1000, keys=f"k{i}"))
    svc.flush()
    svc.close()
    assert cp.index_msg_timestamp == T0 + 3000  # second file full and flushed

    again = _svc(tmp_path, entries=3, checkpoint=cp)
    again.load(last_exit_ok=True)
    assert len(again.index_files) == 3
    assert again.query_offset("T", "k4", 10, 0, 2**62).phy_offsets == [400]
    again.close()

    crashed = _svc(tmp_path, entries=3, checkpoint=cp)
    crashed.load(last_exit_ok=False)  # the third file ends after the checkpoint: deleted
    assert len(crashed.index_files) == 2
    assert len(os.listdir(tmp_path / "index")) == 2
    assert crashed.query_offset("T", "k4", 10, 0, 2**62).phy_offsets == []
    # re-dispatch after recovery rebuilds what was lost
    crashed.build_index(_req(400, T0 + 4000, keys="k4"))
    assert crashed.query_offset("T", "k4", 10, 0, 2**62).phy_offsets == [400]
    crashed.close()


def test_load_rejects_files_of_another_geometry(tmp_path):
    svc = _svc(tmp_path)
    svc.build_index(_req(0, T0, keys="a"))
    svc.close()
    with pytest.raises(StoreLoadError, match="max_hash_slot_num=8"):
        _svc(tmp_path, slots=8).load(True)
    (tmp_path / "index" / "99999999999999999").touch()  # an interrupted file creation leaves 0 bytes
    ok = _svc(tmp_path)
    ok.load(True)
    assert len(ok.index_files) == 1 and not (tmp_path / "index" / "99999999999999999").exists()
    ok.close()
    (tmp_path / "index" / "notes.txt").write_text("x")
    with pytest.raises(StoreLoadError, match="yyyyMMddHHmmssSSS"):
        _svc(tmp_path).load(True)


def test_delete_expired_never_the_newest(tmp_path):
    svc = _svc(tmp_path, entries=2)
    for i in range(4):
        svc.build_index(_req(i * 100, T0 + i, keys="k"))
    assert svc.delete_expired_file(150) == 2  # the files ending at 0 and 100
    assert [f.end_phy_offset for f in svc.index_files] == [200, 300]
    assert svc.delete_expired_file(10_000) == 1
    assert [f.end_phy_offset for f in svc.index_files] == [300]  # the newest stays
    assert svc.delete_expired_file(10_000) == 0
    assert len(os.listdir(tmp_path / "index")) == 1
    svc.close()


def test_truncate_drops_entries_and_files_beyond_the_cut(tmp_path):
    svc = _svc(tmp_path, entries=3)
    for i in range(5):
        svc.build_index(_req(i * 100, T0 + i * 1000, keys="k"))
    assert len(svc.index_files) == 3
    svc.truncate(150)
    assert len(svc.index_files) == 1
    assert svc.query_offset("T", "k", 10, 0, 2**62).phy_offsets == [100, 0]
    # the commit log is rewritten from 150 on: those records are indexed again
    svc.build_index(_req(150, T0 + 9000, keys="k"))
    svc.build_index(_req(250, T0 + 9500, keys="k"))
    assert svc.query_offset("T", "k", 10, 0, 2**62).phy_offsets == [250, 150, 100, 0]
    svc.truncate(0)
    assert svc.index_files == []
    svc.close()


def test_real_clock_names_files_in_local_time(tmp_path):
    svc = IndexService(str(tmp_path / "index"), 4, 4)
    before = time.time_ns() // 1_000_000
    svc.build_index(_req(0, T0, keys="a"))
    after = time.time_ns() // 1_000_000
    name = svc.index_files[0].file_name
    assert time_millis_to_human_string(before) <= name <= time_millis_to_human_string(after)
    svc.close()


class ReferenceIndex:
    """A literal port of RocketMQ 4.9's IndexService.buildIndex / IndexFile.putKey / IndexHeader setters,
    writing each header field as it changes, over in-memory files: what our files must equal byte for byte."""

    def __init__(self, slots, entries):
        self.slots, self.entries = slots, entries
        self.files = []  # [bytearray, header dict]

    def _new_file(self, end_phy, end_ts):
        buf = bytearray(40 + 4 * self.slots + 20 * self.entries)
        h = {"bt": 0, "et": 0, "bp": 0, "ep": 0, "sc": 0, "ic": 1}
        if end_phy > 0:
            h["bp"] = h["ep"] = end_phy
            struct.pack_into(">q", buf, 16, end_phy)
            struct.pack_into(">q", buf, 24, end_phy)
        if end_ts > 0:
            h["bt"] = h["et"] = end_ts
            struct.pack_into(">q", buf, 0, end_ts)
            struct.pack_into(">q", buf, 8, end_ts)
        self.files.append([buf, h])

    def _last(self):
        if not self.files:
            self._new_file(0, 0)
        elif self.files[-1][1]["ic"] >= self.entries:
            h = self.files[-1][1]
            self._new_file(h["ep"], h["et"])
        return self.files[-1]

    def _put_key(self, f, key, phy, ts):
        buf, h = f
        if h["ic"] >= self.entries:
            return False
        kh = java_string_hash(key)
        kh = 0 if kh == -(1 << 31) else abs(kh)
        slot_pos = 40 + (kh % self.slots) * 4
        slot = struct.unpack_from(">i", buf, slot_pos)[0]
        if slot <= 0 or slot > h["ic"]:
            slot = 0
        diff = int((ts - h["bt"]) / 1000)  # Java truncation toward zero
        diff = 0 if h["bt"] <= 0 else min(2**31 - 1, max(0, diff))
        struct.pack_into(">iqii", buf, 40 + 4 * self.slots + h["ic"] * 20, kh, phy, diff, slot)
        struct.pack_into(">i", buf, slot_pos, h["ic"])
        if h["ic"] <= 1:
            h["bp"], h["bt"] = phy, ts
            struct.pack_into(">q", buf, 16, phy)
            struct.pack_into(">q", buf, 0, ts)
        if slot == 0:
            h["sc"] += 1
            struct.pack_into(">i", buf, 32, h["sc"])
        h["ic"] += 1
        struct.pack_into(">i", buf, 36, h["ic"])
        h["ep"], h["et"] = phy, ts
        struct.pack_into(">q", buf, 24, phy)
        struct.pack_into(">q", buf, 8, ts)
        return True

    def build_index(self, topic, phy, ts, uniq, keys):
        f = self._last()
        if phy < f[1]["ep"]:
            return
        todo = ([uniq] if uniq is not None else []) + [k for k in (keys or "").split(" ") if k]
        for k in todo:
            while not self._put_key(f, f"{topic}#{k}", phy, ts):
                f = self._last()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["T", "Tx", "中"]),
            st.integers(0, 5_000),  # ms since the previous record (0: same batch)
            st.one_of(st.none(), st.text("ABC0123456789", min_size=1, max_size=24)),
            st.lists(st.sampled_from(["k1", "k2", "polygenelubricants", "键", "Aa", "BB", ""]), max_size=3),
        ),
        max_size=25,
    ),
    st.integers(1, 4),
    st.integers(2, 6),
    st.integers(1, 7),
)
def test_index_files_equal_a_literal_port_of_rocketmq(tmp_path_factory, records, slots, entries, batch):
    tmp = tmp_path_factory.mktemp("idx")
    ref = ReferenceIndex(slots, entries)
    svc = _svc(tmp, slots=slots, entries=entries, clock=iter(range(T0, T0 + 10**6)).__next__)
    reqs = []
    phy, ts = 0, T0
    for topic, gap, uniq, keys in records:
        ts += gap
        keys_s = " ".join(keys)
        ref.build_index(topic, phy, ts, uniq, keys_s)
        reqs.append(
            DispatchRequest(
                topic=topic, commit_log_offset=phy, store_timestamp=ts, uniq_key=uniq, keys=keys_s
            )
        )
        phy += 100
    for i in range(0, len(reqs), batch):  # reput hands the index slices of different sizes
        svc.build_index_batch(reqs[i : i + batch])
    ours = [open(f.path, "rb").read() for f in svc.index_files]
    assert ours == [bytes(b) for b, _h in ref.files]
    svc.close()
