"""ReputMessageService over a real CommitLog: dispatch rules, confirm offset, listeners, bad data, threading."""

import os
import struct
import threading
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from raftmq.store.checkpoint import StoreCheckpoint
from raftmq.store.commit_log import CommitLog
from raftmq.store.config import StoreConfig
from raftmq.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueueTable
from raftmq.store.dispatch import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from raftmq.store.index_service import IndexService
from raftmq.store.java import java_string_hash
from raftmq.store.message import SCHEDULE_TOPIC, Message, decode_dispatch, decode_record, encode_record
from raftmq.store.reput import ReputMessageService

T0 = 1_700_000_000_000
HOST = ("127.0.0.1", 10911)


class Store:
    """The pieces reput connects: a commit log, the consume-queue table and the index."""

    def __init__(self, tmp_path, **overrides):
        cfg = dict(
            root_dir=str(tmp_path),
            mapped_file_size_commit_log=4096,
            mapped_file_size_consume_queue=4 * 20,
            max_hash_slot_num=4,
            max_index_num=6,
            preallocate=False,
        )
        cfg.update(overrides)
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.cfg = StoreConfig(**cfg)
        self.checkpoint = StoreCheckpoint(self.cfg.checkpoint_path)
        self.commit_log = CommitLog(self.cfg, self.checkpoint)
        self.commit_log.load()
        self.cqs = ConsumeQueueTable.from_config(self.cfg)
        self.index = IndexService.from_config(self.cfg, self.checkpoint)
        self.reput = ReputMessageService(self.commit_log, self.cqs, self.index, checkpoint=self.checkpoint)
        self.ts = T0

    def put(self, *msgs):
        self.ts += 1000
        batch = self.commit_log.encode_batch(list(msgs), self.ts, HOST, "DefaultCluster")
        results = self.commit_log.apply_batch(batch)
        self.reput.notify()
        return results

    def close(self):
        self.reput.shutdown()
        self.index.close()
        self.cqs.close()
        self.commit_log.close()
        self.checkpoint.shutdown()


def msg(topic="T", qid=0, tags=None, keys=None, body=b"x" * 300, sys_flag=0):
    props = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    return Message(
        topic=topic, queue_id=qid, body=body, properties=props, sys_flag=sys_flag, born_timestamp=T0
    )


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    yield s
    s.close()


def test_dispatch_across_segment_rolls_builds_queues_and_index(store):
    results = []
    for i in range(30):
        results += store.put(msg(qid=i % 2, tags=f"tag{i % 3}", keys=f"k{i} common"))
    assert len(store.commit_log.mapped_file_queue.mapped_files) > 2  # blank records and rolls were crossed
    assert store.reput.do_reput() == 30
    assert store.reput.dispatch_behind_bytes() == 0
    for qid in (0, 1):
        cq = store.cqs.get("T", qid)
        units = cq.read_units(0, 100)
        expected = [r for r in results if r.queue_id == qid]
        assert [(u[0], u[1]) for u in units] == [(r.physical_offset, r.wrote_bytes) for r in expected]
        assert [u[2] for u in units] == [java_string_hash(f"tag{i % 3}") for i in range(qid, 30, 2)]
        assert cq.get_max_offset_in_queue() == 15
    hit = store.index.query_offset("T", "k7", 10, 0, 2**62).phy_offsets
    assert hit == [results[7].physical_offset]
    uniq = decode_record(
        store.commit_log.get_message(results[3].physical_offset, results[3].wrote_bytes)
    ).message.uniq_key
    assert store.index.query_offset("T", uniq, 10, 0, 2**62).phy_offsets == [results[3].physical_offset]
    assert len(store.index.query_offset("T", "common", 64, 0, 2**62).phy_offsets) == 30
    assert store.checkpoint.logics_msg_timestamp == store.ts


def test_transaction_types(store):
    store.put(msg(keys="prep", sys_flag=TRANSACTION_PREPARED_TYPE))
    store.put(msg(keys="roll", sys_flag=TRANSACTION_ROLLBACK_TYPE))
    commit = store.put(msg(keys="comm", sys_flag=TRANSACTION_COMMIT_TYPE))[0]
    plain = store.put(msg(keys="plain"))[0]
    store.reput.do_reput()
    units = store.cqs.get("T", 0).read_units(0, 10)
    assert [u[0] for u in units] == [commit.physical_offset, plain.physical_offset]
    q = store.index.query_offset
    assert q("T", "prep", 5, 0, 2**62).phy_offsets != []
    assert q("T", "roll", 5, 0, 2**62).phy_offsets == []
    assert q("T", "comm", 5, 0, 2**62).phy_offsets == [commit.physical_offset]


def test_confirm_offset_bounds_dispatch(store):
    rs = [store.put(msg(keys=f"k{i}"))[0] for i in range(6)]
    store.reput.confirm_offset = rs[3].physical_offset  # only records 0..2 are committed
    assert store.reput.do_reput() == 3
    assert store.cqs.get("T", 0).get_max_offset_in_queue() == 3
    assert store.reput.dispatch_behind_bytes() == 0
    assert store.index.query_offset("T", "k3", 5, 0, 2**62).phy_offsets == []
    store.reput.confirm_offset = rs[5].physical_offset + rs[5].wrote_bytes
    assert store.reput.dispatch_behind_bytes() == 3 * rs[5].wrote_bytes
    assert store.reput.do_reput() == 3
    store.reput.confirm_offset = None  # single node: the whole log
    assert store.reput.dispatch_behind_bytes() == 0


def test_listeners_hear_once_per_queue_per_pass_with_the_new_max(store):
    heard = []
    store.reput.add_arrival_listener(lambda t, q, m: heard.append((t, q, m)))
    store.reput.add_arrival_listener(lambda t, q, m: 1 / 0)  # a failing listener harms nobody
    for _ in range(5):
        store.put(msg(qid=0), msg(qid=0), msg(topic="U", qid=3))
    store.reput.do_reput()
    assert sorted(heard) == [("T", 0, 10), ("U", 3, 5)]
    heard.clear()
    store.put(msg(topic="U", qid=3))
    store.reput.do_reput()
    assert heard == [("U", 3, 6)]


def test_redispatch_is_idempotent(store):
    for i in range(12):
        store.put(msg(keys=f"k{i}"))
    store.reput.do_reput()
    before = store.cqs.get("T", 0).read_units(0, 100)
    entries = sum(f.index_count - 1 for f in store.index.index_files)
    hits = {k: store.index.query_offset("T", f"k{k}", 10, 0, 2**62).phy_offsets for k in range(12)}
    store.reput.reput_from_offset = 0  # as after an abnormal restart
    assert store.reput.do_reput() == 12
    assert store.cqs.get("T", 0).read_units(0, 100) == before
    # only the last record is indexed again (RocketMQ's rule, see IndexService.build_index): uniq key + k11
    assert sum(f.index_count - 1 for f in store.index.index_files) == entries + 2
    assert {
        k: sorted(set(store.index.query_offset("T", f"k{k}", 10, 0, 2**62).phy_offsets)) for k in range(12)
    } == hits


def _corrupt(store, phy, rel, data):
    mf = store.commit_log.mapped_file_queue.find_mapped_file_by_offset(phy)
    mf.write_at(phy - mf.file_from_offset + rel, data)


def test_length_mismatch_is_skipped(store):
    rs = [store.put(msg(keys=f"k{i}"))[0] for i in range(3)]
    # the properties length no longer adds up to TOTALSIZE: RocketMQ's reput skips the record
    raw = store.commit_log.get_message(rs[1].physical_offset, rs[1].wrote_bytes)
    rec = decode_record(raw).message
    props_bytes = len("\x02".join(f"{k}\x01{v}" for k, v in rec.properties.items()).encode())
    props_len_at = rs[1].wrote_bytes - props_bytes - 2
    assert struct.unpack_from(">h", raw, props_len_at)[0] == props_bytes
    _corrupt(store, rs[1].physical_offset, props_len_at, struct.pack(">h", props_bytes - 1))
    assert store.reput.do_reput() == 2
    units = store.cqs.get("T", 0).read_units(0, 10)
    # queue offset 1 is a hole: a blank unit keeps offset 2 in its place
    assert units == [
        (rs[0].physical_offset, rs[0].wrote_bytes, 0),
        (0, BLANK_UNIT_SIZE, 0),
        (rs[2].physical_offset, rs[2].wrote_bytes, 0),
    ]
    assert store.reput.dispatch_behind_bytes() == 0


def test_bad_record_stops_dispatch_there(store):
    rs = [store.put(msg(keys=f"k{i}"))[0] for i in range(4)]
    _corrupt(store, rs[2].physical_offset, 4, b"\x00\x00\x00\x01")  # bad magic
    assert store.reput.do_reput() == 2
    assert store.reput.reput_from_offset == rs[2].physical_offset
    assert store.reput.last_stop == "bad record"
    assert str(rs[2].physical_offset) in store.reput.last_error
    assert store.reput.dispatch_behind_bytes() > 0
    assert store.reput.do_reput() == 0  # stays there, no spinning through garbage


def test_reput_offset_below_the_commit_log_minimum_jumps(store):
    for _ in range(40):
        store.put(msg())
    mfq = store.commit_log.mapped_file_queue
    first = mfq.mapped_files[0]
    mfq.delete_expired_file_by_time(0, 0, 0, True)  # retention removed the oldest segments
    assert mfq.get_min_offset() > first.file_from_offset
    n = store.reput.do_reput()
    assert store.reput.reput_from_offset == store.commit_log.max_offset
    assert 0 < n < 40


def test_thread_wakes_on_notify_and_drains_on_shutdown(tmp_path):
    s = Store(tmp_path)
    got = threading.Event()
    s.reput.add_arrival_listener(lambda t, q, m: got.set() if m == 3 else None)
    s.reput.start()
    try:
        s.put(msg(), msg(), msg())
        assert got.wait(10)
        assert s.reput.wait_dispatched(timeout=10)
        for _ in range(5):
            s.put(msg())
    finally:
        s.close()  # shutdown drains what was written before stopping
    assert s.cqs.get("T", 0).get_max_offset_in_queue() == 8


def test_paused_holds_dispatch(tmp_path):
    s = Store(tmp_path)
    s.reput.start()
    try:
        with s.reput.paused():
            s.put(msg())
            assert not s.reput.wait_dispatched(timeout=0.2)
        assert s.reput.wait_dispatched(timeout=10)
    finally:
        s.close()


def test_replicas_build_byte_identical_queues_and_index(tmp_path):
    a = Store(tmp_path / "a")
    b = Store(tmp_path / "b")
    try:
        for i in range(25):
            batch = a.commit_log.encode_batch(
                [msg(qid=i % 3, tags=f"t{i % 2}", keys=f"k{i} x{i % 4}")],
                T0 + i * 700,
                HOST,
                "DefaultCluster",
            )
            a.commit_log.apply_batch(batch)
            b.commit_log.apply_batch(batch)  # the replicated command, applied on another replica
        a.reput.do_reput()
        b.reput.batch_bytes = 1000  # dispatched in other slices: same bytes anyway
        b.reput.do_reput()

        def files(root, sub):
            base = root / sub
            return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}

        assert files(tmp_path / "a", "consumequeue") == files(tmp_path / "b", "consumequeue")
        idx_a = list(files(tmp_path / "a", "index").values())
        idx_b = list(files(tmp_path / "b", "index").values())
        assert len(idx_a) > 1 and idx_a == idx_b  # names carry the local clock; contents are identical
    finally:
        a.close()
        b.close()


def test_concurrent_writer_reader_and_reput_thread(tmp_path):
    s = Store(tmp_path)
    s.reput.start()
    stop = threading.Event()
    seen_max = []
    errors = []

    def reader():
        while not stop.is_set():
            cq = s.cqs.get("T", 0)
            if cq is None:
                time.sleep(0.001)
                continue
            mx = cq.get_max_offset_in_queue()
            units = cq.read_units(0, mx)
            try:
                assert len(units) == mx  # everything below max is readable
                assert all(u[1] > 0 for u in units)
                seen_max.append(mx)
            except AssertionError as e:  # reported to the main thread
                errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(60):
            s.put(msg(keys=f"k{i}"), msg(keys=f"j{i}"))
        assert s.reput.wait_dispatched(timeout=20)
    finally:
        stop.set()
        t.join()
        s.close()
    assert not errors
    assert s.cqs.get("T", 0).get_max_offset_in_queue() == 120
    assert seen_max == sorted(seen_max)  # the queue only grows


def test_confirm_offset_inside_a_record_waits_for_the_rest(store):
    rs = [store.put(msg(keys=f"k{i}"))[0] for i in range(3)]
    store.reput.confirm_offset = rs[1].physical_offset + 50  # mid-record: not committed as a whole yet
    assert store.reput.do_reput() == 1
    assert store.reput.last_stop == "" and store.reput.last_error == ""
    assert store.reput.reput_from_offset == rs[1].physical_offset
    store.reput.confirm_offset = None
    assert store.reput.do_reput() == 2


def test_disk_error_is_retried_without_losing_records(store, monkeypatch):
    from raftmq.store.consume_queue import ConsumeQueue

    real = ConsumeQueue.put_message_position_info
    failures = iter([True, False])

    def flaky(self, *args):
        if next(failures, False):
            raise OSError(28, "No space left on device")
        return real(self, *args)

    monkeypatch.setattr(ConsumeQueue, "put_message_position_info", flaky)
    rs = [store.put(msg())[0] for _ in range(3)]
    assert store.reput.do_reput() == 0
    assert store.reput.last_stop == "write error" and "No space left" in store.reput.last_error
    assert store.reput.reput_from_offset == rs[0].physical_offset
    assert store.reput.do_reput() == 3  # the next pass (after retry_wait_ms on the thread) catches up
    assert [u[0] for u in store.cqs.get("T", 0).read_units(0, 10)] == [r.physical_offset for r in rs]


def _tree_bytes(root):
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def _varied_messages():
    """Records that take reput's one-unpack path and every kind that must take the general one."""
    odd = "KEYS\x01\x02KEYS\x01a  b\x02TAGS\x01\x02TAGS\x01t\x01x\x02UNIQ_KEY\x01u1\x02\x01v\x02KEYS"
    yield from (msg(qid=i % 3, tags=f"t{i % 2}", keys=f"k{i} order-{i}") for i in range(12))
    yield Message(topic="T", body=b"odd", properties_string=odd, born_timestamp=T0)  # exact stored string
    yield Message(topic="T", body=b"", properties_string="", born_timestamp=T0)  # no properties at all
    yield Message(topic="T", body=b"v6", properties={"KEYS": "v6key"}, born_host=("::1", 7), born_timestamp=T0)
    yield Message(topic="T2", body=b"x", properties={"KEYS": "é中 \U0001f600"}, born_timestamp=T0)
    yield Message(topic=SCHEDULE_TOPIC, body=b"d", properties={"DELAY": "3", "KEYS": "dk", "REAL_TOPIC": "T",
                                                               "REAL_QID": "0"}, born_timestamp=T0)
    for flag in (TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
        yield msg(qid=1, keys=f"tx{flag}", sys_flag=flag)
    yield msg(keys="order-2576199t3")  # T#order-2576199t3 hashes to Integer.MIN_VALUE: index hash 0


def test_reput_builds_the_files_record_by_record_dispatch_builds(tmp_path):
    """The batched reput (one-unpack decode, cached key hashes, one index pass) against the plain RocketMQ
    loop: checkMessageAndReturnSize, putMessagePositionInfo and buildIndex on each record, file bytes equal."""
    s = Store(tmp_path / "store", max_index_num=7)
    try:
        for m in _varied_messages():
            s.put(m)
        s.put(*[msg(qid=2, keys=f"batch{i}") for i in range(30)])
        cfg = s.cfg

        def pieces(name):
            cqs = ConsumeQueueTable(str(tmp_path / name / "cq"), cfg.consume_queue_file_size, preallocate=False)
            index = IndexService(str(tmp_path / name / "index"), cfg.max_hash_slot_num, cfg.max_index_num,
                                 preallocate=False, clock=lambda: T0)
            return cqs, index

        cqs, index = pieces("batched")
        reput = ReputMessageService(s.commit_log, cqs, index, batch_bytes=1500)  # several slices
        assert reput.do_reput() == 51

        ref_cqs, ref_index = pieces("plain")
        cl = s.commit_log
        offset, n = 0, 0
        while offset < cl.max_offset:
            view = cl.get_data(offset, cl.max_offset)
            dr = cl.check_message_and_return_size(view, 0, len(view), False)
            view.release()
            if dr.msg_size == 0:
                offset = cl.roll_next_file(offset)
                continue
            assert dr.success
            if dr.goes_to_consume_queue:
                assert ref_cqs.find_or_create(dr.topic, dr.queue_id).put_message_position_info(
                    dr.commit_log_offset, dr.msg_size, dr.tags_code, dr.consume_queue_offset)
            ref_index.build_index(dr)
            offset += dr.msg_size
            n += 1
        assert n == 51
        for built in (cqs, index, ref_cqs, ref_index):
            built.close()
        assert _tree_bytes(tmp_path / "batched") == _tree_bytes(tmp_path / "plain")
        assert len(os.listdir(tmp_path / "plain" / "index")) > 3  # the index rolled over files
    finally:
        s.close()


def test_disk_error_in_a_unit_continuing_the_queue_is_retried(store, monkeypatch):
    """The consume queue's common branch (a unit continuing its last file) failing on the disk."""
    from raftmq.store.mapped_file import MappedFile

    first = [store.put(msg(keys=f"a{i}"))[0] for i in range(2)]
    assert store.reput.do_reput() == 2  # the queue has its file: the next units continue it
    rs = [store.put(msg(keys=f"b{i}"))[0] for i in range(2)]
    real = MappedFile.append
    failures = iter([False, True])  # the second unit of the pass fails

    def flaky(self, data):
        if "consumequeue" in self.path and next(failures, False):
            raise OSError(5, "Input/output error")
        return real(self, data)

    monkeypatch.setattr(MappedFile, "append", flaky)
    assert store.reput.do_reput() == 1
    assert store.reput.last_stop == "write error" and "Input/output error" in store.reput.last_error
    assert store.reput.reput_from_offset == rs[1].physical_offset
    assert store.index.query_offset("T", "b0", 10, 0, 1 << 62).phy_offsets == [rs[0].physical_offset]
    assert store.reput.do_reput() == 1
    units = store.cqs.get("T", 0).read_units(0, 10)
    assert [u[0] for u in units] == [r.physical_offset for r in first + rs]
    assert store.index.query_offset("T", "b1", 10, 0, 1 << 62).phy_offsets == [rs[1].physical_offset]


def test_queues_are_complete_up_to_the_last_unit_written_anywhere(store, monkeypatch):
    """Recovery takes the largest unit end over all queues as dispatched; a pass stopped part way (here a
    disk error, in life a kill) must leave every queue complete below it, so units go in commit-log order."""
    from raftmq.store.mapped_file import MappedFile

    rs = store.put(*[msg(qid=i % 3, keys=f"k{i}") for i in range(12)])
    real = MappedFile.append
    calls = iter(range(100))

    def flaky(self, data):
        if "consumequeue" in self.path and next(calls) == 7:
            raise OSError(5, "Input/output error")
        return real(self, data)

    monkeypatch.setattr(MappedFile, "append", flaky)
    assert store.reput.do_reput() == 7
    written = set()
    for q in range(3):
        written |= {u[0] for u in store.cqs.get("T", q).read_units(0, 10)}
    assert written == {r.physical_offset for r in rs[:7]}
    assert store.cqs.max_physic_offset() == rs[7].physical_offset  # = the end of record 6
    assert store.reput.reput_from_offset == rs[7].physical_offset


class _RecordingQueues:
    """A consume-queue table that records the units it is given, per queue, in order."""

    def __init__(self):
        self.units = {}

    def find_or_create(self, topic, queue_id):
        table = self

        class Queue:
            def put_message_position_info(self, *unit):
                table.units.setdefault((topic, queue_id), []).append(unit)
                return True

        return Queue()


class _PlainLog:
    file_size = 1 << 40
    delay_level_ms = [1000, 5000, 10000]

    def check_message_and_return_size(self, buf, pos, limit, check_crc):
        return decode_dispatch(buf, pos, check_crc=check_crc, limit=limit, delay_level_ms=self.delay_level_ms)

    def roll_next_file(self, offset):
        return -1


_PAIR = st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "X", ""]),
                  st.sampled_from(["", "3", "a b", " k ", "é", "\x01"]))
_PROPS = st.one_of(
    st.lists(_PAIR, max_size=5).map(lambda pairs: "\x02".join(f"{k}\x01{v}" for k, v in pairs)),
    st.lists(st.sampled_from(["TAGS", "KEYS", "\x01", "\x02", "a", " "]), max_size=8).map("".join),
)
_RECORD = st.tuples(_PROPS, st.sampled_from(["T", SCHEDULE_TOPIC, "TxTxTx"]), st.integers(0, 5),
                    st.sampled_from([0, 4, 8, 12, 1]), st.sampled_from(["127.0.0.1", "::1"]),
                    st.sampled_from(["127.0.0.1", "::2"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_RECORD, min_size=1, max_size=6), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
       max_size=3), st.integers(0, 10_000))
@example([("DELAY\x013\x02TAGS\x01t", SCHEDULE_TOPIC, 0, 0, "127.0.0.1", "127.0.0.1")], [], 10_000)
@example([("KEYS\x01k", "T", 0, 12, "127.0.0.1", "127.0.0.1"), ("TAGS\x01t", "T", 1, 0, "::1", "127.0.0.1")],
         [], 10_000)
def test_reput_decodes_every_record_as_check_message_and_return_size_does(records, flips, cut):
    """Reput's one-unpack reading of common records against the general decoder, on valid, corrupted and cut
    bytes: the same units per queue, index records, count and next offset."""
    data, phy = bytearray(), 0
    for i, (props, topic, body, sys_flag, born, stored) in enumerate(records):
        rec = encode_record(topic=topic, body=bytes(body), properties=props, queue_id=i % 2, queue_offset=i,
                            physical_offset=phy, sys_flag=sys_flag, born_host=(born, 1), store_timestamp=5000 + i,
                            store_host=(stored, 2))
        data += rec
        phy += len(rec)
    for at, value in flips:
        data[at % len(data)] = value
    view = memoryview(bytes(data[: max(cut, len(data) // 2)]))
    log = _PlainLog()

    queues, index = _RecordingQueues(), []
    reput = ReputMessageService(log, queues, None)
    count, next_offset, _ts, _stop = reput._dispatch_records(view, 0, 1 << 30, {}, index)

    want_units, want_index, want_count, pos = {}, [], 0, 0
    while pos < len(view):  # the plain loop: the general decoder on every record
        dr = log.check_message_and_return_size(view, pos, len(view), False)
        if dr.success and dr.msg_size == 0:
            pos = -1
            break
        if not dr.success:
            if dr.msg_size <= 0:
                break
            pos += dr.msg_size
            continue
        if dr.goes_to_consume_queue:
            want_units.setdefault((dr.topic, dr.queue_id), []).append(
                (dr.commit_log_offset, dr.msg_size, dr.tags_code, dr.consume_queue_offset))
        rollback = not dr.goes_to_index
        want_index.append((dr.commit_log_offset, dr.store_timestamp, dr.topic, None if rollback else dr.keys,
                           None if rollback else dr.uniq_key))
        want_count += 1
        pos += dr.msg_size
    assert (queues.units, index, count, next_offset) == (want_units, want_index, want_count, pos)
