"""LocalWritePath's lone-put path: a small put in ASYNC mode with nothing queued or committing is applied in the
caller's thread; everything else still goes through the committer thread."""

from __future__ import annotations

import pytest

from raftmq.replication import LocalWritePath
from raftmq.replication.errors import WritePathStoppedError
from raftmq.store import Message, PutStatus
from tests.replication.conftest import open_store


def test_a_lone_put_is_stored_before_put_returns(store):
    wp = LocalWritePath(store, node_id="n0")
    wp.start()
    try:
        fut = wp.put([Message(topic="T", queue_id=0, body=b"now", properties={"KEYS": "k1"})])
        assert fut.done() and wp.inline_commits == 1
        [r] = fut.result()
        assert r.status == PutStatus.PUT_OK and r.uniq_key
        m = store.view_message(r.physical_offset)
        assert m.body == b"now" and m.queue_offset == r.queue_offset == 0
    finally:
        wp.stop()


def test_a_put_arriving_while_a_commit_runs_waits_for_the_committer(store):
    wp = LocalWritePath(store, node_id="n0")
    wp.start()
    try:
        with wp._commit_lock:  # a commit in progress (the committer thread's or another caller's)
            fut = wp.put([Message(topic="T", queue_id=0, body=b"queued")])
            assert not fut.done(), "a put must not be applied beside a running commit"
        [r] = fut.result(10)
        assert r.status == PutStatus.PUT_OK and wp.inline_commits == 0
        assert store.view_message(r.physical_offset).body == b"queued"
        after = wp.put([Message(topic="T", queue_id=0, body=b"lone")]).result(10)
        assert after[0].queue_offset == r.queue_offset + 1
    finally:
        wp.stop()


def test_large_puts_go_through_the_committer(store):
    wp = LocalWritePath(store, node_id="n0", max_inline_bytes=1024)
    wp.start()
    try:
        rs = wp.put([Message(topic="T", queue_id=0, body=b"x" * 2000)]).result(10)
        assert rs[0].status == PutStatus.PUT_OK and wp.inline_commits == 0
    finally:
        wp.stop()


def test_sync_flush_puts_never_block_the_caller_on_an_fsync(tmp_path):
    st = open_store(tmp_path, flush_disk_type="SYNC")
    wp = LocalWritePath(st, node_id="n0")
    wp.start()
    try:
        rs = wp.put([Message(topic="T", queue_id=0, body=b"durable")]).result(10)
        assert rs[0].status == PutStatus.PUT_OK and wp.inline_commits == 0
        assert st.flushed_offset >= rs[0].physical_offset + rs[0].wrote_bytes
    finally:
        wp.stop()
        st.shutdown()


def test_puts_after_stop_fail_instead_of_being_applied(store):
    wp = LocalWritePath(store, node_id="n0")
    wp.start()
    wp.stop()
    with pytest.raises(WritePathStoppedError):
        wp.put([Message(topic="T", queue_id=0, body=b"late")]).result(10)
    assert store.commit_log_max_offset == 0


def test_the_put_that_starts_a_new_segment_is_left_to_the_committer(store):
    segment = store.config.mapped_file_size_commit_log
    wp = LocalWritePath(store, node_id="n0")
    wp.start()
    try:
        for i in range(200):
            before = wp.inline_commits
            [r] = wp.put([Message(topic="T", queue_id=0, body=b"x" * 1000)]).result(10)
            if r.physical_offset >= segment:
                assert wp.inline_commits == before, "the caller created a commit-log segment"
                assert store.view_message(r.physical_offset).queue_offset == i
                break
        else:
            pytest.fail("never reached the second segment")
        assert wp.inline_commits > 0
    finally:
        wp.stop()


def test_puts_go_to_the_committer_while_the_flush_lags(tmp_path):
    st = open_store(tmp_path, flush_interval_commit_log=600_000)  # no periodic flush during the test
    wp = LocalWritePath(st, node_id="n0", max_inline_flush_behind=0)
    wp.start()
    try:
        first = wp.put([Message(topic="T", queue_id=0, body=b"a")]).result(10)
        assert wp.inline_commits == 1 and st.commit_log_max_offset > st.flushed_offset
        second = wp.put([Message(topic="T", queue_id=0, body=b"b")]).result(10)
        assert wp.inline_commits == 1, "wrote to the mapped file in the caller's thread while the flush lagged"
        assert second[0].queue_offset == first[0].queue_offset + 1
    finally:
        wp.stop()
        st.shutdown()
