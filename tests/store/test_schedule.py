"""Delayed messages in the store: schedule-topic form on send, delivery pass, progress file (docs/design/store-formats.md#delayed-timer-and-transactional-messages)."""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest

from raftmq.store import Message, MessageStore, StoreConfig
from raftmq.store.errors import MessageIllegalError, StoreError
from raftmq.store.message import SCHEDULE_TOPIC
from raftmq.store.schedule import DelayLevels, ScheduleMessageService

LEVELS = "1s 2s 3s"


def _cfg(root) -> StoreConfig:
    return StoreConfig(root_dir=str(root), mapped_file_size_commit_log=256 * 1024, message_delay_level=LEVELS)


def _service(st: MessageStore, **kw) -> ScheduleMessageService:
    def put(msgs):
        f: Future = Future()
        try:
            f.set_result(st.put_messages(msgs))
        except Exception as e:  # noqa: BLE001 - handed to the caller like a write path does
            f.set_exception(e)
        return f

    def commit(offsets):
        st.delay_offsets.update(offsets)
        st.delay_offsets.persist(only_if_dirty=True)

    return ScheduleMessageService(st, put, commit, lambda: True, **kw)


def _wait_dispatched(st: MessageStore) -> None:
    deadline = time.monotonic() + 10
    while st.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_delayed_message_goes_to_the_schedule_topic_with_brokers_property_order(tmp_path):
    with MessageStore(_cfg(tmp_path)) as st:
        # a RocketMQ client's order: Message(topic, tags, keys, body) puts TAGS, KEYS, WAIT; then DELAY; UNIQ_KEY at send
        props = {"TAGS": "a", "KEYS": "k1", "WAIT": "true", "DELAY": "2", "UNIQ_KEY": "U1"}
        r = st.put_message(Message(topic="T", queue_id=3, body=b"x", properties=props))
        assert (r.topic, r.queue_id, r.queue_offset) == (SCHEDULE_TOPIC, 1, 0)
        assert r.uniq_key == "U1"
        _wait_dispatched(st)
        # buckets (cap 16): REAL_TOPIC 1, KEYS 7, UNIQ_KEY 12, CLUSTER 12, DELAY 13, WAIT 13 (removed, put back:
        # after DELAY), TAGS 14, REAL_QID 15 -- WAIT is kept in the delay path
        expected = ["REAL_TOPIC", "KEYS", "UNIQ_KEY", "CLUSTER", "DELAY", "WAIT", "TAGS", "REAL_QID"]
        stored = st.view_message(r.physical_offset)
        assert list(stored.properties) == expected
        assert stored.properties["REAL_TOPIC"] == "T" and stored.properties["REAL_QID"] == "3"
        assert stored.properties["WAIT"] == "true" and stored.properties["DELAY"] == "2"
        assert st.max_offset_in_queue("T", 3) == 0
        phy, size, tags_code = st.consume_queues.get(SCHEDULE_TOPIC, 1).read_units(0, 1)[0]
        assert (phy, size) == (r.physical_offset, r.wrote_bytes)
        assert tags_code == stored.store_timestamp + 2000  # deliver time (docs/design/store-formats.md#consume-queues)


def test_level_above_the_maximum_is_clamped_and_zero_or_negative_is_not_delayed(tmp_path):
    with MessageStore(_cfg(tmp_path)) as st:
        r = st.put_message(Message(topic="T", queue_id=0, body=b"x", properties={"DELAY": "40"}))
        assert (r.topic, r.queue_id) == (SCHEDULE_TOPIC, 2)
        assert st.view_message(r.physical_offset).properties["DELAY"] == "3"
        for level in ("0", "-1"):
            r = st.put_message(Message(topic="T", queue_id=0, body=b"x", properties={"DELAY": level}))
            assert (r.topic, r.queue_id) == ("T", 0)
        with pytest.raises(MessageIllegalError, match="DELAY"):
            st.put_message(Message(topic="T", queue_id=0, body=b"x", properties={"DELAY": "soon"}))
        with pytest.raises(MessageIllegalError, match="topic"):
            st.put_message(Message(topic="bad topic", queue_id=0, body=b"x", properties={"DELAY": "1"}))


def test_encode_batch_converts_too(tmp_path):
    with MessageStore(_cfg(tmp_path)) as st:
        msgs = [Message(topic="T", queue_id=1, body=b"a", properties={"DELAY": "1"}),
                Message(topic="T", queue_id=1, body=b"b")]
        results = st.apply_batch(st.encode_batch(msgs))
        assert [(r.topic, r.queue_id) for r in results] == [(SCHEDULE_TOPIC, 0), ("T", 1)]
        assert msgs[0].topic == "T" and msgs[0].uniq_key  # the caller's message keeps its topic, gets a UNIQ_KEY


def test_delivery_is_never_early_and_rebuilds_the_message_as_message_timeup(tmp_path):
    with MessageStore(_cfg(tmp_path)) as st:
        sent = st.put_messages([
            Message(topic="T", queue_id=q, body=f"m{q}-{lvl}".encode(),
                    properties={"TAGS": "t", "KEYS": f"k{q}{lvl}", "WAIT": "true", "DELAY": str(lvl)},
                    born_timestamp=123, born_host=("10.0.0.9", 4242), flag=7)
            for q in (0, 1) for lvl in (1, 2)
        ])
        _wait_dispatched(st)
        assert st.stats()["delay_messages_pending"] == 4
        svc = _service(st)
        first_due = min(st.view_message(r.physical_offset).store_timestamp for r in sent) + 1000
        assert svc.run_once(now_ms=first_due - 1) == 0  # nothing is due one ms before the first delivery time
        assert st.delay_offsets.all() == {}
        svc.start()
        try:
            deadline = time.monotonic() + 20
            while (st.max_offset_in_queue("T", 0) + st.max_offset_in_queue("T", 1) < 4
                   and time.monotonic() < deadline):
                time.sleep(0.05)
        finally:
            svc.shutdown()
        _wait_dispatched(st)
        delivered = {}
        for q in (0, 1):
            got = st.get_messages("T", q, 0, 10)
            for m in got.messages:
                delivered[m.uniq_key] = m
        assert len(delivered) == 4
        for r in sent:
            sched = st.view_message(r.physical_offset)
            level = int(sched.properties["DELAY"])
            d = delivered[r.uniq_key]
            # never before its time: the re-put's store timestamp is at or after schedule timestamp + delay
            assert d.store_timestamp >= sched.store_timestamp + level * 1000
            assert d.store_timestamp < sched.store_timestamp + level * 1000 + 15_000  # generous bound
            assert (d.topic, d.queue_id) == ("T", int(sched.properties["REAL_QID"]))
            # the string is re-serialized before DELAY is cleared: DELAY, REAL_*, WAIT stay (docs/design/store-formats.md#properties)
            assert list(d.properties.items()) == list(sched.properties.items())
            assert (d.body, d.flag, d.born_timestamp, d.born_host) == (sched.body, 7, 123, ("10.0.0.9", 4242))
        assert st.query_messages("T", "k01", 10, 0, 2**62)  # keys of delivered messages are indexed
        assert st.delay_offsets.all() == {1: 2, 2: 2}
        assert st.stats()["delay_messages_pending"] == 0
        assert svc.run_once() == 0  # progress recorded: nothing is delivered twice


def test_progress_is_persisted_in_fastjson_shape_and_reloaded(tmp_path):
    st = MessageStore(_cfg(tmp_path))
    st.open()
    st.put_messages([Message(topic="T", body=b"x", properties={"DELAY": "1"}) for _ in range(3)])
    _wait_dispatched(st)
    ts = st.view_message(0).store_timestamp
    svc = _service(st)
    # due per the record's timestamp; the re-put itself is stamped with the real clock (not asserted here)
    assert svc.run_once(now_ms=ts + 5000) == 3
    st.shutdown()
    text = (tmp_path / "config" / "delayOffset.json").read_text()
    assert text == '{\n\t"offsetTable":{1:3\n\t}\n}'
    st = MessageStore(_cfg(tmp_path))
    st.open()
    try:
        assert st.delay_offsets.get(1) == 3
        assert _service(st).run_once(now_ms=ts + 5000) == 0
        assert st.max_offset_in_queue("T", 0) == 3
    finally:
        st.shutdown()


def test_a_batch_with_an_unstorable_message_skips_only_that_one(tmp_path):
    with MessageStore(_cfg(tmp_path)) as st:
        st.put_messages([Message(topic="T", body=b"a", properties={"DELAY": "1"}),
                         Message(topic="T", body=b"b", properties={"DELAY": "1"})])
        _wait_dispatched(st)
        ts = st.view_message(0).store_timestamp
        real_put = _service(st)._put
        calls = []

        def put(msgs):
            calls.append(len(msgs))
            if any(m.body == b"a" for m in msgs):
                f: Future = Future()
                f.set_exception(MessageIllegalError("refused for the test"))
                return f
            return real_put(msgs)

        svc = ScheduleMessageService(st, put, st.delay_offsets.update, lambda: True)
        assert svc.run_once(now_ms=ts + 5000) == 2  # counted as handled
        assert calls == [2, 1, 1]
        _wait_dispatched(st)
        assert [m.body for m in st.get_messages("T", 0, 0).messages] == [b"b"]
        assert st.delay_offsets.get(1) == 2


def test_delay_levels():
    lv = DelayLevels("1s 5s 2m 1h 1d")
    assert lv.millis == [1000, 5000, 120_000, 3_600_000, 86_400_000] and lv.max_level == 5
    assert lv.clamp(9) == 5 and lv.delay_ms(9) == 86_400_000
    assert lv.correct_deliver_timestamp(1000, 1500, 1) == 1500
    assert lv.correct_deliver_timestamp(1000, 2001, 1) == 1000  # further away than the delay: the clock went back
    with pytest.raises(StoreError, match="no levels"):
        DelayLevels("")
    with pytest.raises(StoreError, match="bad delay level"):
        DelayLevels("1s 5x")
    assert DelayLevels(StoreConfig(root_dir="/tmp/x").message_delay_level).max_level == 18
    for bad, why in (("", "no levels"), ("1s 10", "bad delay level")):  # refused by config validation already
        with pytest.raises(StoreError, match=why):
            StoreConfig(root_dir="/tmp/x", message_delay_level=bad)


def test_progress_past_the_queue_end_is_corrected_to_its_max_and_nothing_later_is_skipped(tmp_path, caplog):
    """A delayOffset.json ahead of its schedule queues (restored from a newer store, or edited) is corrected to each
    queue's max offset as RocketMQ's correctDelayOffset does, with an error line; messages stored afterwards are
    delivered instead of being skipped until the queue grows past the stale value."""
    st = MessageStore(_cfg(tmp_path))
    st.open()
    st.put_messages([Message(topic="T", body=b"old%d" % i, properties={"DELAY": "1"}) for i in range(3)])
    _wait_dispatched(st)
    ts = st.view_message(0).store_timestamp
    assert _service(st).run_once(now_ms=ts + 5000) == 3
    st.shutdown()
    (tmp_path / "config" / "delayOffset.json").write_text('{\n\t"offsetTable":{1:50,2:7\n\t}\n}')
    st = MessageStore(_cfg(tmp_path))
    st.open()
    try:
        _wait_dispatched(st)
        svc = _service(st)  # made before the node serves; its first pass may come after new messages arrived
        new = st.put_messages([Message(topic="T", body=b"new%d" % i, properties={"DELAY": str(1 + i % 2)})
                               for i in range(4)])
        _wait_dispatched(st)
        due = max(st.view_message(r.physical_offset).store_timestamp for r in new) + 5000
        with caplog.at_level("ERROR", logger="raftmq.store.schedule"):
            assert svc.run_once(now_ms=due) == 0
        # the queues' ends as recovered, not their max now: level 1 had 3 units, level 2 none
        assert st.delay_offsets.all() == {1: 3, 2: 0}
        lines = [r.getMessage() for r in caplog.records if "above the schedule queue's max offset" in r.getMessage()]
        assert len(lines) == 2 and "progress 50" in lines[0] and "corrected to 3" in lines[0], lines
        assert '"offsetTable":{1:3,2:0' in (tmp_path / "config" / "delayOffset.json").read_text()
        assert svc.run_once(now_ms=due) == 4
        _wait_dispatched(st)
        assert sorted(m.body for m in st.get_messages("T", 0, 0, 20).messages) == \
            [b"new0", b"new1", b"new2", b"new3", b"old0", b"old1", b"old2"]
        assert st.delay_offsets.all() == {1: 5, 2: 2}
    finally:
        st.shutdown()


def test_progress_past_the_queue_end_waits_while_the_queue_is_still_dispatching(tmp_path, monkeypatch):
    """A member that just became leader may not have dispatched its commit log yet: its queue is short for a moment,
    not the progress wrong, so nothing is corrected (which would deliver those messages a second time)."""
    with MessageStore(_cfg(tmp_path)) as st:
        st.put_messages([Message(topic="T", body=b"x", properties={"DELAY": "1"}) for _ in range(2)])
        _wait_dispatched(st)
        st.delay_offsets.update({1: 4})
        monkeypatch.setattr(st, "dispatch_behind_bytes", lambda: 100)  # reput still behind the commit log
        svc = _service(st)
        assert svc.run_once(now_ms=int(time.time() * 1000) + 5000) == 0
        assert st.delay_offsets.all() == {1: 4}
        monkeypatch.undo()
        assert svc.run_once(now_ms=int(time.time() * 1000) + 5000) == 0
        assert st.delay_offsets.all() == {1: 2}


def test_progress_below_the_queue_minimum_moves_up_with_a_log_line(tmp_path, caplog):
    with MessageStore(_cfg(tmp_path)) as st:
        st.put_messages([Message(topic="T", body=b"x%d" % i, properties={"DELAY": "1"}) for i in range(3)])
        _wait_dispatched(st)
        cq = st.consume_queues.get(SCHEDULE_TOPIC, 0)
        cq.min_logic_offset = 2 * 20  # as if retention removed units 0 and 1 (20-byte units)
        ts = st.view_message(0).store_timestamp
        with caplog.at_level("ERROR", logger="raftmq.store.schedule"):
            assert _service(st).run_once(now_ms=ts + 5000) == 1
        assert any("below the schedule queue's min offset 2" in r.getMessage() for r in caplog.records)
        assert st.delay_offsets.get(1) == 3
