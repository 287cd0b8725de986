"""LocalWritePath against a real MessageStore: group commit, per-caller results, bad input isolation,
metadata, SYNC flush, back-pressure."""

from __future__ import annotations

import threading

import pytest

from raftmq.replication import BusyError, LocalWritePath
from raftmq.store import Message, PutStatus
from raftmq.store.errors import MessageIllegalError
from raftmq.store.topic_config import TopicConfig
from tests.replication.conftest import open_store


def test_concurrent_puts_share_batches_and_get_their_own_offsets(store):
    wp = LocalWritePath(store, node_id="n0")
    wp.start()
    try:
        results: dict[int, list] = {}

        def producer(i: int) -> None:
            msgs = [Message(topic="T", queue_id=i % 2, body=f"{i}-{j}".encode()) for j in range(5)]
            results[i] = wp.put(msgs).result(10)

        threads = [threading.Thread(target=producer, args=(i,)) for i in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seen = set()
        for i, rs in results.items():
            assert len(rs) == 5 and all(r.status == PutStatus.PUT_OK for r in rs)
            for j, r in enumerate(rs):
                assert r.queue_id == i % 2 and r.uniq_key
                m = store.view_message(r.physical_offset)
                assert m.body == f"{i}-{j}".encode() and m.queue_offset == r.queue_offset
                seen.add((r.queue_id, r.queue_offset))
        assert len(seen) == 200  # no queue offset handed out twice
    finally:
        wp.stop()


def test_one_bad_put_fails_alone(store):
    wp = LocalWritePath(store, node_id="n0")
    wp.start()
    try:
        good = wp.put([Message(topic="T", queue_id=0, body=b"ok")])
        bad = wp.put([Message(topic="bad topic!", queue_id=0, body=b"x")])
        assert good.result(10)[0].status == PutStatus.PUT_OK
        with pytest.raises(MessageIllegalError):
            bad.result(10)
    finally:
        wp.stop()


def test_metadata_goes_to_the_store(store):
    wp = LocalWritePath(store, node_id="n0")
    wp.start()
    try:
        wp.create_topic(TopicConfig(topic_name="Meta", read_queue_nums=2, write_queue_nums=2))
        assert store.topics.get("Meta").read_queue_nums == 2
        wp.commit_offsets("G", "Meta", {0: 5})
        assert store.consumer_offsets.offsets("G", "Meta") == {0: 5}
        wp.delete_topic("Meta")
        assert store.topics.get("Meta") is None
        assert wp.is_writable() and wp.leader().id == "n0"
        [st] = wp.members_status()
        assert st["role"] == "leader" and st["health"] == "ok"
    finally:
        wp.stop()
    assert not wp.is_writable()


def test_sync_flush_mode_resolves_after_the_flush(tmp_path):
    st = open_store(tmp_path, flush_disk_type="SYNC")
    wp = LocalWritePath(st, node_id="n0")
    wp.start()
    try:
        rs = wp.put([Message(topic="T", queue_id=0, body=b"durable")]).result(10)
        assert rs[0].status == PutStatus.PUT_OK
        assert st.flushed_offset >= rs[0].physical_offset + rs[0].wrote_bytes
    finally:
        wp.stop()
        st.shutdown()


def test_overload_answers_busy(store):
    # max_inline_bytes=0: every put queues for the committer (a lone small put would otherwise be applied in this
    # thread before the next one is submitted, and one thread could never overload the queue)
    wp = LocalWritePath(store, node_id="n0", max_pending_bytes=4096, max_inline_bytes=0)
    wp.start()
    try:
        futs = [wp.put([Message(topic="T", queue_id=0, body=b"x" * 1000)]) for _ in range(300)]
        errors = [f.exception(10) for f in futs]
        assert any(isinstance(e, BusyError) for e in errors)
        assert any(e is None for e in errors)
    finally:
        wp.stop()


@pytest.mark.parametrize("flush", ["ASYNC", "SYNC"])
def test_put_many_is_one_append_with_one_outcome_per_put(tmp_path, flush):
    """A stream request's sends (issue 17): one group commit (inline in ASYNC, via the committer in SYNC),
    each put its own results, a bad one failing alone; the stats count one commit of several requests."""
    st = open_store(tmp_path, flush_disk_type=flush)
    wp = LocalWritePath(st, node_id="n0")
    wp.start()
    try:
        before = wp.group_commit_stats()
        puts = [[Message(topic="T", queue_id=0, body=b"a")],
                [Message(topic="bad topic!", queue_id=0, body=b"x")],
                [Message(topic="T", queue_id=0, body=b"b"), Message(topic="T", queue_id=0, body=b"c")]]
        futs = wp.put_many(puts)
        assert [r.queue_offset for r in futs[0].result(10)] == [0]
        with pytest.raises(MessageIllegalError):
            futs[1].result(10)
        assert [r.queue_offset for r in futs[2].result(10)] == [1, 2]
        commits, msgs, reqs = (a - b for a, b in zip(wp.group_commit_stats(), before, strict=True))
        assert (commits, msgs, reqs) == (1, 4, 3)
        assert wp.put_many([]) == []
    finally:
        wp.stop()
        st.shutdown()
