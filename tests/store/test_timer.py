"""Timer messages in the store: timer-topic form on send, delivery in time order, replicated progress, restart."""

from __future__ import annotations

import json
import os
import random
import time
from concurrent.futures import Future

import pytest

from raftmq.store import Message, MessageStore, StoreConfig
from raftmq.store.errors import MessageIllegalError
from raftmq.store.message import SCHEDULE_TOPIC, TIMER_TOPIC
from raftmq.store.timer import TimerMessageService


def _cfg(root, **kw) -> StoreConfig:
    return StoreConfig(root_dir=str(root), **{"mapped_file_size_commit_log": 4 * 1024 * 1024, **kw})


def _service(st: MessageStore, **kw) -> TimerMessageService:
    def put(msgs):
        f: Future = Future()
        try:
            f.set_result(st.put_messages(msgs))
        except Exception as e:  # noqa: BLE001 - handed to the caller like a write path does
            f.set_exception(e)
        return f

    def commit(low, scanned, up_to):
        st.timer_progress.update(low, scanned, up_to)
        st.timer_progress.persist(only_if_dirty=True)

    return TimerMessageService(st, put, commit, lambda: True, **kw)


def _wait_dispatched(st: MessageStore) -> None:
    deadline = time.monotonic() + 30
    while st.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert st.dispatch_behind_bytes() == 0


def _now() -> int:
    return int(time.time() * 1000)


def _timer(topic: str, deliver_ms: int, qid: int = 0, **props: str) -> Message:
    return Message(topic=topic, queue_id=qid, body=f"at {deliver_ms}".encode(),
                   properties={"TIMER_DELIVER_MS": str(deliver_ms), **props})


def _all(st: MessageStore, topic: str, qid: int = 0) -> list:
    _wait_dispatched(st)
    out: list = []
    while len(out) < st.max_offset_in_queue(topic, qid):
        got = st.get_messages(topic, qid, len(out), 1000).messages
        assert got, f"no message at {topic}-{qid} offset {len(out)}"
        out.extend(got)
    return out


def test_a_future_timer_waits_in_the_timer_topic_and_a_past_one_is_stored_at_once(tmp_path):
    with MessageStore(_cfg(tmp_path)) as st:
        deliver = _now() + 3_600_000
        r = st.put_message(_timer("T", deliver, qid=2, TAGS="a", KEYS="k1", UNIQ_KEY="U1", color="red"))
        assert (r.topic, r.queue_id, r.uniq_key) == (TIMER_TOPIC, 0, "U1")
        stored = st.view_message(r.physical_offset)
        assert stored.properties["REAL_TOPIC"] == "T" and stored.properties["REAL_QID"] == "2"
        assert stored.properties["TIMER_OUT_MS"] == str(deliver) == stored.properties["TIMER_DELIVER_MS"]
        _wait_dispatched(st)
        assert st.max_offset_in_queue("T", 2) == 0  # not visible in its topic
        phy, _size, tags_code = st.consume_queues.get(TIMER_TOPIC, 0).read_units(0, 1)[0]
        assert (phy, tags_code) == (r.physical_offset, deliver)  # tagsCode = delivery time
        for past in (_now() - 1000, 0):
            r = st.put_message(_timer("T", past, qid=2))
            assert (r.topic, r.queue_id) == ("T", 2)
        # a delay level wins over a timer (store.schedule delivers it)
        r = st.put_message(_timer("T", deliver, DELAY="1"))
        assert r.topic == SCHEDULE_TOPIC
        r = st.put_message(_timer("T", deliver, DELAY="0"))  # level 0 is no delay: the timer counts
        assert r.topic == TIMER_TOPIC


def test_bad_and_too_far_timers_are_refused_with_the_maximum(tmp_path):
    with MessageStore(_cfg(tmp_path, timer_max_delay_seconds=60)) as st:
        with pytest.raises(MessageIllegalError, match="TIMER_DELIVER_MS='soon' is not a time"):
            st.put_message(Message(topic="T", body=b"x", properties={"TIMER_DELIVER_MS": "soon"}))
        with pytest.raises(MessageIllegalError, match=r"maximum timer delay of 60 s \(store.timer_max_delay_seconds\)"):
            st.put_message(_timer("T", _now() + 3_600_000))
        with pytest.raises(MessageIllegalError, match="topic"):
            st.put_message(_timer("bad topic", _now() + 10_000))
        assert st.put_message(_timer("T", _now() + 50_000)).topic == TIMER_TOPIC
        # encode_batch (the replicated write path's leader half) refuses the same way
        with pytest.raises(MessageIllegalError, match="maximum"):
            st.encode_batch([_timer("T", _now() + 3_600_000)])


def test_delivery_is_in_time_order_not_arrival_order_keeps_properties_and_is_never_early(tmp_path):
    with MessageStore(_cfg(tmp_path)) as st:
        base = _now() + 600_000
        offsets = (3000, 1000, 2000, 1000)
        sent = st.put_messages([_timer("T", base + d, TAGS="t", KEYS=f"k{i}", color=f"c{i}")
                                for i, d in enumerate(offsets)])
        _wait_dispatched(st)
        svc = _service(st)
        assert svc.run_once(now_ms=base + 999) == 0
        assert svc.pending() == 4
        assert svc.run_once(now_ms=base + 1000) == 2
        assert svc.run_once(now_ms=base + 1999) == 0
        assert svc.run_once(now_ms=base + 3000) == 2
        assert svc.run_once(now_ms=base + 10_000) == 0
        got = _all(st, "T")
        assert [m.properties["KEYS"] for m in got] == ["k1", "k3", "k2", "k0"]
        for m in got:
            i = int(m.properties["KEYS"][1:])
            waiting = st.view_message(sent[i].physical_offset)
            assert m.uniq_key == sent[i].uniq_key and m.properties["color"] == f"c{i}"
            assert m.properties["TAGS"] == "t" and m.body == waiting.body
            assert m.properties["TIMER_DELIVER_MS"] == str(base + offsets[i])
            assert m.properties["TIMER_ENQUEUE_MS"] == str(waiting.store_timestamp)
            # never early: the service's clock read at least the delivery time when it re-put the message
            assert int(m.properties["TIMER_DEQUEUE_MS"]) >= base + offsets[i]
            assert m.physical_offset > waiting.physical_offset  # a new commit-log record
        assert st.query_messages("T", "k2", 10, 0, 2**62)  # keys of delivered messages are indexed
        assert svc.pending() == 0 and svc.delivered == 4
        assert st.timer_progress.get() == (4, 4, base + 3000)  # all 4 delivered; the last pass had nothing


def test_restart_keeps_pending_timers_and_never_delivers_twice(tmp_path):
    base = _now() + 600_000
    st = MessageStore(_cfg(tmp_path))
    st.open()
    st.put_messages([_timer("T", base + d, KEYS=f"k{d}") for d in (5, 1, 4, 2, 3)])
    _wait_dispatched(st)
    assert _service(st).run_once(now_ms=base + 2) == 2
    st.shutdown()
    progress = json.loads((tmp_path / "config" / "timerProgress.json").read_text())
    assert progress == {"low": 0, "scanned": 5, "deliveredUpTo": base + 2}
    st = MessageStore(_cfg(tmp_path))
    st.open()
    try:
        _wait_dispatched(st)  # a service loads only once its timer queue holds what the progress covers
        svc = _service(st)
        assert svc.run_once(now_ms=base + 2) == 0
        assert svc.pending() == 3
        st.put_message(_timer("T", base + 1, KEYS="late"))  # arrives after the watermark passed its time
        _wait_dispatched(st)
        assert svc.run_once(now_ms=base + 10) == 4
        assert [m.properties["KEYS"] for m in _all(st, "T")] == ["k1", "k2", "late", "k3", "k4", "k5"]
        assert st.timer_progress.get()[0] == 6
    finally:
        st.shutdown()


def test_a_new_leader_continues_from_the_replicated_progress(tmp_path):
    """Two services on one store stand for two leaders in turn: the second rebuilds from the progress the first
    replicated and delivers exactly the rest; the first notices the progress moved and rebuilds too."""
    with MessageStore(_cfg(tmp_path)) as st:
        base = _now() + 600_000
        st.put_messages([_timer("T", base + d, KEYS=f"k{d}") for d in range(10, 0, -1)])
        _wait_dispatched(st)
        first, second = _service(st), _service(st)
        assert first.run_once(now_ms=base + 3) == 3
        # a service loads only once the store has dispatched everything (here: the other's re-puts), as a new
        # leader waits for its reput; without the wait run_once returns 0 and loads on a later pass
        _wait_dispatched(st)
        assert second.run_once(now_ms=base + 7) == 4
        _wait_dispatched(st)
        assert first.run_once(now_ms=base + 7) == 0  # progress moved behind its back: rebuilt, nothing twice
        assert first.run_once(now_ms=base + 10) == 3
        keys = [m.properties["KEYS"] for m in _all(st, "T")]
        assert keys == [f"k{d}" for d in range(1, 11)]


def test_many_timers_arrive_shuffled_and_an_idle_pass_reads_nothing(tmp_path):
    n = 20_000
    rng = random.Random(7)
    with MessageStore(_cfg(tmp_path, mapped_file_size_commit_log=16 * 1024 * 1024)) as st:
        base = _now() + 600_000
        times = [base + rng.randrange(0, 10_000) for _ in range(n)]
        for i in range(0, n, 500):
            st.put_messages([Message(topic="T", body=b"x",
                                     properties={"TIMER_DELIVER_MS": str(t)}) for t in times[i:i + 500]])
        _wait_dispatched(st)
        svc = _service(st, max_batch=512)
        assert svc.run_once(now_ms=base - 1) == 0
        assert svc.pending() == n
        cq = st.consume_queues.get(TIMER_TOPIC, 0)
        reads = []
        original = cq.read_units
        cq.read_units = lambda offset, count: reads.append(count) or original(offset, count)
        views = []
        original_view = st.view_message
        st.view_message = lambda phy: views.append(phy) or original_view(phy)
        assert svc.run_once(now_ms=base - 1) == 0
        assert reads == [] and views == []  # a pass with nothing new and nothing due costs O(1), not O(pending)
        del cq.read_units, st.view_message
        delivered = 0
        for step in range(0, 10_001, 1000):
            delivered += svc.run_once(now_ms=base + step)
            assert delivered == sum(1 for t in times if t <= base + step)
        got = _all(st, "T")
        assert len(got) == n
        out = [int(m.properties["TIMER_DELIVER_MS"]) for m in got]
        assert sorted(out) == sorted(times)
        assert len({m.uniq_key for m in got}) == n


def test_retention_keeps_the_segment_of_a_pending_timer_until_it_is_delivered(tmp_path):
    cfg = _cfg(tmp_path, mapped_file_size_commit_log=4096, preallocate=False, delete_commit_log_files_interval=0,
               delete_consume_queue_files_interval=0)
    with MessageStore(cfg) as st:
        base = _now() + 600_000
        timer = st.put_message(_timer("T", base))
        for _ in range(40):  # ~10 segments of plain messages after the timer's
            st.put_message(Message(topic="P", body=b"y" * 400))
        _wait_dispatched(st)
        files = st.commit_log.mapped_file_queue.mapped_files
        assert len(files) > 5
        for mf in files:  # every segment is long expired
            os.utime(mf.path, (1, 1))
        st.retention.delete_files_manually()
        st.retention.run_once(_now())
        assert st.commit_log_min_offset <= timer.physical_offset  # the pending timer's segment is kept
        svc = _service(st)
        assert svc.run_once(now_ms=base) == 1
        _wait_dispatched(st)
        assert [m.body for m in _all(st, "T")] == [f"at {base}".encode()]
        for mf in st.commit_log.mapped_file_queue.mapped_files:
            os.utime(mf.path, (1, 1))
        st.retention.delete_files_manually()
        st.retention.run_once(_now())
        assert st.commit_log_min_offset > timer.physical_offset  # delivered: its segment may go now


def test_a_leader_with_a_slower_clock_keeps_the_watermark_and_delivers_late_arrivals_once(tmp_path):
    """The watermark ``deliveredUpTo`` never moves back; a timer that arrives due at or before it (stored by a
    leader whose clock is behind) is delivered once, also across a rebuild from the progress."""
    with MessageStore(_cfg(tmp_path)) as st:
        base = _now() + 600_000
        st.put_messages([_timer("T", base + d, KEYS=f"k{d}") for d in (100, 200)])
        _wait_dispatched(st)
        assert _service(st).run_once(now_ms=base + 150) == 1  # a leader with a fast clock
        assert st.timer_progress.get()[2] == base + 150
        slow = _service(st)
        st.put_messages([_timer("T", base + 50, KEYS="k50")])  # due before the watermark
        _wait_dispatched(st)
        assert slow.run_once(now_ms=base + 60) == 1  # k50 only; k200 is not due on this clock
        assert st.timer_progress.get()[2] == base + 150  # never moved back
        assert _service(st).run_once(now_ms=base + 199) == 0  # a rebuild from the progress: k50 is not redone
        assert slow.run_once(now_ms=base + 200) == 1
        assert [m.properties["KEYS"] for m in _all(st, "T")] == ["k100", "k50", "k200"]
