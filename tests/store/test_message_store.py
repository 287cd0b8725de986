import hashlib
import os
import threading

import pytest

from raftmq.store import (
    GetStatus,
    Message,
    MessageStore,
    PutStatus,
    StoreClosedError,
    StoreConfig,
    StoreError,
    StoreLockedError,
    TagFilter,
)
from raftmq.store.errors import StoreLoadError


def _cfg(root, **kw):
    base = dict(root_dir=str(root), mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=400,
                max_hash_slot_num=64, max_index_num=256)
    base.update(kw)
    return StoreConfig(**base)


@pytest.fixture
def store(tmp_path):
    st = MessageStore(_cfg(tmp_path / "s"))
    st.open()
    yield st
    st.shutdown()


def _msg(i, topic="T", qid=0, tag=None, size=60):
    props = {"KEYS": f"key{i} common"}
    if tag:
        props["TAGS"] = tag
    return Message(topic=topic, queue_id=qid, body=f"m{i}:".encode() + b"x" * size, properties=props,
                   born_timestamp=1_700_000_000_000 + i, born_host=("10.0.0.9", 4000))


def _dispatched(st):
    assert st.reput.wait_dispatched(timeout=10)


def test_put_and_pull_with_statuses(store):
    rs = store.put_messages([_msg(i, tag="A" if i % 3 == 0 else "B") for i in range(40)])
    assert all(r.status is PutStatus.PUT_OK for r in rs)
    assert [r.queue_offset for r in rs] == list(range(40))
    assert all(r.uniq_key for r in rs)
    _dispatched(store)
    g = store.get_messages("T", 0, 0, max_count=8)
    assert g.status is GetStatus.FOUND and [m.queue_offset for m in g.messages] == list(range(8))
    assert g.next_begin_offset == 8 and (g.min_offset, g.max_offset) == (0, 40)
    assert g.messages[0].body.startswith(b"m0:") and g.messages[0].born_host == ("10.0.0.9", 4000)
    g = store.get_messages("T", 0, 1, max_count=5, tag_filter=TagFilter.parse("A"))
    assert [m.queue_offset for m in g.messages] == [3, 6, 9, 12, 15] and g.next_begin_offset == 16
    g = store.get_messages("T", 0, 0, tag_filter=TagFilter.parse("Z"))
    assert g.status is GetStatus.NO_MATCHED_MESSAGE and g.next_begin_offset == 40
    g = store.get_messages("T", 0, 0, max_count=32, max_bytes=300)
    assert 1 <= len(g.messages) < 4
    assert store.get_messages("T", 0, 40).status is GetStatus.OFFSET_OVERFLOW_ONE
    g = store.get_messages("T", 0, 99)
    assert g.status is GetStatus.OFFSET_OVERFLOW_BADLY and g.next_begin_offset == 0
    assert store.get_messages("T", 7, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.get_messages("Nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.queue_ids("T") == [0]
    assert store.min_offset_in_queue("T", 0) == 0 and store.max_offset_in_queue("T", 0) == 40


def test_queries_by_key_id_offset_and_time(store):
    rs = store.put_messages([_msg(i) for i in range(10)])
    _dispatched(store)
    found = store.query_messages("T", "key4", 10, 0, 2**62)
    assert [m.queue_offset for m in found] == [4]
    assert len(store.query_messages("T", "common", 64, 0, 2**62)) == 10
    assert store.query_messages("T", rs[7].uniq_key, 5, 0, 2**62)[0].queue_offset == 7
    assert store.query_messages("Other", "key4", 10, 0, 2**62) == []
    assert store.view_message_by_id(rs[5].msg_id).body.startswith(b"m5:")
    assert store.view_message(rs[2].physical_offset).queue_offset == 2
    assert store.view_message(rs[2].physical_offset + 1) is None
    assert store.view_message(10**9) is None
    with pytest.raises(StoreError):
        store.view_message_by_id("not-an-id")
    ts = rs[0].store_timestamp
    assert store.get_offset_by_time("T", 0, ts) == 0
    assert store.get_offset_by_time("T", 0, ts + 10**7) == 10
    assert store.get_offset_by_time("None", 0, ts) == 0


def test_arrival_listener_hears_new_messages(store):
    heard = []
    got = threading.Event()

    def listener(topic, qid, max_offset):
        heard.append((topic, qid, max_offset))
        if max_offset == 3:
            got.set()

    store.add_arrival_listener(listener)
    store.put_messages([_msg(i, qid=2) for i in range(3)])
    assert got.wait(10)
    assert heard[-1] == ("T", 2, 3)


def test_restart_keeps_everything_and_continues_offsets(tmp_path):
    cfg = _cfg(tmp_path / "s")
    with MessageStore(cfg) as st:
        for b in range(10):
            st.put_messages([_msg(b * 10 + i, qid=b % 2) for i in range(10)])
        end = st.commit_log_max_offset
        st.consumer_offsets.commit("g1", "T", {0: 7, 1: 3})
    assert not os.path.exists(cfg.abort_path)
    with MessageStore(cfg) as st:
        assert st.last_exit_ok and st.commit_log_max_offset == end
        assert st.stats()["commit_log_files"] > 2
        assert st.max_offset_in_queue("T", 0) == 50 and st.max_offset_in_queue("T", 1) == 50
        assert st.consumer_offsets.query("g1", "T", 0) == 7
        r = st.put_message(_msg(1000, qid=1))
        assert r.queue_offset == 50
        g = st.get_messages("T", 1, 0, max_count=64)
        assert [m.queue_offset for m in g.messages][:3] == [0, 1, 2] and g.status is GetStatus.FOUND


def test_lost_consume_queue_is_rebuilt_on_abnormal_open(tmp_path):
    cfg = _cfg(tmp_path / "s")
    with MessageStore(cfg) as st:
        st.put_messages([_msg(i) for i in range(30)])
    import shutil
    shutil.rmtree(cfg.consume_queue_dir)
    open(cfg.abort_path, "wb").close()  # as if the process had died
    with MessageStore(cfg) as st:
        assert not st.last_exit_ok
        assert st.max_offset_in_queue("T", 0) == 30
        assert st.put_message(_msg(30)).queue_offset == 30


def test_second_open_in_process_is_refused(store, tmp_path):
    other = MessageStore(_cfg(tmp_path / "s"))
    with pytest.raises(StoreLockedError):
        other.open()


def test_wrong_sized_segment_is_refused_and_lock_released(tmp_path):
    cfg = _cfg(tmp_path / "s")
    with MessageStore(cfg) as st:
        st.put_message(_msg(1))
    bad = _cfg(tmp_path / "s", mapped_file_size_commit_log=16384)
    with pytest.raises(StoreLoadError, match="00000000000000000000"):
        MessageStore(bad).open()
    with MessageStore(cfg) as st:  # the failed open released the lock
        assert st.max_offset_in_queue("T", 0) == 1


def test_closed_store_refuses_work(tmp_path):
    st = MessageStore(_cfg(tmp_path / "s"))
    with pytest.raises(StoreClosedError):
        st.put_message(_msg(1))
    st.open()
    st.shutdown()
    st.shutdown()
    with pytest.raises(StoreClosedError):
        st.get_messages("T", 0, 0)


def _commit_log_digest(st):
    h = hashlib.sha256()
    for mf in st.commit_log.mapped_file_queue.mapped_files:
        h.update(mf.read_bytes(0, mf.file_size))
    return h.hexdigest()


def test_replicas_applying_leader_batches_are_identical(tmp_path):
    leader, a, b = (MessageStore(_cfg(tmp_path / n)) for n in ("leader", "a", "b"))
    for st in (leader, a, b):
        st.open()
    try:
        for i in range(15):
            batch = leader.encode_batch([_msg(i * 5 + j, qid=j % 3, size=50 + 30 * j) for j in range(5)],
                                        store_timestamp=1_700_000_000_000 + i)
            ra, rb = a.apply_batch(batch), b.apply_batch(batch)
            assert [(r.queue_offset, r.physical_offset, r.msg_id) for r in ra] == \
                   [(r.queue_offset, r.physical_offset, r.msg_id) for r in rb]
        assert _commit_log_digest(a) == _commit_log_digest(b)
        _dispatched(a)
        _dispatched(b)
        for q in range(3):
            ga, gb = a.get_messages("T", q, 0, 100), b.get_messages("T", q, 0, 100)
            assert [m.body for m in ga.messages] == [m.body for m in gb.messages] and ga.messages
    finally:
        for st in (leader, a, b):
            st.shutdown()


def test_catch_up_from_raw_commit_log(tmp_path):
    src, dst = MessageStore(_cfg(tmp_path / "src")), MessageStore(_cfg(tmp_path / "dst"))
    src.open()
    dst.open()
    try:
        for i in range(12):
            src.put_messages([_msg(i * 4 + j, qid=j % 2) for j in range(4)])
        off = dst.commit_log_max_offset
        while off < src.commit_log_max_offset:
            dst.append_commit_log_raw(off, src.read_commit_log(off, 700))
            off = dst.commit_log_max_offset
        assert _commit_log_digest(src) == _commit_log_digest(dst)
        _dispatched(dst)
        assert dst.max_offset_in_queue("T", 1) == 24
        assert dst.put_message(_msg(99, qid=1)).queue_offset == 24
    finally:
        src.shutdown()
        dst.shutdown()


def test_truncate_to_cuts_queues_and_index(store):
    rs = store.put_messages([_msg(i) for i in range(20)])
    _dispatched(store)
    cut = rs[12].physical_offset
    store.truncate_to(cut)
    assert store.commit_log_max_offset == cut
    assert store.max_offset_in_queue("T", 0) == 12
    assert store.query_messages("T", "key15", 5, 0, 2**62) == []
    r = store.put_message(_msg(500))
    assert (r.queue_offset, r.physical_offset) == (12, cut)
    _dispatched(store)
    assert store.get_messages("T", 0, 12).messages[0].body.startswith(b"m500:")
    with pytest.raises(StoreError):
        store.truncate_to(store.commit_log_max_offset + 1)


def test_delete_topic_files_resets_queue(store):
    store.put_messages([_msg(i, topic="Gone") for i in range(5)])
    _dispatched(store)
    store.delete_topic_files("Gone")
    assert store.queue_ids("Gone") == []
    assert store.put_message(_msg(9, topic="Gone")).queue_offset == 0


def test_sync_flush_put_waits_for_fsync(tmp_path):
    with MessageStore(_cfg(tmp_path / "s", flush_disk_type="SYNC")) as st:
        r = st.put_message(_msg(1))
        assert r.status is PutStatus.PUT_OK
        assert st.flushed_offset >= r.physical_offset + r.wrote_bytes
        assert st.wait_flushed(st.commit_log_max_offset, 5)


def test_retention_expires_old_segments_and_pulls_report_it(store):
    for b in range(8):
        store.put_messages([_msg(b * 10 + i) for i in range(10)])
    _dispatched(store)
    files_before = store.stats()["commit_log_files"]
    store.retention.delete_files_manually()
    now = 2**41 + store.config.file_reserved_time * 3_600_000
    result = store.retention.run_once(now)
    assert result.commit_log_files == files_before - 1  # never the segment being written
    low = store.commit_log_min_offset
    assert low > 0 and store.stats()["commit_log_files"] == 1
    min_q = store.min_offset_in_queue("T", 0)
    assert min_q > 0
    g = store.get_messages("T", 0, 0)
    assert g.status is GetStatus.OFFSET_TOO_SMALL and g.next_begin_offset == min_q
    g = store.get_messages("T", 0, min_q)
    assert g.status is GetStatus.FOUND and g.messages[0].physical_offset >= low
    assert store.view_message(0) is None
    r = store.put_message(_msg(999))
    assert r.queue_offset == 80


def test_same_object_can_be_reopened(tmp_path):
    st = MessageStore(_cfg(tmp_path / "s"))
    st.open()
    st.put_messages([_msg(i) for i in range(3)])
    st.shutdown()
    st.open()
    try:
        _dispatched(st)
        assert st.max_offset_in_queue("T", 0) == 3 and st.put_message(_msg(3)).queue_offset == 3
    finally:
        st.shutdown()


@pytest.mark.parametrize("seed", range(5))
def test_garbage_after_valid_records_never_crashes_open(tmp_path, seed):
    import random
    import struct
    rnd = random.Random(seed)
    cfg = _cfg(tmp_path / "s")
    with MessageStore(cfg) as st:
        rs = st.put_messages([_msg(i) for i in range(5)])
    end = rs[-1].physical_offset + rs[-1].wrote_bytes
    seg = os.path.join(cfg.commit_log_dir, f"{0:020d}")
    with open(seg, "r+b") as f:
        f.seek(end)
        junk = bytearray(rnd.randbytes(600))
        if seed % 2:  # looks like a record header: plausible size and the message magic
            junk[:8] = struct.pack(">iI", rnd.randrange(91, 600), 0xDAA320A7)
        f.write(junk)
    open(cfg.abort_path, "wb").close()
    with MessageStore(cfg) as st:
        assert st.commit_log_max_offset == end
        _dispatched(st)
        assert st.max_offset_in_queue("T", 0) == 5
        assert st.put_message(_msg(5)).physical_offset == end


@pytest.mark.parametrize("rebooted", [False, True])
def test_keys_stay_queryable_after_a_crash_with_or_without_reboot(tmp_path, rebooted):
    cfg = _cfg(tmp_path / "s", max_hash_slot_num=256, max_index_num=1024)
    with MessageStore(cfg) as st:
        rs = st.put_messages([_msg(i) for i in range(60)])
    with open(cfg.abort_path, "wb"):
        pass
    if rebooted:  # an abort marker older than the boot: the page cache may have been lost
        os.utime(cfg.abort_path, (0, 0))
    with MessageStore(cfg) as st:
        assert not st.last_exit_ok and st.process_crash_only is (not rebooted)
        _dispatched(st)
        for i in (0, 30, 59):
            assert [m.physical_offset for m in st.query_messages("T", f"key{i}", 4, 0, 2**62)] == \
                   [rs[i].physical_offset]
        assert len(st.query_messages("T", "common", 64, 0, 2**62)) == 60
