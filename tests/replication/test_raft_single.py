"""RaftWritePath in-process with a real store and real pysyncobj (a group of one, or two with one absent):
barrier before writes, replay idempotence across restarts, metadata commands, errors that say what to do."""

from __future__ import annotations

import socket
import time

import pytest

from raftmq.replication import NoLeaderError, RaftSettings, RaftWritePath
from raftmq.replication.errors import ReplicationError
from raftmq.replication.write_path import MemberInfo
from raftmq.store import Message, MessageStore, StoreConfig
from raftmq.store.errors import MessageIllegalError
from raftmq.store.topic_config import TopicConfig
from tests.support.processes import free_ports
from tests.support.tick_hold import tick_thread_held

FAST = dict(raft_min_timeout=0.4, raft_max_timeout=0.8, leader_fallback_timeout=0.3, append_entries_period=0.05,
            put_timeout_s=5.0)


def open_store(root) -> MessageStore:
    st = MessageStore(StoreConfig(root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                                  mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=256,
                                  max_index_num=1024, max_message_size=16 * 1024, preallocate=False))
    st.open()
    return st


def make(root, members, node_id="n0", **settings):
    st = open_store(root)
    wp = RaftWritePath(st, node_id=node_id, members=members, settings=RaftSettings(**{**FAST, **settings}))
    return st, wp


def wait_writable(wp, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not wp.is_writable():
        assert time.monotonic() < deadline, "never became writable"
        time.sleep(0.02)


def one_member(tmp_path):
    raft, grpc_port = free_ports(2)
    return [MemberInfo("n0", f"127.0.0.1:{raft}", f"127.0.0.1:{grpc_port}")]


def test_single_member_group_writes_after_its_barrier_and_replays_idempotently(tmp_path):
    members = one_member(tmp_path)
    st, wp = make(tmp_path / "s", members)
    wp.start()
    try:
        wait_writable(wp)
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2))
        rs = []
        for i in range(30):
            rs += wp.put([Message(topic="T", queue_id=i % 2, body=b"m%d" % i)]).result(10)
        wp.commit_offsets("G", "T", {0: 3})
        assert [r.queue_offset for r in rs if r.queue_id == 0] == list(range(15))
        assert all(r.uniq_key for r in rs)
        assert st.consumer_offsets.offsets("G", "T") == {0: 3}
        [me] = wp.members_status()
        assert me["role"] == "leader" and me["applied_offset"] == st.commit_log_max_offset
        end = st.commit_log_max_offset
    finally:
        wp.stop()
        st.shutdown()

    # restart: pysyncobj replays its journal; apply skips what the commit log already has
    st, wp = make(tmp_path / "s", members)
    wp.start()
    try:
        wait_writable(wp)
        assert st.commit_log_max_offset == end
        r = wp.put([Message(topic="T", queue_id=0, body=b"after")]).result(10)[0]
        assert r.physical_offset == end and r.queue_offset == 15
        assert st.topics.get("T").read_queue_nums == 2
    finally:
        wp.stop()
        st.shutdown()


def test_without_a_majority_nothing_is_writable_and_errors_say_so(tmp_path):
    raft0, raft1, g0, g1 = free_ports(4)
    members = [MemberInfo("n0", f"127.0.0.1:{raft0}", f"127.0.0.1:{g0}"),
               MemberInfo("n1", f"127.0.0.1:{raft1}", f"127.0.0.1:{g1}")]
    st, wp = make(tmp_path / "s", members)
    wp.start()
    try:
        time.sleep(1.0)
        assert not wp.is_writable()
        with pytest.raises(NoLeaderError, match="retry"):
            wp.put([Message(topic="T", queue_id=0, body=b"x")]).result(5)
        with pytest.raises(NoLeaderError):
            wp.commit_offsets("G", "T", {0: 1})
        assert wp.leader() is None
    finally:
        wp.stop()
        st.shutdown()


def test_config_errors_name_the_fix(tmp_path):
    members = one_member(tmp_path)
    st = open_store(tmp_path / "s")
    try:
        with pytest.raises(ValueError, match="must contain this node's id"):
            RaftWritePath(st, node_id="nX", members=members)
        with pytest.raises(ValueError, match="duplicate"):
            RaftWritePath(st, node_id="n0", members=members + members)
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = [MemberInfo("n0", f"127.0.0.1:{busy.getsockname()[1]}", members[0].grpc_address)]
        wp = RaftWritePath(st, node_id="n0", members=taken, settings=RaftSettings(**FAST))
        with pytest.raises(ReplicationError, match="cannot listen"):
            wp.start()
        busy.close()
    finally:
        st.shutdown()


def test_a_store_written_outside_raft_is_refused_with_a_clear_reason(tmp_path):
    st = open_store(tmp_path / "s")
    try:
        st.put_messages([Message(topic="T", queue_id=0, body=b"single-node data")])
        wp = RaftWritePath(st, node_id="n0", members=one_member(tmp_path), settings=RaftSettings(**FAST))
        with pytest.raises(ReplicationError, match="written outside Raft"):
            wp.start()
    finally:
        st.shutdown()


def test_a_failing_apply_fences_retries_the_same_entry_and_never_skips_it(tmp_path):
    """An I/O error inside apply must not skip the entry (replicas would diverge): the commit log is cut back to
    the batch start, the member is fenced (not writable), pysyncobj retries the entry, and once the store works
    again the entry is applied exactly once. The caller's callback is lost inside pysyncobj, so the put ends as
    UnknownOutcomeError after put_timeout_s, although the message is stored."""
    from raftmq.replication import UnknownOutcomeError

    st, wp = make(tmp_path / "s", one_member(tmp_path), put_timeout_s=3.0)
    wp.start()
    try:
        wait_writable(wp)
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1))
        real_apply = st.apply_batch
        failures = []

        def flaky_apply(batch):  # fault injection: the disk fails twice, then recovers
            if len(failures) < 2:
                failures.append(1)
                real_apply(batch)  # half-done write, as a real I/O error mid-append could leave
                raise OSError(28, "No space left on device")
            return real_apply(batch)

        st.apply_batch = flaky_apply
        fut = wp.put([Message(topic="T", queue_id=0, body=b"survives")])
        with pytest.raises(UnknownOutcomeError):
            fut.result(15)
        st.apply_batch = real_apply
        wait_writable(wp)
        r = wp.put([Message(topic="T", queue_id=0, body=b"next")]).result(10)[0]
        assert r.queue_offset == 1, "the failed entry must be applied exactly once before the next one"
        deadline = time.monotonic() + 10  # acks come at apply; consume queues follow through reput
        while st.max_offset_in_queue("T", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        first = st.get_messages("T", 0, 0, max_count=10).messages
        assert [m.body for m in first] == [b"survives", b"next"]
        assert wp.members_status()[0]["health"] == "ok"
    finally:
        wp.stop()
        st.shutdown()


def test_put_many_shares_one_raft_entry_and_isolates_a_bad_put(tmp_path):
    """issue 17: a stream request's sends are queued together; good puts share one Raft entry (the committer
    may split them only when full), a bad put fails alone, and the stats count requests per entry."""
    members = one_member(tmp_path)
    st, wp = make(tmp_path / "s", members)
    wp.start()
    try:
        wait_writable(wp)
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1))
        before = wp.group_commit_stats()
        futs = wp.put_many([[Message(topic="T", queue_id=0, body=b"a")],
                            [Message(topic="bad topic!", queue_id=0, body=b"x")],
                            [Message(topic="T", queue_id=0, body=b"b"), Message(topic="T", queue_id=0, body=b"c")]])
        assert [r.queue_offset for r in futs[0].result(10)] == [0]
        with pytest.raises(MessageIllegalError):
            futs[1].result(10)
        assert [r.queue_offset for r in futs[2].result(10)] == [1, 2]
        commits, msgs, reqs = (a - b for a, b in zip(wp.group_commit_stats(), before, strict=True))
        assert (commits, msgs, reqs) == (1, 4, 3)
    finally:
        wp.stop()
        st.shutdown()


def test_write_stages_are_timed_once_per_raft_entry(tmp_path):
    """issue 41: every group commit adds one sample to each stage of raftmq_write_stage_seconds (never one per
    message), and the leader's apply is timed inside its Raft round."""
    members = one_member(tmp_path)
    st, wp = make(tmp_path / "s", members)
    wp.start()
    try:
        wait_writable(wp)
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1))
        before, commits0 = wp.write_stage_seconds(), wp.group_commit_stats()[0]
        for _ in range(3):
            futs = wp.put_many([[Message(topic="T", queue_id=0, body=b"a" * 100)] for _ in range(5)])
            for f in futs:
                f.result(10)
        after, commits = wp.write_stage_seconds(), wp.group_commit_stats()[0] - commits0
        assert 3 <= commits < 15  # five puts queued together share an entry (the committer may split them)
        counts = {s: after[s][0] - before[s][0] for s in after}
        seconds = {s: after[s][1] - before[s][1] for s in after}
        assert counts == {"group_commit_wait": commits, "propose": commits, "raft_round": commits, "apply": commits}
        assert all(v > 0 for v in seconds.values()), seconds
        assert seconds["apply"] <= seconds["raft_round"]
    finally:
        wp.stop()
        st.shutdown()


@pytest.mark.parametrize("durability", ["async", "sync"])
def test_small_async_batches_resolve_on_the_tick_thread_others_on_the_completion_thread(tmp_path, durability):
    """An async batch of up to INLINE_RESOLVE_MAX_PUTS puts has nothing left to wait for once applied, so it is
    resolved on the tick thread (a hop to the completion thread only added a wake-up); bigger ones, and every sync
    batch (its fsync round), go to the completion thread."""
    import threading

    from raftmq.replication.raft_write_path import INLINE_RESOLVE_MAX_PUTS

    members = one_member(tmp_path)
    st, wp = make(tmp_path / "s", members, durability=durability)
    wp.start()
    try:
        wait_writable(wp)
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1))
        resolved_on: dict[int, set[str]] = {}
        for n in (1, INLINE_RESOLVE_MAX_PUTS, INLINE_RESOLVE_MAX_PUTS + 1):
            names: set[str] = set()
            with tick_thread_held(wp._log):  # every callback is in place before the batch can commit
                futs = wp.put_many([[Message(topic="T", queue_id=0, body=b"m%d" % i)] for i in range(n)])
                for f in futs:
                    f.add_done_callback(lambda _f, names=names: names.add(threading.current_thread().name))
            for f in futs:
                f.result(10)
            resolved_on[n] = names
        completion = {"raftmq-raft-completion"}
        if durability == "sync":
            assert all(names == completion for names in resolved_on.values()), resolved_on
        else:
            assert resolved_on[INLINE_RESOLVE_MAX_PUTS + 1] == completion, resolved_on
            for n in (1, INLINE_RESOLVE_MAX_PUTS):
                assert len(resolved_on[n]) == 1 and resolved_on[n] != completion, resolved_on
    finally:
        wp.stop()
        st.shutdown()
