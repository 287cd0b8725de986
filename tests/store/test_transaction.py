"""Transactional message records and the half-queue bookkeeping (store.transaction), on a real store."""

from __future__ import annotations

import struct

import pytest

from raftmq.store import MessageStore, StoreConfig
from raftmq.store.dispatch import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_TYPE_MASK
from raftmq.store.message import Message
from raftmq.store.transaction import (
    CHECK_MAX_TOPIC,
    HALF_TOPIC,
    OP_PROPERTIES,
    OP_TOPIC,
    SYSTEM_GROUP,
    TransactionLog,
    TransactionStateError,
    check_times,
    commit_message,
    discarded_message,
    half_message,
    op_message,
    renewed_half,
)
from tests.store.store_helpers import TINY, wait_dispatched

HOST = ("127.0.0.1", 10911)


@pytest.fixture
def st(tmp_path):
    s = MessageStore(StoreConfig(root_dir=str(tmp_path / "s"), **TINY))
    s.open()
    yield s
    s.shutdown()


def _send_half(st, body=b"order-1", group="pg", uniq="UK1", topic="Orders", qid=2, tx_flag=0x4):
    msg = Message(topic=topic, queue_id=qid, body=body, properties={"TAGS": "t", "UNIQ_KEY": uniq},
                  born_timestamp=1_700_000_000_000, born_host=("10.0.0.7", 5000), sys_flag=tx_flag)
    r = st.put_message(half_message(msg, group, "DefaultCluster"))
    wait_dispatched(st)
    return st.view_message(r.physical_offset)


def _raw_properties(st, physical_offset: int) -> bytes:
    m = st.view_message(physical_offset)
    raw = st.read_commit_log(physical_offset, m.store_size)[: m.store_size]
    # properties are the record's last field: 2-byte length + bytes
    for n in range(len(raw) - 2, 0, -1):
        if struct.unpack_from(">H", raw, n)[0] == len(raw) - n - 2:
            return raw[n + 2:]
    raise AssertionError("no properties field found")


def test_half_message_is_in_half_queue_only(st):
    half = _send_half(st)
    assert half.topic == HALF_TOPIC and half.queue_id == 0 and half.queue_offset == 0
    assert half.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_NOT_TYPE  # the client's PREPARED bit is reset
    p = half.properties
    assert p["REAL_TOPIC"] == "Orders" and p["REAL_QID"] == "2" and p["TRAN_MSG"] == "true" and p["PGROUP"] == "pg"
    assert p["WAIT"] == "true" and p["CLUSTER"] == "DefaultCluster" and p["UNIQ_KEY"] == "UK1"
    assert st.max_offset_in_queue("Orders", 2) == 0  # invisible to consumers of the real topic
    assert [m.topic for m in st.query_messages(HALF_TOPIC, "UK1", 8, 0, 2**62)] == [HALF_TOPIC]


def test_commit_record_and_op_message(st):
    half = _send_half(st)
    commit, op = commit_message(half), op_message(half.queue_offset, HOST)
    rs = st.put_messages([commit, op])  # one append: atomic
    wait_dispatched(st)
    real = st.get_messages("Orders", 2, 0).messages
    assert len(real) == 1 and real[0].body == b"order-1"
    assert real[0].sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE
    assert real[0].prepared_transaction_offset == half.physical_offset
    assert real[0].properties["REAL_TOPIC"] == "Orders" and real[0].properties["TRAN_MSG"] == "true"
    assert real[0].born_timestamp == half.born_timestamp and real[0].uniq_key == "UK1"
    ops = st.get_messages(OP_TOPIC, 0, 0).messages
    assert [(m.body, m.tags) for m in ops] == [(b"0", "d")]
    assert _raw_properties(st, rs[1].physical_offset) == OP_PROPERTIES.encode() == b"WAIT\x01true\x02TAGS\x01d"
    scan = TransactionLog(st).scan(now_ms=2**62, timeout_ms=1)
    assert scan.due == [] and scan.half_offset == 1 and scan.op_offset == 1
    with pytest.raises(TransactionStateError, match=r"already finished \(committed\)"):
        TransactionLog(st).open_half(half.physical_offset, "UK1", "pg")


def test_open_half_rejects_unknown_foreign_and_finished(st):
    half = _send_half(st)
    log = TransactionLog(st)
    assert log.open_half(half.physical_offset, "UK1", "pg").uniq_key == "UK1"
    with pytest.raises(TransactionStateError) as e:
        log.open_half(half.physical_offset, "OTHER", "pg")
    assert e.value.kind == "not_found"
    with pytest.raises(TransactionStateError) as e:
        log.open_half(123456, "UK1", "pg")
    assert e.value.kind == "not_found"
    with pytest.raises(TransactionStateError) as e:
        log.open_half(half.physical_offset, "UK1", "another-group")
    assert e.value.kind == "mismatch"
    st.put_message(op_message(half.queue_offset, HOST))  # rolled back
    wait_dispatched(st)
    with pytest.raises(TransactionStateError, match=r"already finished \(rolled back\)") as e:
        log.open_half(half.physical_offset, "UK1", "pg")
    assert e.value.kind == "finished"
    assert st.max_offset_in_queue("Orders", 2) == 0


def test_scan_checks_timed_out_halves_and_renews(st):
    a = _send_half(st, uniq="A")
    b = _send_half(st, uniq="B")
    log = TransactionLog(st)
    assert log.scan(now_ms=a.store_timestamp, timeout_ms=60_000).due == []  # not timed out yet
    scan = log.scan(now_ms=b.store_timestamp + 60_000, timeout_ms=60_000)
    assert [m.uniq_key for m in scan.due] == ["A", "B"] and scan.half_offset == 2
    # the check service renews each copy with its check count, then commits the progress
    renewed = [st.put_message(renewed_half(m, check_times(m) + 1)) for m in scan.due]
    st.consumer_offsets.commit(SYSTEM_GROUP, HALF_TOPIC, {0: scan.half_offset})
    st.consumer_offsets.commit(SYSTEM_GROUP, OP_TOPIC, {0: scan.op_offset})
    wait_dispatched(st)
    a2 = st.view_message(renewed[0].physical_offset)
    assert a2.topic == HALF_TOPIC and a2.queue_offset == 2 and check_times(a2) == 1 and a2.body == a.body
    # an outcome for the original copy finishes the renewed one too (same UNIQ_KEY)
    log.open_half(a.physical_offset, "A", "pg")  # still open through its renewed copy
    st.put_message(op_message(a.queue_offset, HOST))
    wait_dispatched(st)
    with pytest.raises(TransactionStateError):
        log.open_half(a2.physical_offset, "A", "pg")
    scan = log.scan(now_ms=2**62, timeout_ms=1)
    assert [m.uniq_key for m in scan.due] == ["B"]  # A's renewed copy is done
    assert scan.half_offset == 4 and scan.op_offset == 1  # every copy of A is behind: its op is no longer needed


def test_discarded_copy_goes_to_check_max_topic(st):
    half = _send_half(st)
    r = st.put_message(discarded_message(half))
    wait_dispatched(st)
    m = st.view_message(r.physical_offset)
    assert m.topic == CHECK_MAX_TOPIC and m.queue_id == 0 and m.body == half.body
    assert m.properties["REAL_TOPIC"] == "Orders"
    assert st.max_offset_in_queue(CHECK_MAX_TOPIC, 0) == 1


def test_progress_survives_restart(tmp_path):
    cfg = StoreConfig(root_dir=str(tmp_path / "s"), **TINY)
    st = MessageStore(cfg)
    st.open()
    half = _send_half(st)
    st.put_messages([commit_message(half), op_message(0, HOST)])
    st.consumer_offsets.commit(SYSTEM_GROUP, HALF_TOPIC, {0: 1})
    st.shutdown()
    st = MessageStore(cfg)
    st.open()
    try:
        wait_dispatched(st)
        assert TransactionLog(st).progress() == (1, 0)
        assert st.get_messages("Orders", 2, 0).messages[0].prepared_transaction_offset == half.physical_offset
    finally:
        st.shutdown()


def test_property_strings_follow_the_brokers_hashmap_order(st):
    """docs/design/store-formats.md#properties: buckets (cap 16): REAL_TOPIC 1, KEYS 7, TRAN_MSG 9, UNIQ_KEY/CLUSTER 12, PGROUP/WAIT 13
    (WAIT re-put last), TAGS 14, REAL_QID 15; the commit record keeps the half message's string."""
    msg = Message(topic="Orders", queue_id=2, body=b"b", properties={"TAGS": "t", "KEYS": "k", "UNIQ_KEY": "U"},
                  born_host=("10.0.0.7", 5000))
    r = st.put_message(half_message(msg, "pg", "DefaultCluster"))
    wait_dispatched(st)
    expected = (b"REAL_TOPIC\x01Orders\x02KEYS\x01k\x02TRAN_MSG\x01true\x02UNIQ_KEY\x01U\x02CLUSTER\x01DefaultCluster"
                b"\x02PGROUP\x01pg\x02WAIT\x01true\x02TAGS\x01t\x02REAL_QID\x012")
    assert _raw_properties(st, r.physical_offset) == expected
    c = st.put_message(commit_message(st.view_message(r.physical_offset)))
    assert _raw_properties(st, c.physical_offset) == expected


def test_scan_in_windows_keeps_ops_until_the_whole_queue_is_read(st):
    halves = [_send_half(st, uniq=f"W{i}") for i in range(3)]
    st.put_messages([op_message(h.queue_offset, HOST) for h in halves])  # all rolled back
    wait_dispatched(st)
    log = TransactionLog(st)
    first = log.scan(now_ms=2**62, timeout_ms=1, limit=2)
    assert first.due == [] and first.half_offset == 2 and first.more
    assert first.op_offset == 0  # the rest of the half queue is unknown: every op is kept
    st.consumer_offsets.commit(SYSTEM_GROUP, HALF_TOPIC, {0: first.half_offset})
    second = log.scan(now_ms=2**62, timeout_ms=1, limit=2)
    assert second.half_offset == 3 and second.op_offset == 3 and not second.more


def test_pending_counts_open_transactions_once_per_uniq_key_by_real_topic(st):
    from raftmq.store.transaction import COMMITTED, DISCARDED, ROLLED_BACK

    a = _send_half(st, uniq="A")
    b = _send_half(st, uniq="B", topic="Payments", qid=0)
    c = _send_half(st, uniq="C")
    d = _send_half(st, uniq="D")
    tlog = TransactionLog(st)
    assert tlog.pending() == {"Orders": 3, "Payments": 1}
    # a check pass as the service makes it: A, B, C renewed (same UNIQ_KEYs), D discarded, progress past D
    st.put_messages([renewed_half(a, 1), renewed_half(b, 1), renewed_half(c, 1), discarded_message(d)])
    wait_dispatched(st)
    assert tlog.pending() == {"Orders": 3, "Payments": 1}  # copies and originals both in the window: once each
    st.consumer_offsets.commit(SYSTEM_GROUP, HALF_TOPIC, {0: d.queue_offset + 1})
    assert tlog.pending() == {"Orders": 2, "Payments": 1}  # D is gone (discarded), the rest by their copies
    # A committed through its original record (the op names the old offset; its UNIQ_KEY finishes the copy),
    # B rolled back
    st.put_messages([commit_message(a), op_message(a.queue_offset, HOST)])
    st.put_message(op_message(b.queue_offset, HOST))
    wait_dispatched(st)
    assert tlog.pending() == {"Orders": 1}
    assert TransactionLog(st).pending() == {"Orders": 1}  # a fresh cache reads the same
    outcomes = {}
    for half in (a, b, d):
        with pytest.raises(TransactionStateError) as e:
            tlog.open_half(half.physical_offset, half.uniq_key, "pg")
        outcomes[half.uniq_key] = (e.value.kind, e.value.outcome, e.value.committed is not None)
    assert outcomes == {"A": ("finished", COMMITTED, True), "B": ("finished", ROLLED_BACK, False),
                        "D": ("finished", DISCARDED, False)}
    assert tlog.open_half(c.physical_offset, "C", "pg").uniq_key == "C"
