"""Pop state is written to popState.json periodically, not per command: after a crash the Raft journal's pop
commands past the file's recorded index are applied again, so acks and receives are never forgotten and every
replica holds the same table. Plus the table's own rules (CAS on seq, stale epochs, bounded in-flight)."""

from __future__ import annotations

import os
import shutil

from raftmq.node.pop_core import PopCore
from raftmq.store import Message
from raftmq.store.pop_state import PopStateTable, queue_key
from raftmq.store.topic_config import TopicConfig
from tests.replication.test_raft_single import make, one_member, wait_writable


def test_table_rules_stale_take_stale_epoch_and_compaction(tmp_path):
    t = PopStateTable(str(tmp_path))
    k = queue_key("g", "T", 0)
    assert t.apply([["take", k, 0, 3, {"0": [1, 100, 1, ""], "1": [1, 100, 2, ""], "2": [1, 100, 3, ""]}]]) == [None]
    assert t.get(k).seq == 3
    assert t.apply([["take", k, 0, 4, {"3": [1, 100, 4, ""]}]])[0].startswith("stale take")
    assert t.apply([["ack", k, 0, 1], ["ack", k, 1, 9]]) == [None, t.apply([["ack", k, 1, 9]])[0]]
    assert "stale receipt handle" in t.apply([["ack", k, 0, 1]])[0]
    assert t.apply([["renew", k, 1, 2, 400]]) == [None]
    assert t.get(k).inflight[1][1:3] == [400, 2], "a renewal keeps the epoch: the handle stays valid"
    assert t.apply([["change", k, 1, 2, 500]]) == [None]
    s = t.get(k)
    assert s.inflight[1][1] == 500 and s.inflight[1][2] == s.seq and s.low_water() == 1
    assert t.apply([["ack", k, 1, s.seq], ["ack", k, 2, 3]]) == [None, None]
    s = t.get(k)
    assert s.inflight == {} and s.low_water() == 3, "acked entries leave the table: it only holds what is open"
    t.persist()
    again = PopStateTable(str(tmp_path))
    again.load()
    assert again.get(k) == s


def test_journal_replay_restores_pop_commands_the_file_missed(tmp_path):
    members = one_member(tmp_path)
    st, wp = make(tmp_path / "s", members)
    wp.start()
    try:
        wait_writable(wp)
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1))
        wp.put([Message(topic="T", queue_id=0, body=b"m%d" % i) for i in range(6)]).result(10)
        pop = PopCore(st, wp, put=lambda msgs: wp.put(msgs).result(30))
        got = []
        while len(got) < 6:
            got += pop.receive("g", "T", max_messages=6, invisible_ms=60_000)
        st.pop_state.persist()
        path = st.pop_state.path
        shutil.copy(path, str(tmp_path / "early.json"))  # what a crash right now would leave on disk
        assert pop.ack("g", "T", [d.receipt_handle for d in got[:4]]) == [None] * 4
        handle, _ = pop.change_invisible("g", "T", got[4].receipt_handle, 120_000)
        pop.renew("g", "T", got[5].receipt_handle, 90_000)
        final = st.pop_state.get(queue_key("g", "T", 0))
        assert sorted(final.inflight) == [4, 5]
    finally:
        wp.stop()
        st.shutdown()
    shutil.copy(str(tmp_path / "early.json"), path)  # the periodic write had not caught up when it "crashed"
    os.remove(path + ".bak") if os.path.exists(path + ".bak") else None

    st, wp = make(tmp_path / "s", members)
    wp.start()
    try:
        wait_writable(wp)
        assert st.pop_state.get(queue_key("g", "T", 0)) == final, "acks and changes replayed from the journal"
        pop = PopCore(st, wp, put=lambda msgs: wp.put(msgs).result(30))
        assert pop.ack("g", "T", [handle, got[5].receipt_handle]) == [None, None], \
            "handles from before the restart still work (the renewed one too)"
    finally:
        wp.stop()
        st.shutdown()
