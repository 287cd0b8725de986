"""IndexFile byte layout (docs/design/store-formats.md#index-files): header written field by field, entries numbered from 1, chains."""

import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.store.index_file import (
    HASH_SLOT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    IndexFile,
    build_key,
    index_file_size,
    index_key_hash,
    index_key_hashes,
    key_hash,
)
from raftmq.store.java import java_string_hash

T0 = 1_700_000_000_000


def _java_abs(h: int) -> int:
    return 0 if h == -(1 << 31) else abs(h)


def _open(tmp_path, slots=4, entries=4, name="20231114221320000", **kw):
    return IndexFile(str(tmp_path / name), slots, entries, **kw)


def test_geometry_matches_rocketmq_defaults():
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040


def test_key_hash_vectors():
    assert index_key_hash("TopicTest", "KEY1") == 1656969516  # abs(-1656969516)
    assert key_hash("TopicTest#KEY1") == 1656969516
    assert key_hash("polygenelubricants") == 0  # hashCode is Integer.MIN_VALUE: abs() stays negative -> 0
    assert build_key("T", "k") == "T#k"


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=20), st.text(min_size=0, max_size=40))
def test_fast_hash_equals_java_string_hash(topic, key):
    expected = _java_abs(java_string_hash(topic + "#" + key))
    assert index_key_hash(topic, key) == expected
    assert key_hash(topic + "#" + key) == expected


def _plain_index_hash(topic: str, key: str) -> int:
    return _java_abs(java_string_hash(topic + "#" + key))


def test_cached_key_hash_of_integer_min_value_is_zero():
    # "T#order-2576199t3".hashCode() is Integer.MIN_VALUE: Math.abs leaves it negative and RocketMQ uses 0
    assert java_string_hash("T#order-2576199t3") == -(1 << 31)
    for _ in range(2):  # computed, then from the head/tail caches
        assert index_key_hash("T", "order-2576199t3") == 0
        assert index_key_hashes("T", "order-2576199t3", "a order-2576199t3") == [0, _plain_index_hash("T", "a"), 0]
    long_key = "y" * 130 + "-1293563n5"  # past the cached length: hashed whole, same rule
    assert java_string_hash("T#" + long_key) == -(1 << 31)
    assert index_key_hash("T", long_key) == 0


_ODD_TEXT = st.text(alphabet=st.characters(blacklist_categories=()), max_size=12)  # surrogates included
_KEYS = st.lists(st.sampled_from(["", " ", "k", "order-1", "é中", "\U0001f600", "x" * 40, "y" * 130]),
                 max_size=6).map("".join)


@settings(max_examples=500, deadline=None)
@given(_ODD_TEXT, st.one_of(st.none(), _ODD_TEXT), st.one_of(st.none(), _KEYS, _ODD_TEXT))
def test_index_key_hashes_equal_plain_java_hash_per_key(topic, uniq, keys):
    expect = [] if uniq is None else [_plain_index_hash(topic, uniq)]  # an empty uniq key is still hashed
    expect += [_plain_index_hash(topic, k) for k in (keys or "").split(" ") if k]
    assert index_key_hashes(topic, uniq, keys) == expect
    assert index_key_hashes(topic, uniq, keys) == expect  # again, from the caches


def test_key_hash_caches_stay_exact_when_they_are_cleared(monkeypatch):
    import raftmq.store.index_file as index_file

    monkeypatch.setattr(index_file, "_HEADS_MAX", 3)
    monkeypatch.setattr(index_file, "_TAILS_MAX", 3)
    keys = [f"{p}{i}" for p in ("A", "B7", "order-", "7F00000179B172A17ADB6932C3A4") for i in range(300)]
    for topic in ("T1", "T2", "T1"):
        assert [index_key_hash(topic, k) for k in keys] == [_plain_index_hash(topic, k) for k in keys]


def test_fresh_file_has_zero_header_and_first_entry_is_number_one(tmp_path):
    f = _open(tmp_path)
    assert os.path.getsize(f.path) == INDEX_HEADER_SIZE + 4 * HASH_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE
    assert f.header_on_disk() == (0, 0, 0, 0, 0, 0)  # indexCount 0 on disk
    assert f.index_count == 1  # in memory
    assert f.put_key("T#k1", 1000, T0 + 2500)
    h = key_hash("T#k1")
    # entry 0 is never used
    assert f.entry(0) == (0, 0, 0, 0)
    assert f.entry(1) == (h, 1000, 0, 0)
    assert f.slot(h) == 1
    # header after the first key: begin = end = this message; slot count 1; on-disk indexCount 2
    assert f.header_on_disk() == (T0 + 2500, T0 + 2500, 1000, 1000, 1, 2)
    raw = open(f.path, "rb").read()
    slot_pos = INDEX_HEADER_SIZE + (h % 4) * HASH_SLOT_SIZE
    assert raw[slot_pos : slot_pos + 4] == struct.pack(">i", 1)
    entry_pos = INDEX_HEADER_SIZE + 4 * HASH_SLOT_SIZE + INDEX_ENTRY_SIZE
    assert raw[entry_pos : entry_pos + 20] == struct.pack(">iqii", h, 1000, 0, 0)
    f.close()


def test_time_diff_is_seconds_truncated_and_clamped(tmp_path):
    f = _open(tmp_path, entries=5)
    f.put_key("T#a", 0, T0)
    f.put_key("T#b", 10, T0 + 1999)
    f.put_key("T#c", 20, T0 - 5000)  # clock went back: clamped to 0
    assert f.entry(2)[2] == 1
    assert f.entry(3)[2] == 0
    f.close()


def test_collision_chain_links_previous_entry_and_query_is_newest_first(tmp_path):
    f = _open(tmp_path, slots=1, entries=6)  # one slot: every key collides
    f.put_key("T#K1", 1000, T0)
    f.put_key("T#K2", 2000, T0 + 1000)
    f.put_key("T#K1", 3000, T0 + 2000)
    assert f.slot(key_hash("T#K1")) == 3
    assert [f.entry(n)[3] for n in (1, 2, 3)] == [0, 1, 2]  # prev links
    assert f.header_on_disk()[4] == 1  # one slot in use
    out: list[int] = []
    f.select_phy_offset(out, "T#K1", 10, 0, 2**62)
    assert out == [3000, 1000]  # hash-only compare skips K2, order newest first
    out = []
    f.select_phy_offset(out, "T#K1", 1, 0, 2**62)
    assert out == [3000]
    out = []
    f.select_phy_offset(out, "T#K1", 10, T0 + 1500, T0 + 5000)  # time range cuts the older one
    assert out == [3000]
    out = []
    f.select_phy_offset(out, "T#nothing", 10, 0, 2**62)
    assert out == []
    f.close()


def test_full_file_refuses_keys(tmp_path):
    f = _open(tmp_path, entries=3)  # entries 1 and 2 usable
    assert f.put_key("T#a", 1, T0)
    assert f.put_key("T#b", 2, T0)
    assert f.is_write_full()
    assert not f.put_key("T#c", 3, T0)
    assert f.header_on_disk()[5] == 3
    f.close()


def test_seeded_file_measures_first_time_diff_from_previous_end(tmp_path):
    # IndexService seeds a new file with the previous file's end values (docs/design/store-formats.md#index-files, golden idx2)
    prev_end_ts, prev_end_phy = T0 + 10_000, 5000
    f = _open(tmp_path, end_phy_offset=prev_end_phy, end_timestamp=prev_end_ts)
    assert f.header_on_disk() == (prev_end_ts, prev_end_ts, prev_end_phy, prev_end_phy, 0, 0)
    f.put_key("T#x", 6000, prev_end_ts + 4999)
    assert f.entry(1)[2] == 4  # measured against the previous end
    assert f.header_on_disk()[:4] == (prev_end_ts + 4999, prev_end_ts + 4999, 6000, 6000)
    f.close()


def test_load_restores_header_and_stale_slot_values_are_ignored(tmp_path):
    f = _open(tmp_path, slots=2, entries=8)
    for i in range(3):
        f.put_key(f"T#k{i}", 100 * i, T0 + 1000 * i)
    f.flush()
    f.close()
    g = _open(tmp_path, slots=2, entries=8)
    g.load()
    assert (g.index_count, g.begin_phy_offset, g.end_phy_offset) == (4, 0, 200)
    assert (g.begin_timestamp, g.end_timestamp) == (T0, T0 + 2000)
    out: list[int] = []
    g.select_phy_offset(out, "T#k2", 10, 0, 2**62)
    assert out == [200]
    g.close()


def test_load_of_fresh_header_means_index_count_one(tmp_path):
    f = _open(tmp_path)
    f.close()
    g = _open(tmp_path)
    g.load()
    assert g.index_count == 1
    g.close()


def test_is_time_matched():
    class F:
        begin_timestamp, end_timestamp = 100, 200

    m = IndexFile.is_time_matched
    assert m(F, 50, 250)
    assert m(F, 150, 300)
    assert m(F, 0, 150)
    assert not m(F, 201, 300)
    assert not m(F, 0, 99)


def test_truncate_unlinks_chains_and_allows_reindexing(tmp_path):
    f = _open(tmp_path, slots=1, entries=8)
    f.put_key("T#a", 100, T0)
    f.put_key("T#b", 200, T0 + 1000)
    f.put_key("T#a", 300, T0 + 2000)
    f.put_key("T#c", 300, T0 + 2000)
    f.truncate(200)
    assert f.index_count == 2
    assert f.end_phy_offset == 100
    assert f.header_on_disk()[3:] == (100, 1, 2)
    assert f.entry(2) == (0, 0, 0, 0)
    assert f.slot(key_hash("T#a")) == 1
    f.put_key("T#d", 200, T0 + 1000)
    out: list[int] = []
    f.select_phy_offset(out, "T#a", 10, 0, 2**62)
    assert out == [100]
    f.close()


def _keys_found(f, keys, ts_end=T0 + 10**9):
    out = {}
    for k in keys:
        got = []
        f.select_phy_offset(got, k, 64, 0, ts_end)
        out[k] = got
    return out


def test_repair_after_crash_unlinks_entries_past_a_lagging_header_and_reindexing_keeps_every_key(tmp_path):
    """A kill inside put_records leaves entries and slots past the header's indexCount (the header is written
    once per slice). repair_after_crash unlinks them, so the file is what its header says, and indexing the
    lost slice again neither breaks an older chain nor loses a key."""
    path = tmp_path / "20231114221320000"
    f = IndexFile(str(path), 3, 64)
    older = [(f"T#a{i}", 100 + i) for i in range(10)]
    newer = [(f"T#b{i}", 200 + i) for i in range(10)]
    f.put_records([([key_hash(k)], phy, T0 + phy) for k, phy in older])
    header = bytes(f._mm[:INDEX_HEADER_SIZE])
    f.put_records([([key_hash(k)], phy, T0 + phy) for k, phy in newer])
    f._mm[:INDEX_HEADER_SIZE] = header  # the kill: entries and slots of the second slice, not its header
    f.close()

    f = IndexFile(str(path), 3, 64)
    f.load()
    assert f.index_count == 11
    assert f.repair_after_crash() == 10
    assert f.header_on_disk()[3:] == (109, 3, 11)  # endPhyOffset, hashSlotCount, indexCount
    assert all(f.entry(n) == (0, 0, 0, 0) for n in range(11, 21))
    assert _keys_found(f, [k for k, _ in older]) == {k: [phy] for k, phy in older}
    assert _keys_found(f, [k for k, _ in newer]) == {k: [] for k, _ in newer}
    f.put_records([([key_hash(k)], phy, T0 + phy) for k, phy in newer])
    assert _keys_found(f, [k for k, _ in older + newer]) == {k: [phy] for k, phy in older + newer}
    assert f.repair_after_crash() == 0
    f.close()


def test_repair_after_crash_fixes_a_torn_header_tail(tmp_path):
    """A kill in the middle of writing the header tail can leave a new endPhyOffset with an old indexCount:
    the end offset is taken from the last kept entry, so reput indexes the dropped records again."""
    path = tmp_path / "20231114221320000"
    f = IndexFile(str(path), 3, 64)
    f.put_records([([key_hash(f"T#a{i}")], 100 + i, T0) for i in range(4)])
    f.put_records([([key_hash(f"T#b{i}")], 200 + i, T0) for i in range(4)])
    struct.pack_into(">i", f._mm, 36, 5)  # indexCount back to the first slice's, endPhyOffset stays 203
    f.close()
    f = IndexFile(str(path), 3, 64)
    f.load()
    assert f.repair_after_crash() == 4
    assert (f.end_phy_offset, f.index_count) == (103, 5)
    assert f.header_on_disk()[3] == 103
    f.close()
