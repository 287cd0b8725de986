"""De-duplication (docs/design/deduplication.md): the window's rules, and both write paths in-process with a real
store (a Raft group of one with real pysyncobj, and the single-node path): a retry is answered with the original's
result and not stored again, also after a restart; a batch mixing new and retried messages stores only the new."""

from __future__ import annotations

import json

import pytest

from raftmq.replication import LocalWritePath, RaftWritePath
from raftmq.replication.dedup_window import DedupWindow, TopicWindows, dedup_topic, id_of
from raftmq.replication.deduplicator import Deduplicator
from raftmq.store import Message
from raftmq.store.commit_log import AppendResult
from raftmq.store.message import string_to_properties
from raftmq.store.topic_config import TopicConfig
from tests.replication.test_raft_single import FAST, one_member, open_store, wait_writable


def uniq(i: int) -> str:
    return f"7F0000010001000000000000{i:08X}"


def msg(topic: str, i: int | None, body: bytes = b"x", **props: str) -> Message:
    p = dict(props)
    if i is not None:
        p["UNIQ_KEY"] = uniq(i)
    return Message(topic=topic, queue_id=0, body=body, properties=p)


# ---------------------------------------------------------------------------------------------------- rules
def test_a_message_is_judged_in_the_topic_the_user_named_and_a_broker_write_never():
    assert dedup_topic("T", {"UNIQ_KEY": "A"}) == "T"
    assert dedup_topic("T", {"UNIQ_KEY": "A", "DELAY": "3"}) == "T"                  # a delayed send
    assert dedup_topic("SCHEDULE_TOPIC_XXXX", {"REAL_TOPIC": "T"}) == "T"           # ... as stored
    assert dedup_topic("rmq_sys_wheel_timer", {"REAL_TOPIC": "T"}) == "T"            # a timer send as stored
    assert dedup_topic("RMQ_SYS_TRANS_HALF_TOPIC", {"REAL_TOPIC": "T"}) is None      # halves: not judged
    assert dedup_topic("T", {"REAL_TOPIC": "T", "DELAY": "3"}) is None                # the delivery into T
    assert dedup_topic("SCHEDULE_TOPIC_XXXX", {"REAL_TOPIC": "%RETRY%g"}) is None    # a delayed send-back
    for broker in ("%RETRY%g", "%DLQ%g", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "rmq_sys_REVIVE_LOG"):
        assert dedup_topic(broker, {"UNIQ_KEY": "A"}) is None


class Topics:
    def __init__(self, **windows: int | None):
        self.cfgs = {t: TopicConfig(t).with_dedup_window(w) for t, w in windows.items()}

    def get(self, name):
        return self.cfgs.get(name)

    def list(self):
        return list(self.cfgs.values())


def test_ids_are_judged_by_their_topics_window_kept_for_the_longest_and_capped_oldest_first():
    w = DedupWindow(TopicWindows(Topics(Short=1, Off=0), 10), max_entries=3)
    assert w.judge("Off", {"UNIQ_KEY": "A"}) is None and w.judge("T", {}) is None
    assert w.judge("Short", {"UNIQ_KEY": "S"}) == ("Short", id_of("Short", "S"), 1_000)
    a, s = w.key_of("T", {"UNIQ_KEY": "A"}), w.key_of("Short", {"UNIQ_KEY": "S"})
    assert a != w.key_of("U", {"UNIQ_KEY": "A"}) and len(a) == 16      # keyed by topic too
    w.add([(a, 1_000, 10), (s, 1_000, 20)])
    assert w.find(a, 5_000, 10_000) == (1_000, 10) and w.find(s, 1_500, 1_000) == (1_000, 20)
    assert w.find(s, 2_500, 1_000) is None        # the topic's own 1 s window is over
    w.add([(w.key_of("T", {"UNIQ_KEY": "B"}), 2_500, 30)])
    assert len(w) == 3                             # kept for the longest window (10 s), judged by its own
    assert w.find(a, 11_001, 10_000) is None       # 10 s later
    w.add([(w.key_of("T", {"UNIQ_KEY": c}), 3_000, 40) for c in "CD"])
    # the cap: the oldest run went first (A and S, both within the longest window: early)
    assert len(w) == 3 and w.early_evictions == 2 and w.find(a, 3_000, 10_000) is None
    w.add([(w.key_of("T", {"UNIQ_KEY": "E"}), 20_000, 50)])
    assert len(w) == 1 and w.early_evictions == 2   # the rest expired: not counted as early
    w.add([(w.key_of("T", {"UNIQ_KEY": "E"}), 21_000, 60)])    # re-added: the newer place counts
    assert len(w) == 1 and w.find(w.key_of("T", {"UNIQ_KEY": "E"}), 21_000, 10_000) == (21_000, 60)
    w.add([(w.key_of("T", {"UNIQ_KEY": "F"}), 25_000, 70)])
    assert len(w) == 2 and w.approx_bytes() > 0     # the stale reference to E's first place went alone


def test_a_property_is_read_from_a_stored_properties_string_alone():
    from raftmq.replication.dedup_window import _property

    s = "KEYS\x01a\x02XUNIQ_KEY\x01no\x02UNIQ_KEY\x01yes\x02REAL_TOPIC\x01T"
    assert (_property(s, "UNIQ_KEY"), _property(s, "REAL_TOPIC"), _property(s, "KEYS")) == ("yes", "T", "a")
    assert _property(s, "DELAY") is None and _property("", "UNIQ_KEY") is None


def test_a_topic_window_is_checked_when_the_topic_is_created_or_updated():
    from raftmq.store.errors import StoreError

    TopicConfig("T").with_dedup_window(600).validate()
    for bad in ("-1", "1.5", "ten", str(10**9)):
        with pytest.raises(StoreError, match="de-duplication window"):
            TopicConfig("T", attributes=(("dedup.window.seconds", bad),)).validate()


def _result(offset: int) -> AppendResult:
    return AppendResult(offset, 0, 100, 1_000, "T", 0, "7F0000010000")


@pytest.mark.parametrize("settle_at_apply", [True, False], ids=["async", "sync"])
def test_a_retry_of_an_id_in_flight_waits_for_the_original_and_shares_its_outcome(settle_at_apply):
    """Under async a waiting retry is answered when the original applies; under sync only once the original is
    acknowledged (durable on a majority), and at its apply when the original ended unknown before it."""
    from raftmq.replication.errors import UnknownOutcomeError
    from raftmq.replication.group_commit import PendingPut

    d = Deduplicator(DedupWindow(TopicWindows(Topics(), 120), 100), store=None)
    d.settle_at_apply = settle_at_apply
    first = PendingPut([msg("T", 1)], 10)
    [proposed] = d.screen([first], 1_000)
    keys = d.keys_of([proposed])
    retry = PendingPut([msg("T", 1)], 10)
    assert d.screen([retry], 1_000) == [] and not retry.future.done()    # waits: nothing proposed again
    d.applied(keys, [_result(0)])
    if settle_at_apply:
        assert retry.future.result(0)[0].duplicate
    else:
        assert not retry.future.done()              # applied, not yet durable
        first.resolve([_result(0)])
        r = retry.future.result(0)[0]
        assert r.duplicate and r.physical_offset == 0 and r.uniq_key == uniq(1)
    # the original ends unknown before it applies: the retry waits for the apply in both modes
    first, retry = PendingPut([msg("T", 2)], 10), PendingPut([msg("T", 2)], 10)
    keys = d.keys_of(d.screen([first], 2_000))
    d.screen([retry], 2_000)
    first.fail(UnknownOutcomeError("leader paused"))
    assert not retry.future.done()
    d.applied(keys, [_result(100)])
    assert retry.future.result(0)[0].physical_offset == 100
    # leadership lost: every waiting retry's outcome is unknown as well
    first, retry = PendingPut([msg("T", 3)], 10), PendingPut([msg("T", 3)], 10)
    d.screen([first], 3_000)
    d.screen([retry], 3_000)
    d.leadership_lost(UnknownOutcomeError("no longer leader"))
    with pytest.raises(UnknownOutcomeError):
        retry.future.result(0)


def test_a_batch_screened_for_a_term_this_member_no_longer_leads_registers_nothing():
    """A paused and resumed leader's committer may screen one more batch after the role change cleared the ids in
    flight: none of its ids may stay there (no apply would ever free them, and every retry of them would wait for
    an original that never comes); the batch is not proposed, and the next term's screening judges the retry."""
    from raftmq.replication.errors import UnknownOutcomeError
    from raftmq.replication.group_commit import PendingPut

    d = Deduplicator(DedupWindow(TopicWindows(Topics(), 120), 100), store=None)
    d.lead(5)
    d.leadership_lost(UnknownOutcomeError("no longer leader"))
    late = PendingPut([msg("T", 1)], 10)
    assert d.screen([late], 1_000, term=5) is None and not late.future.done()
    d.lead(7)
    retry = PendingPut([msg("T", 1)], 10)
    assert d.screen([retry], 2_000, term=7) == [retry]      # proposed, not waiting for the late batch
    assert d.keys_of([retry]) == [(0, id_of("T", uniq(1)))]


# ---------------------------------------------------------------------------------------------------- write paths
def dedup_for(store, window_s: int = 120, cap: int = 1000) -> Deduplicator:
    return Deduplicator(DedupWindow(TopicWindows(store.topics, window_s), cap), store)


def raft_path(root, members):
    from raftmq.replication import RaftSettings

    st = open_store(root)
    wp = RaftWritePath(st, node_id="n0", members=members, settings=RaftSettings(**FAST), dedup=dedup_for(st))
    wp.start()
    wait_writable(wp)
    return st, wp


def local_path(root, members=None):
    st = open_store(root)
    wp = LocalWritePath(st, dedup=dedup_for(st))
    wp.start()
    return st, wp


def stop(st, wp):
    wp.stop()
    st.shutdown()


def stored_uniq_keys(st, topic: str) -> list[str]:
    """The UNIQ_KEY of every record of ``topic`` in the commit log, in log order."""
    return [string_to_properties(props).get("UNIQ_KEY") for _o, _t, t, props
            in st.records_since(0, st.commit_log_max_offset) if t == topic]


@pytest.mark.parametrize("make", [raft_path, local_path], ids=["raft", "local"])
def test_a_retry_gets_the_originals_result_and_is_stored_once_also_after_a_restart(tmp_path, make):
    members = one_member(tmp_path)
    st, wp = make(tmp_path / "s", members)
    try:
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1))
        wp.create_topic(TopicConfig(topic_name="Off", read_queue_nums=1, write_queue_nums=1).with_dedup_window(0))
        [first] = wp.put([msg("T", 1, b"one")]).result(10)
        assert not first.duplicate
        [again] = wp.put([msg("T", 1, b"one")]).result(10)
        assert again.duplicate
        assert (again.msg_id, again.queue_id, again.queue_offset, again.physical_offset, again.store_timestamp,
                again.topic, again.uniq_key) == (first.msg_id, first.queue_id, first.queue_offset,
                                                 first.physical_offset, first.store_timestamp, first.topic,
                                                 first.uniq_key)
        # a batch mixing new and retried messages, one of them twice: only the new ones are stored, once
        rs = wp.put([msg("T", 2), msg("T", 1), msg("T", 3), msg("T", 2)]).result(10)
        assert [r.duplicate for r in rs] == [False, True, False, True]
        assert rs[1].physical_offset == first.physical_offset and rs[3].physical_offset == rs[0].physical_offset
        # concurrent puts of the same message: one is stored, the other waits for its result
        futs = wp.put_many([[msg("T", 4)], [msg("T", 4)]])
        a, b = (f.result(10)[0] for f in futs)
        assert (a.duplicate, b.duplicate) == (False, True) and a.physical_offset == b.physical_offset
        # a delayed send is judged in the topic it names (its record waits in SCHEDULE_TOPIC_XXXX)
        [delayed] = wp.put([msg("T", 5, DELAY="3")]).result(10)
        assert delayed.topic == "SCHEDULE_TOPIC_XXXX" and not delayed.duplicate
        [again] = wp.put([msg("T", 5, DELAY="3")]).result(10)
        assert again.duplicate and (again.topic, again.queue_id, again.physical_offset) == (
            delayed.topic, delayed.queue_id, delayed.physical_offset)
        # without a UNIQ_KEY, or in a topic without a window: never a duplicate
        assert not wp.put([msg("T", None)]).result(10)[0].duplicate
        assert [r.duplicate for r in wp.put([msg("Off", 9), msg("Off", 9)]).result(10)] == [False, False]
    finally:
        stop(st, wp)

    # the topic's window is a topic attribute, as RocketMQ 5 stores attributes (written at a clean stop)
    topics = json.loads((tmp_path / "s" / "config" / "topics.json").read_text())["topicConfigTable"]
    assert topics["Off"]["attributes"] == {"dedup.window.seconds": "0"}

    st, wp = make(tmp_path / "s", members)   # the window is rebuilt from the commit log
    try:
        [r] = wp.put([msg("T", 3)]).result(10)
        assert r.duplicate and r.physical_offset == rs[2].physical_offset
        assert wp.dedup.window.rebuilds == 1
        stored = stored_uniq_keys(st, "T")
        assert sorted(stored[:4] + stored[5:]) == [uniq(i) for i in (1, 2, 3, 4)] and len(stored) == 5
        scheduled = stored_uniq_keys(st, "SCHEDULE_TOPIC_XXXX")
        assert scheduled == [uniq(5)]
        assert stored_uniq_keys(st, "Off") == [uniq(9), uniq(9)]
    finally:
        stop(st, wp)


def test_a_batch_screened_in_another_term_than_its_entrys_is_dropped_at_apply(tmp_path):
    """pysyncobj forwards a command a deposed leader proposed to the new leader, which appends it in its own term:
    the batch was screened against the deposed leader's window, so every member drops it at apply (the entry's
    term is part of the log) and nothing of it is stored or kept in the window."""
    from raftmq.replication.applied_index import AppliedIndex
    from raftmq.replication.group_commit import PendingPut
    from raftmq.replication.state_machine import StateMachine, frame_batch

    st = open_store(tmp_path / "s")
    applied = AppliedIndex(str(tmp_path / "applied.idx"))
    try:
        d = dedup_for(st)
        machine = StateMachine(st, applied, d)
        machine.entry_term = lambda index: 4
        d.lead(3)
        put = PendingPut([msg("T", 1)], 10)
        blob, puts = machine.applier.encode_isolating(d.screen([put], 1_000, term=3), 1_000)
        keys = d.keys_of(puts)
        end = st.commit_log_max_offset
        assert machine.apply_batch(1, frame_batch(blob, keys, term=3)) == (1, None, [])
        assert st.commit_log_max_offset == end and machine.stale_batches_dropped == 1
        assert keys[0][1] not in d.window and applied.last == (1, end)
        # the batch in the term it was screened in is stored, and its id kept
        index, term, results = machine.apply_batch(2, frame_batch(blob, keys, term=4))
        assert (index, term, len(results)) == (2, 4, 1) and keys[0][1] in d.window
    finally:
        applied.close()
        st.shutdown()
