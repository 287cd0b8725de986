"""Consume queues and index files are derived data: damage to them is rebuilt from the commit log at start.

Each test writes a real store, stops it, damages real files with real byte writes, opens it again and checks
that every message is consumable at its original queue offset, that query by key finds every message, that
the next send gets the next offset (never a reused one), and that the rebuilt consume-queue files are byte
for byte the ones reput wrote the first time.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from raftmq.store import GetStatus, Message, MessageStore, PutStatus, StoreConfig
from tests.store.store_helpers import segment_files, tree_bytes

CQ_UNITS_PER_FILE = 100
QUEUE0_MESSAGES = 504  # 6 consume-queue files on queue 0: first, middle and last differ


def _cfg(root: Path, **kw) -> StoreConfig:
    base = dict(root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                mapped_file_size_consume_queue=CQ_UNITS_PER_FILE * 20, max_hash_slot_num=64,
                max_index_num=300, preallocate=False)
    base.update(kw)
    return StoreConfig(**base)


def _msg(i: int, qid: int, topic: str = "T") -> Message:
    return Message(topic=topic, queue_id=qid, body=f"body-{topic}-{qid}-{i}".encode() * 3,
                   properties={"KEYS": f"key-{topic}-{qid}-{i}", "TAGS": f"tag{i % 3}"},
                   born_timestamp=1_700_000_000_000 + i, born_host=("10.0.0.9", 4000))


@pytest.fixture
def written(tmp_path):
    """A cleanly stopped store: queue T-0 has 504 messages, T-1 has 252, U-0 has 126 (interleaved)."""
    root = tmp_path / "s"
    st = MessageStore(_cfg(root))
    st.open()
    sent = []
    for i in range(QUEUE0_MESSAGES):
        batch = [_msg(i, 0)]
        if i % 2 == 0:
            batch.append(_msg(i // 2, 1))
        if i % 4 == 0:
            batch.append(_msg(i // 4, 0, "U"))
        for m, r in zip(batch, st.put_messages(batch), strict=True):
            assert r.status is PutStatus.PUT_OK
            sent.append((m.topic, m.queue_id, r.queue_offset, m.properties["KEYS"], m.body))
    assert st.reput.wait_dispatched(timeout=30)
    st.shutdown()
    return root, sent, tree_bytes(root / "consumequeue")


def _cq_files(root: Path, topic: str = "T", qid: int = 0) -> list[Path]:
    return segment_files(root / "consumequeue" / topic / str(qid))


def _reopen_and_check(root: Path, sent, reference_cq) -> MessageStore:
    st = MessageStore(_cfg(root))
    st.open()
    try:
        for topic, qid in {(t, q) for t, q, *_ in sent}:
            expected = [(o, k, b) for t, q, o, k, b in sent if (t, q) == (topic, qid)]
            assert st.max_offset_in_queue(topic, qid) == len(expected), f"{topic}-{qid} lost units"
            got = []
            offset = 0
            while offset < len(expected):
                r = st.get_messages(topic, qid, offset, max_count=32)
                assert r.status is GetStatus.FOUND, (topic, qid, offset, r.status)
                got.extend((m.queue_offset, m.keys[0], m.body) for m in r.messages)
                offset = r.next_begin_offset
            assert got == expected
        for topic, _qid, _o, key, body in sent[::7] + sent[-5:]:
            found = st.query_messages(topic, key, 32, 0, 2**62)
            assert [m.body for m in found] == [body], f"query --key {key} finds {len(found)} messages"
        assert tree_bytes(root / "consumequeue") == reference_cq, "rebuilt consume queues differ from reput's"
        # the next send gets the next offset of each queue, never one consumers already passed
        nxt = st.put_messages([_msg(9999, 0)])[0]
        assert nxt.queue_offset == QUEUE0_MESSAGES
        nxt = st.put_messages([_msg(9999, 0, "U")])[0]
        assert nxt.queue_offset == QUEUE0_MESSAGES // 4
    except BaseException:
        st.shutdown()
        raise
    return st


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_random_bytes_in_a_consume_queue_file_are_rebuilt(written, which):
    root, sent, reference = written
    files = _cq_files(root)
    assert len(files) == 6
    target = {"first": files[0], "middle": files[3], "last": files[-1]}[which]
    rnd = random.Random(which)
    with open(target, "r+b") as f:
        f.seek(200 if which != "last" else 20)
        f.write(rnd.randbytes(40 if which == "last" else 2000 - 200))
    st = _reopen_and_check(root, sent, reference)
    assert st.derived_damage and "T-0" in st.derived_damage[0]
    st.shutdown()


@pytest.mark.parametrize("which", ["first", "middle"])
def test_zeros_in_a_consume_queue_file_are_rebuilt(written, which):
    root, sent, reference = written
    target = _cq_files(root)[0 if which == "first" else 2]
    with open(target, "r+b") as f:
        f.seek(400)
        f.write(bytes(800))
    _reopen_and_check(root, sent, reference).shutdown()


@pytest.mark.parametrize("which", ["first", "middle", "last", "queue"])
def test_a_deleted_consume_queue_file_is_rebuilt(written, which):
    root, sent, reference = written
    files = _cq_files(root, "U", 0) if which == "queue" else _cq_files(root)
    if which == "queue":
        shutil.rmtree(files[0].parent)
    else:
        os.unlink({"first": files[0], "middle": files[2], "last": files[-1]}[which])
    _reopen_and_check(root, sent, reference).shutdown()


def test_a_unit_pointing_at_another_record_is_rebuilt(written):
    """A unit that still looks valid (offset >= 0, size > 0) but names the wrong record is found too."""
    root, sent, reference = written
    target = _cq_files(root, "T", 1)[1]
    data = bytearray(target.read_bytes())
    data[20 * 7 : 20 * 8], data[20 * 9 : 20 * 10] = data[20 * 9 : 20 * 10], data[20 * 7 : 20 * 8]
    target.write_bytes(bytes(data))
    _reopen_and_check(root, sent, reference).shutdown()


@pytest.mark.parametrize("region", ["slots", "entries", "header"])
def test_a_corrupted_index_file_is_rebuilt(written, region):
    """Every index file's header is checked at start; damage inside a file older than the last clean stop is the
    scrubber's (issue 33: the start reads only what is new)."""
    from raftmq.store.scrubber import Scrubber

    root, sent, reference = written
    index_files = segment_files(root / "index")
    assert len(index_files) >= 3
    target = index_files[1]
    at = {"header": 16, "slots": 40 + 4 * 10, "entries": 40 + 64 * 4 + 20 * 50}[region]
    with open(target, "r+b") as f:
        f.seek(at)
        f.write(random.Random(region).randbytes(120) if region != "header" else (1 << 62).to_bytes(8, "big"))
    if region != "header":
        st = MessageStore(_cfg(root))
        st.open()
        try:
            assert st.derived_damage == []  # the start did not read the old file
            Scrubber(st, 1 << 30, 3600).run_pass()
            assert st.corruption_found["index"] == 1
        finally:
            st.shutdown()
    st = _reopen_and_check(root, sent, reference)
    if region == "header":
        assert any("index file" in d for d in st.derived_damage)
    st.shutdown()


def test_an_intact_store_is_left_alone(written):
    root, sent, reference = written
    before = tree_bytes(root / "index")
    st = _reopen_and_check(root, sent, reference)
    assert st.derived_damage == []
    st.shutdown()
    after = tree_bytes(root / "index")
    assert before.keys() == after.keys()


# ---------------------------------------------------------------------------------------------------- scrubber
def _damage_body_byte(root: Path, sent_index: int = 10) -> int:
    """Flip one body byte of an early record in the first (sealed) segment, through the file; returns its offset."""
    from raftmq.store.message import decode_record

    seg = segment_files(root / "commitlog")[0]
    data = seg.read_bytes()
    pos = 0
    for _ in range(sent_index):
        pos += decode_record(data, pos, check_crc=True).size
    at = pos + 100  # inside the body (the fixed part of a v4 record is 88 bytes + body length)
    with open(seg, "r+b") as f:
        f.seek(at)
        f.write(bytes([data[at] ^ 0x5A]))
    return int(seg.name) + pos


def test_scrubber_finds_a_flipped_byte_in_a_sealed_segment_and_a_damaged_unit(written):
    root, sent, reference = written
    st = MessageStore(_cfg(root, scrub_rate_bytes_per_s=64 << 20, scrub_interval_s=3600))
    st.open()
    try:
        heard = []
        st.add_commit_log_damage_listener(heard.extend)
        assert st.scrubber is not None
        # a unit of a queue whose records lie in sealed segments: wrong bytes written into the live file
        cq_file = _cq_files(root, "T", 1)[0]
        with open(cq_file, "r+b") as f:
            f.seek(20 * 3)
            f.write(random.Random(1).randbytes(20))
        bad_record = _damage_body_byte(root)
        dispatched = st.reput.reput_from_offset
        assert st.scrubber.run_pass() >= 2
        # the wrong unit was rewritten in place: no re-dispatch from far back, the queue never shrank
        assert st.reput.reput_from_offset == dispatched
        assert [(r.start, "CRC" in r.reason.upper()) for r in heard] == [(bad_record, True)], heard
        assert st.corruption_found["commitlog"] == 1 and st.corruption_found["consumequeue"] == 1
        assert st.commit_log_damage and st.commit_log_damage[0].start == bad_record
        assert st.reput.wait_dispatched(timeout=30)
        r = st.get_messages("T", 1, 0, max_count=8)
        assert [m.queue_offset for m in r.messages] == list(range(8))
        stats = st.stats()
        assert stats["scrub_bytes_total"] > 0 and stats["scrub_last_full_timestamp_ms"] > 0
        assert "1 commitlog" in st.integrity_summary() and "1 consumequeue" in st.integrity_summary()
    finally:
        st.shutdown()
    assert tree_bytes(root / "consumequeue") == reference


def test_scrubber_rebuilds_a_damaged_sealed_index_file(written):
    root, sent, reference = written
    st = MessageStore(_cfg(root, scrub_rate_bytes_per_s=64 << 20, scrub_interval_s=3600))
    st.open()
    try:
        target = segment_files(root / "index")[0]
        with open(target, "r+b") as f:
            f.seek(40 + 64 * 4 + 20 * 10)
            f.write(random.Random(7).randbytes(100))
        assert st.scrubber.run_pass() == 1
        assert st.corruption_found["index"] == 1
        assert st.reput.wait_dispatched(timeout=30)
        for topic, _qid, _o, key, body in sent[::5]:
            assert [m.body for m in st.query_messages(topic, key, 32, 0, 2**62)] == [body], key
    finally:
        st.shutdown()


def test_a_deleted_and_recreated_topic_is_not_resurrected(tmp_path):
    """Records of a deleted topic stay in the commit log; its queues must not come back, and after it is
    created again its new queue (offsets from 0 again) is not mistaken for damage."""
    root = tmp_path / "s"
    st = MessageStore(_cfg(root))
    st.open()
    st.put_messages([_msg(i, 0, "D") for i in range(30)] + [_msg(i, 0, "E") for i in range(30)])
    assert st.reput.wait_dispatched(timeout=30)
    st.delete_topic_files("E")
    st.delete_topic_files("D")
    second = st.put_messages([_msg(100 + i, 0, "D") for i in range(10)])  # D again: offsets restart at 0
    assert [r.queue_offset for r in second] == list(range(10))
    assert st.reput.wait_dispatched(timeout=30)
    st.shutdown()
    before = tree_bytes(root / "consumequeue")
    st = MessageStore(_cfg(root))
    st.open()
    try:
        assert st.derived_damage == []
        assert not (root / "consumequeue" / "E").exists()
        assert tree_bytes(root / "consumequeue") == before
        assert st.put_messages([_msg(200, 0, "D")])[0].queue_offset == 10
    finally:
        st.shutdown()


def test_delayed_messages_are_checked_with_their_delivery_time_and_rebuilt(tmp_path):
    """Schedule-topic units carry a delivery time as tags code: an intact queue is not damage, a damaged one is
    rebuilt with the same delivery times."""
    root = tmp_path / "s"
    st = MessageStore(_cfg(root))
    st.open()
    msgs = []
    for i in range(40):
        m = _msg(i, 0, "Later")
        m.properties["DELAY"] = str(1 + i % 3)
        msgs.append(m)
    st.put_messages(msgs)
    assert st.reput.wait_dispatched(timeout=30)
    st.shutdown()
    reference = tree_bytes(root / "consumequeue")
    st = MessageStore(_cfg(root))
    st.open()
    st.shutdown()
    assert st.derived_damage == []
    schedule = sorted((root / "consumequeue" / "SCHEDULE_TOPIC_XXXX").iterdir())
    target = segment_files(schedule[0])[0]
    with open(target, "r+b") as f:
        f.seek(20 * 2 + 12)  # one unit's tags code (its delivery time)
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07")
    st = MessageStore(_cfg(root))
    st.open()
    try:  # older than the last clean stop: the scrubber's (it scrubs the segment being written up to dispatch)
        from raftmq.store.scrubber import Scrubber

        assert st.derived_damage == []
        Scrubber(st, 1 << 30, 3600).run_pass()
        assert st.corruption_found["consumequeue"] == 1
    finally:
        st.shutdown()
    assert tree_bytes(root / "consumequeue") == reference


@pytest.mark.parametrize("which", ["last", "all"])
def test_deleted_index_files_are_rebuilt(written, which):
    root, sent, reference = written
    files = segment_files(root / "index")
    for f in files[-1:] if which == "last" else files:
        f.unlink()
    st = _reopen_and_check(root, sent, reference)
    assert any("index" in d for d in st.derived_damage), st.derived_damage
    st.shutdown()


def test_a_deleted_middle_index_file_is_rebuilt(written):
    root, sent, reference = written
    files = segment_files(root / "index")
    assert len(files) >= 3
    files[1].unlink()
    st = _reopen_and_check(root, sent, reference)
    assert any("index file" in d and "missing" in d for d in st.derived_damage), st.derived_damage
    st.shutdown()


def _queue_offsets(st: MessageStore, topic: str, qid: int, start: int = 0, **kw) -> list[int]:
    got, offset = [], start
    while offset < st.max_offset_in_queue(topic, qid):
        r = st.get_messages(topic, qid, offset, max_count=32, **kw)
        got += [m.queue_offset for m in r.messages]
        offset = r.next_begin_offset
    return got


def test_a_read_rebuilds_wrong_units_before_it_answers(written):
    """Issue 33 item 2: units are checked against their records on every read, tag-filtered ones included."""
    from raftmq.store.tag_filter import TagFilter

    root, sent, reference = written
    st = MessageStore(_cfg(root, check_derived_files_on_start=False))
    st.open()
    try:
        files = _cq_files(root)
        with open(files[1], "r+b") as f:  # units 110..113: random pointers, sizes and tags codes
            f.seek(20 * 10 + 7)
            f.write(random.Random(11).randbytes(64))
        with open(files[3], "r+b") as f:  # unit 330 points at the next record of its queue
            unit = bytearray(f.read())
            unit[20 * 30 : 20 * 31] = unit[20 * 31 : 20 * 32]
            f.seek(0)
            f.write(unit)
        assert _queue_offsets(st, "T", 0) == list(range(QUEUE0_MESSAGES))
        assert st.corruption_found["consumequeue"] == 2
        with open(files[2], "r+b") as f:  # the tags code of unit 250 (tag1) rots: a tag0 filter must not skip it
            f.seek(20 * 50 + 12)
            f.write(b"\x00\x00\x00\x00\x0f\x0f\x0f\x0f")
        assert _queue_offsets(st, "T", 0, tag_filter=TagFilter.parse("tag1")) == list(range(1, QUEUE0_MESSAGES, 3))
        assert st.corruption_found["consumequeue"] == 3
    finally:
        st.shutdown()
    assert tree_bytes(root / "consumequeue") == reference


def test_a_unit_that_cannot_be_rebuilt_stops_the_read_with_data_loss(written):
    """Its record is damaged too (no magic): the log cannot say where the unit should point, so the read returns
    what precedes it and the next read refuses; nothing after it is skipped."""
    from raftmq.store.errors import ConsumeQueueUnitError

    root, sent, _reference = written
    st = MessageStore(_cfg(root, check_derived_files_on_start=False))
    st.open()
    try:
        phy = st.consume_queues.get("T", 0).unit_at(40)[0]
        seg = segment_files(root / "commitlog")[phy // (64 * 1024)]
        with open(seg, "r+b") as f:
            f.seek(phy % (64 * 1024) + 4)
            f.write(b"\x00\x11\x22\x33")  # its magic code
        with open(_cq_files(root)[0], "r+b") as f:
            f.seek(20 * 40)
            f.write(b"\x00" * 7 + b"\x05")
        r = st.get_messages("T", 0, 32, max_count=32)
        assert [m.queue_offset for m in r.messages] == list(range(32, 40)) and r.next_begin_offset == 40
        with pytest.raises(ConsumeQueueUnitError, match=r"T-0: the unit at queue offset 40 .*could not be rebuilt"):
            st.get_messages("T", 0, 40, max_count=32)
        assert st.corruption_found["consumequeue"] == 1
        # the walk met the damaged record: it is reported as commit-log damage (counted, repair listeners told)
        assert st.corruption_found["commitlog"] == 1 and st.commit_log_damage[0].start == phy
    finally:
        st.shutdown()


def test_after_a_clean_stop_the_start_checks_only_what_is_new(written):
    """Issue 33 item 7: the start compared every record of the log with the derived files (3.4 s of a 5.2 s start
    with 600k records). After a clean stop nothing is new: the stop recorded how far dispatch had reached."""
    root, sent, _reference = written
    (root / "dispatched.json").unlink()  # a store from before the marker existed: checked whole, once
    st = MessageStore(_cfg(root))
    st.open()
    assert st.start_check_records == len(sent)
    st.put_messages([_msg(9999, 1)])
    st.shutdown()
    st = MessageStore(_cfg(root))
    st.open()
    try:
        assert st.start_check_records == 0 and st.derived_damage == []
        assert not (root / "dispatched.json").exists()  # it describes the files only until they change
    finally:
        st.shutdown()
    assert (root / "dispatched.json").exists()
