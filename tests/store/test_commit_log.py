import hashlib
import logging
import os

import pytest

from raftmq.store.commit_log import CommitLog
from raftmq.store.config import StoreConfig
from raftmq.store.errors import (
    BatchFormatError,
    MessageIllegalError,
    OffsetMismatchError,
    PropertiesSizeExceededError,
)
from raftmq.store.message import TRANSACTION_PREPARED_TYPE, Message, decode_record

SEG = 4096


def _cl(tmp_path, name="s", **kw):
    cfg = StoreConfig(root_dir=str(tmp_path / name), mapped_file_size_commit_log=SEG, **kw)
    cl = CommitLog(cfg)
    cl.load()
    return cl


def _msgs(n, topic="T", qid=0, size=100, start=0):
    return [Message(topic=topic, queue_id=qid, body=bytes([65 + (start + i) % 26]) * size,
                    properties={"TAGS": "a", "KEYS": f"k{start + i}", "UNIQ_KEY": f"U{start + i}"},
                    born_timestamp=1, born_host=("10.0.0.1", 5)) for i in range(n)]


def _encode(cl, msgs, ts=1000):
    return cl.encode_batch(msgs, ts, ("127.0.0.1", 10911), "DefaultCluster")


def _digest(cl):
    h = hashlib.sha256()
    for mf in cl.mapped_file_queue.mapped_files:
        h.update(mf.file_name.encode())
        h.update(mf.read_bytes(0, mf.file_size))
    return h.hexdigest()


def test_apply_assigns_offsets_and_patches_records(tmp_path):
    cl = _cl(tmp_path)
    rs = cl.apply_batch(_encode(cl, _msgs(3)))
    rs += cl.apply_batch(_encode(cl, _msgs(2, qid=1) + _msgs(1, start=3)))
    assert [(r.queue_id, r.queue_offset) for r in rs] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (0, 3)]
    assert rs[0].physical_offset == 0 and rs[1].physical_offset == rs[0].wrote_bytes
    for r in rs:
        m = decode_record(cl.get_message(r.physical_offset, r.wrote_bytes)).message
        assert (m.queue_offset, m.physical_offset, m.queue_id) == (r.queue_offset, r.physical_offset, r.queue_id)
        assert m.store_timestamp == 1000 and m.properties["CLUSTER"] == "DefaultCluster"
        assert m.msg_id == r.msg_id
    assert cl.topic_queue_table == {"T-0": 4, "T-1": 2}


def test_prepared_records_do_not_advance_queue_offset(tmp_path):
    cl = _cl(tmp_path)
    msgs = _msgs(2)
    msgs[0].sys_flag = TRANSACTION_PREPARED_TYPE
    rs = cl.apply_batch(_encode(cl, msgs))
    assert [r.queue_offset for r in rs] == [0, 0] and cl.topic_queue_table == {"T-0": 1}


def test_blank_record_and_roll_move_a_batch_whole(tmp_path):
    cl = _cl(tmp_path)
    r1 = cl.apply_batch(_encode(cl, _msgs(10, size=250)))  # ~3.5 KiB
    end1 = cl.max_offset
    r2 = cl.apply_batch(_encode(cl, _msgs(3, size=250, start=10)))  # does not fit the rest: moves whole
    assert r2[0].physical_offset == SEG and cl.max_offset == SEG + sum(r.wrote_bytes for r in r2)
    first = cl.mapped_file_queue.mapped_files[0]
    assert first.is_full()
    raw = first.read_bytes(end1, 8)
    assert int.from_bytes(raw[:4], "big") == SEG - end1 and raw[4:] == bytes.fromhex("cbd43194")
    assert [r.queue_offset for r in r1 + r2] == list(range(13))


def test_batch_larger_than_a_segment_spreads_over_segments(tmp_path):
    cl = _cl(tmp_path)
    rs = cl.apply_batch(_encode(cl, _msgs(40, size=300)))  # ~16 KiB
    assert len(cl.mapped_file_queue.mapped_files) >= 4
    for r in rs:
        assert r.physical_offset // SEG == (r.physical_offset + r.wrote_bytes - 1) // SEG
        assert decode_record(cl.get_message(r.physical_offset, r.wrote_bytes)).ok
    assert [r.queue_offset for r in rs] == list(range(40))


def test_two_replicas_applying_the_same_frames_are_byte_identical(tmp_path):
    leader = _cl(tmp_path, "leader")
    frames = [_encode(leader, _msgs(7, qid=i % 3, size=90 + 40 * i, start=i * 7), ts=1000 + i) for i in range(12)]
    a, b = _cl(tmp_path, "a"), _cl(tmp_path, "b")
    ra = [x.physical_offset for f in frames for x in a.apply_batch(f)]
    rb = [x.physical_offset for f in frames for x in b.apply_batch(f)]
    assert ra == rb and _digest(a) == _digest(b)
    assert len(a.mapped_file_queue.mapped_files) > 2


def test_limits_are_clear_errors(tmp_path):
    cl = _cl(tmp_path, max_message_size=1000)
    with pytest.raises(MessageIllegalError, match="max_message_size"):
        _encode(cl, [Message(topic="T", body=b"x" * 1001)])
    with pytest.raises(MessageIllegalError, match="127"):
        _encode(cl, [Message(topic="T" * 128, body=b"x")])
    with pytest.raises(MessageIllegalError, match="characters outside"):
        _encode(cl, [Message(topic="bad topic", body=b"x")])
    with pytest.raises(MessageIllegalError, match="empty"):
        _encode(cl, [])
    with pytest.raises(MessageIllegalError, match="separator"):
        _encode(cl, [Message(topic="T", body=b"x", properties={"a": "b\x01c"})])
    big = _cl(tmp_path, "big")
    big.file_size = 1 << 20  # property limit, not segment size, must trigger
    big.config.mapped_file_size_commit_log = 1 << 20
    with pytest.raises(PropertiesSizeExceededError):
        _encode(big, [Message(topic="T", body=b"x", properties={"p": "v" * 40000})])
    with pytest.raises(MessageIllegalError, match="segment"):
        _encode(_cl(tmp_path, "tiny"), [Message(topic="T", body=b"x" * 4050)])


def test_damaged_frame_is_rejected(tmp_path):
    cl = _cl(tmp_path)
    frame = bytearray(_encode(cl, _msgs(2)))
    frame[70] ^= 1
    with pytest.raises(BatchFormatError, match="CRC"):
        cl.apply_batch(bytes(frame))
    with pytest.raises(BatchFormatError):
        cl.apply_batch(b"junk")
    assert cl.max_offset == 0


def test_recover_normally_truncates_torn_tail_and_logs_it(tmp_path, caplog):
    cl = _cl(tmp_path)
    for i in range(5):
        cl.apply_batch(_encode(cl, _msgs(4, size=200, start=4 * i)))
    last_rs = cl.apply_batch(_encode(cl, _msgs(1, size=200, start=99)))
    torn_at = last_rs[0].physical_offset
    last = cl.mapped_file_queue.mapped_files[-1]
    cl.flush_all()
    # tear the last record: damage its body so the CRC fails
    pos = torn_at - last.file_from_offset + 120
    last.write_at(pos, b"\xff\xff")
    last.flush(0)
    cl.close()
    cl2 = _cl(tmp_path)
    with caplog.at_level(logging.WARNING, logger="raftmq.store.commit_log"):
        assert cl2.recover_normally() == torn_at
    assert any(str(torn_at) in r.getMessage() and "CRC" in r.getMessage() for r in caplog.records)
    assert cl2.max_offset == torn_at
    # the cut-off bytes are gone: a later restart cannot resurrect them
    mf = cl2.mapped_file_queue.find_mapped_file_by_offset(torn_at)
    assert mf.read_bytes(torn_at - mf.file_from_offset, 300) == bytes(300)


def test_recovery_drops_trailing_empty_segment(tmp_path):
    cl = _cl(tmp_path)
    cl.apply_batch(_encode(cl, _msgs(5, size=250)))
    last = cl.mapped_file_queue.mapped_files[-1]
    cl._write_blank(last)  # segment ends with its blank record ...
    end = cl.max_offset
    nxt = cl.mapped_file_queue.get_last_mapped_file()  # ... and the next one was preallocated, never written
    assert nxt.file_from_offset == end == SEG
    cl.flush_all()
    cl.close()
    cl2 = _cl(tmp_path)
    assert len(cl2.mapped_file_queue.mapped_files) == 2
    assert cl2.recover_normally() == end
    assert len(cl2.mapped_file_queue.mapped_files) == 1
    assert not os.path.exists(nxt.path)
    r = cl2.apply_batch(_encode(cl2, _msgs(1, start=9)))
    assert r[0].physical_offset == SEG and r[0].queue_offset == 0  # table is rebuilt by the facade, not here


def test_raw_catch_up_reproduces_the_log(tmp_path):
    src = _cl(tmp_path, "src")
    for i in range(8):
        src.apply_batch(_encode(src, _msgs(5, qid=i % 2, size=150, start=i * 5)))
    dst = _cl(tmp_path, "dst")
    with pytest.raises(OffsetMismatchError):
        dst.append_raw(100, b"")
    off = 0
    while off < src.max_offset:
        data = src.read_raw(off, 1000)
        assert data
        dst.append_raw(off, data)
        off = dst.max_offset
    assert _digest(src) == _digest(dst)
    assert dst.topic_queue_table == src.topic_queue_table
    with pytest.raises(OffsetMismatchError):
        dst.append_raw(5, src.read_raw(0, 1000))


def test_restart_keeps_everything(tmp_path):
    cl = _cl(tmp_path)
    rs = [r for i in range(6) for r in cl.apply_batch(_encode(cl, _msgs(5, size=180, start=5 * i)))]
    end = cl.max_offset
    cl.flush_all()
    cl.close()
    cl2 = _cl(tmp_path)
    assert cl2.recover_normally() == end
    for r in rs:
        assert decode_record(cl2.get_message(r.physical_offset, r.wrote_bytes)).ok
    assert os.path.exists(tmp_path / "s" / "commitlog" / "00000000000000000000")


@pytest.mark.parametrize("bad, words", [
    (dict(topic=["x"]), "string"),
    (dict(born_host="abc"), "born_host"),
    (dict(properties={"a": None}), "strings"),
    (dict(properties={1: "x"}), "strings"),
    (dict(properties={"a": ""}), "empty"),
    (dict(body="text"), "bytes"),
    (dict(queue_id=-1), "queue_id"),
    (dict(flag=1 << 40), "flag"),
    (dict(born_timestamp=1 << 70), "born_timestamp"),
    (dict(born_host=("10.0.0.1", 1 << 40)), "port"),
])
def test_bad_fields_are_message_illegal_with_a_reason(tmp_path, bad, words):
    cl = _cl(tmp_path)
    fields = {"topic": "T", "body": b"x", **bad}
    with pytest.raises(MessageIllegalError, match=words):
        _encode(cl, [Message(**fields)])
    assert cl.max_offset == 0
