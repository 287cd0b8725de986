"""Consume queues cost what is used, not how many exist (issue 43): files are mapped while read or written and at
most ``max_mapped_consume_queue_files`` at once, idle ones are unmapped, and a start after a clean stop opens no
queue file until a queue is used."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from raftmq.store import GetStatus, Message, MessageStore, StoreConfig

TOPICS = 300
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cfg(root, **kw) -> StoreConfig:
    base = dict(root_dir=str(root), mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * 1000,
                max_hash_slot_num=1000, max_index_num=4000, preallocate=False, scrub_rate_bytes_per_s=0,
                max_mapped_consume_queue_files=16)
    base.update(kw)
    return StoreConfig(**base)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_file_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


def _fill(st: MessageStore, topics: int = TOPICS) -> None:
    for start in range(0, topics, 100):
        st.put_messages([Message(topic=f"t{i:04d}", queue_id=i % 4, body=b"m%d" % i)
                         for i in range(start, min(topics, start + 100))])
    assert st.reput.wait_dispatched(timeout=60)


def _read_all(st: MessageStore, topics: int = TOPICS) -> None:
    for i in range(topics):
        r = st.get_messages(f"t{i:04d}", i % 4, 0)
        assert r.status is GetStatus.FOUND and r.messages[0].body == b"m%d" % i, (i, r.status)


def test_queue_files_are_mapped_while_used_and_at_most_the_limit(tmp_path):
    st = MessageStore(_cfg(tmp_path))
    st.open()
    try:
        fds = _fds() + 4  # the first put creates a commit-log segment and an index file
        _fill(st)
        lazy = st.consume_queues.lazy
        assert sum(1 for cq in st.consume_queues.queues() if cq.has_files()) == TOPICS
        assert lazy.mapped_count <= 16 and _fds() <= fds + 16
        rss = _rss_file_kib()
        _read_all(st)
        assert lazy.mapped_count <= 16 and _fds() <= fds + 16
        # a touch maps one page of a file, not the device's read-ahead window
        assert _rss_file_kib() - rss < TOPICS * 32, "reading one unit of each queue made the process hold more"
        st.flush()  # the directories of the new files are synced by the consume-queue flush
        assert st.consume_queues.lazy.sync_directories() == 0
        released = lazy.sweep(now=1e12) + lazy.sweep(now=2e12)  # unused for two sweeps: unmapped
        assert released > 0 and lazy.mapped_count == 0
        _read_all(st, 20)  # and mapped again when read
    finally:
        st.shutdown()


def test_a_start_after_a_clean_stop_opens_no_queue_file_until_one_is_used(tmp_path):
    st = MessageStore(_cfg(tmp_path))
    st.open()
    _fill(st)
    st.shutdown()
    for restart in range(2):  # a queue never used in between keeps what the stop recorded, stop after stop
        st = MessageStore(_cfg(tmp_path))
        fds = _fds()
        st.open()
        try:
            queues = list(st.consume_queues.queues())
            assert len(queues) == TOPICS and not any(cq.loaded for cq in queues)
            assert st.consume_queues.lazy.mapped_count == 0 and _fds() <= fds + 8, "queue files opened at start"
            assert st.start_check_records == 0 and st.derived_damage == []
            assert st.queue_ids("t0005") == [1] and st.max_offset_in_queue("t0005", 1) == 1
            assert st.min_offset_in_queue("t0005", 1) == 0
            r = st.get_messages("t0005", 1, 0)
            assert r.status is GetStatus.FOUND and r.messages[0].body == b"m5"
            assert [cq.topic for cq in st.consume_queues.queues() if cq.loaded] == ["t0005"]
            nxt = st.put_messages([Message(topic="t0007", queue_id=3, body=b"again%d" % restart)])[0]
            assert nxt.queue_offset == 1 + restart  # the next offset comes from what the stop recorded
            assert st.reput.wait_dispatched(timeout=30)
            st.flush()  # flushing visits the written queues only: the others stay closed
            assert {cq.topic for cq in st.consume_queues.queues() if cq.loaded} == {"t0005", "t0007"}
        finally:
            st.shutdown()
    st = MessageStore(_cfg(tmp_path))
    st.open()
    try:
        _read_all(st)
        assert [m.body for m in st.get_messages("t0007", 3, 0).messages] == [b"m7", b"again0", b"again1"]
    finally:
        st.shutdown()


def test_a_queue_file_deleted_while_stopped_is_found_when_the_queue_is_first_used(tmp_path):
    st = MessageStore(_cfg(tmp_path))
    st.open()
    _fill(st)
    st.put_messages([Message(topic="t0009", queue_id=1, body=b"more%d" % i) for i in range(50)])
    assert st.reput.wait_dispatched(timeout=30)
    st.shutdown()
    (tmp_path / "consumequeue" / "t0009" / "1" / ("0" * 20)).unlink()
    st = MessageStore(_cfg(tmp_path))
    st.open()
    try:
        assert st.derived_damage == []  # nothing opened yet
        assert st.max_offset_in_queue("t0009", 1) == 51
        r = st.get_messages("t0009", 1, 0, max_count=64)  # opens it: damage found, rebuilt before the answer
        assert r.status is GetStatus.FOUND and [m.body for m in r.messages] == [b"m9"] + [b"more%d" % i
                                                                                        for i in range(50)]
        assert len(st.derived_damage) == 1 and "t0009-1 is missing" in st.derived_damage[0]
        assert st.corruption_found["consumequeue"] == 1
        assert st.put_messages([Message(topic="t0009", queue_id=1, body=b"next")])[0].queue_offset == 51
    finally:
        st.shutdown()


def test_a_low_descriptor_limit_lowers_the_mapped_files_instead_of_failing_reads(tmp_path):
    """Each mapped queue file holds a descriptor: under ``ulimit -n 128`` the default of 4,096 mapped files would
    run out of descriptors (EMFILE on a read); the store maps at most half the limit instead."""
    script = textwrap.dedent(f"""
        import resource, sys
        sys.path[:0] = {[REPO, os.path.join(REPO, "proto")]!r}
        from raftmq.store import GetStatus, Message, MessageStore, StoreConfig
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        cfg = StoreConfig(root_dir={str(tmp_path)!r}, mapped_file_size_commit_log=1 << 20,
                          mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=1000, max_index_num=4000,
                          preallocate=False, scrub_rate_bytes_per_s=0)
        st = MessageStore(cfg)
        st.open()
        for start in range(0, 400, 100):
            st.put_messages([Message(topic="t%04d" % i, body=b"m%d" % i) for i in range(start, start + 100)])
        assert st.reput.wait_dispatched(timeout=60)
        for i in range(400):
            r = st.get_messages("t%04d" % i, 0, 0)
            assert r.status is GetStatus.FOUND and r.messages[0].body == b"m%d" % i, (i, r.status)
        print(st.consume_queues.lazy.max_mapped, st.consume_queues.lazy.mapped_count)
        st.shutdown()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    limit, mapped = map(int, out.stdout.split())
    assert limit == 64 and mapped <= 64
