"""Deterministic apply (docs/architecture.md#contracts, 1): the same encoded batches make byte-identical stores.

One leader store encodes batches (``encode_batch``, store timestamps fixed by the test); two fresh replica
stores in different directories apply the same bytes with ``apply_batch``, one of them restarted midway (a
clean restart, then an unclean one). Afterwards their commit-log, consume-queue and index files must be
byte-identical. Index file names are wall-clock creation times (``yyyyMMddHHmmssSSS``) and so differ between
replicas by design: index files are compared by content, in name order, and must be equally many.

After an *unclean* restart the index is rebuilt from the abnormal-recovery point with RocketMQ's rule that
re-indexes the record at the index's end offset, so the restarted replica may hold a few duplicate entries
(queries deduplicate them): there the index is compared by the answers to every key, not by bytes. The key
"shared" is left out of that comparison: it has more hits than one query returns (64 index entries), and a
duplicate entry among the newest 64 makes that replica return one message fewer.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raftmq.store import Message, MessageStore, StoreConfig
from tests.store.store_helpers import segment_files, tree_bytes, wait_dispatched

GEOMETRY = {
    "mapped_file_size_commit_log": 8192,
    "mapped_file_size_consume_queue": 6 * 20,
    "max_hash_slot_num": 8,
    "max_index_num": 16,
    "preallocate": False,
}
T0 = 1_700_000_000_000


def leader_batches(leader: MessageStore) -> list[bytes]:
    """A mix of single and multi-message, multi-queue batches, a large body, IPv6 hosts, and keys."""
    batches = []
    for i in range(60):
        n = 1 + i % 5
        msgs = [
            Message(
                topic=("DetA", "DetB")[(i + j) % 2] if i % 7 else "DetA",
                queue_id=(i * 3 + j) % 3,
                body=bytes([(i * 31 + j) % 256]) * ((i * 97 + j * 13) % 900),
                properties={"TAGS": ("Aa", "BB", "TagC")[j % 3], "KEYS": f"k{i}-{j} shared",
                            "UNIQ_KEY": f"AC1000{i:04X}{j:04X}"},
                born_timestamp=T0 - 5 + i,
                born_host=("10.0.0.7", 50000 + j) if i % 11 else ("fe80::1", 50000),
            )
            for j in range(n)
        ]
        if i == 30:  # one record larger than half a segment: forces a blank record and a roll
            msgs = [Message(topic="DetA", queue_id=0, body=b"L" * 5000, properties={"KEYS": "large"},
                            born_timestamp=T0, born_host=("10.0.0.7", 1))]
        # store timestamps several seconds apart, so index time diffs and file boundaries matter
        batches.append(leader.encode_batch(msgs, store_timestamp=T0 + i * 1500,
                                           store_host=("192.168.0.1", 10911)))
    return batches


def apply_all(st: MessageStore, batches: list[bytes]) -> list[tuple[int, int]]:
    out = []
    for b in batches:
        out += [(r.physical_offset, r.queue_offset) for r in st.apply_batch(b)]
    return out


def restart(st: MessageStore, cfg: StoreConfig, clean: bool) -> MessageStore:
    wait_dispatched(st)
    st.shutdown()
    if not clean:  # as if the machine died right after everything was flushed (abort older than the boot)
        Path(cfg.abort_path).touch()
        os.utime(cfg.abort_path, (1_000_000, 1_000_000))
    st = MessageStore(cfg)
    st.open()
    return st


def index_contents(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in segment_files(root / "index")]


@pytest.fixture
def batches(tmp_path: Path) -> list[bytes]:
    leader = MessageStore(StoreConfig(root_dir=str(tmp_path / "leader"), **GEOMETRY))
    leader.open()
    try:
        return leader_batches(leader)
    finally:
        leader.shutdown()


@pytest.mark.parametrize("second_restart_clean", [True, False], ids=["clean", "unclean"])
def test_replicas_are_byte_identical(tmp_path: Path, batches: list[bytes], second_restart_clean: bool) -> None:
    roots = [tmp_path / "r1", tmp_path / "r2"]
    cfgs = [StoreConfig(root_dir=str(r), **GEOMETRY) for r in roots]
    a = MessageStore(cfgs[0])
    a.open()
    b = MessageStore(cfgs[1])
    b.open()
    try:
        ra = apply_all(a, batches)
        rb = apply_all(b, batches[:20])
        b = restart(b, cfgs[1], clean=True)
        rb += apply_all(b, batches[20:41])
        b = restart(b, cfgs[1], clean=second_restart_clean)
        rb += apply_all(b, batches[41:])
        assert ra == rb, "replicas assigned different offsets"
        wait_dispatched(a)
        wait_dispatched(b)
        assert a.commit_log_max_offset == b.commit_log_max_offset
        keys = ["large"] + [f"k{i}-{j}" for i in range(60) for j in range(5)]
        for topic in ("DetA", "DetB"):
            for key in keys:
                qa = [m.physical_offset for m in a.query_messages(topic, key, 64, 0, 1 << 62)]
                qb = [m.physical_offset for m in b.query_messages(topic, key, 64, 0, 1 << 62)]
                assert qa == qb, (topic, key)
    finally:
        a.shutdown()
        b.shutdown()

    cl_a, cl_b = tree_bytes(roots[0] / "commitlog"), tree_bytes(roots[1] / "commitlog")
    assert len(cl_a) > 10, "the test should roll many commit-log segments"
    assert sorted(cl_a) == sorted(cl_b)
    for name in cl_a:
        assert cl_a[name] == cl_b[name], f"commit-log segment {name} differs"
    cq_a, cq_b = tree_bytes(roots[0] / "consumequeue"), tree_bytes(roots[1] / "consumequeue")
    assert sorted(cq_a) == sorted(cq_b)
    for name in cq_a:
        assert cq_a[name] == cq_b[name], f"consume-queue file {name} differs"
    if not second_restart_clean:
        return
    ix_a, ix_b = index_contents(roots[0]), index_contents(roots[1])
    assert len(ix_a) > 3, "the test should roll several index files"
    assert len(ix_a) == len(ix_b)
    for i, (x, y) in enumerate(zip(ix_a, ix_b, strict=True)):
        assert x == y, f"index file #{i} (in name order) differs"


def test_apply_rejects_a_damaged_batch(tmp_path: Path, batches: list[bytes]) -> None:
    """A flipped bit in a replicated batch is refused, and nothing is appended."""
    from raftmq.store.errors import StoreError

    st = MessageStore(StoreConfig(root_dir=str(tmp_path / "r"), **GEOMETRY))
    st.open()
    try:
        bad = bytearray(batches[3])
        bad[len(bad) // 2] ^= 0x40
        with pytest.raises(StoreError):
            st.apply_batch(bytes(bad))
        assert st.commit_log_max_offset == 0
        with pytest.raises(StoreError):
            st.apply_batch(b"")
        apply_all(st, batches[:2])
        assert st.commit_log_max_offset > 0
    finally:
        st.shutdown()


def test_catch_up_copies_the_log_byte_for_byte(tmp_path: Path, batches: list[bytes]) -> None:
    """A wiped replica fed through read_commit_log/append_commit_log_raw ends up identical to its source."""
    src_cfg = StoreConfig(root_dir=str(tmp_path / "src"), **GEOMETRY)
    dst_cfg = StoreConfig(root_dir=str(tmp_path / "dst"), **GEOMETRY)
    src, dst = MessageStore(src_cfg), MessageStore(dst_cfg)
    src.open()
    dst.open()
    try:
        results = []
        for b in batches:
            results += src.apply_batch(b)
        offset = 0
        rounds = 0
        while offset < src.commit_log_max_offset:
            data = src.read_commit_log(offset, 3000)  # whole records, at most one segment at a time
            assert data, f"no progress at {offset}"
            dst.append_commit_log_raw(offset, data)
            assert dst.commit_log_max_offset > offset
            offset = dst.commit_log_max_offset
            rounds += 1
            if rounds == 25:  # restart the replica in the middle of catching up
                dst = restart(dst, dst_cfg, clean=True)
        assert offset == src.commit_log_max_offset
        # a raw append that does not start at the end is refused and changes nothing
        from raftmq.store.errors import StoreError

        with pytest.raises(StoreError):
            dst.append_commit_log_raw(offset - 10, src.read_commit_log(results[-1].physical_offset, 1 << 20))
        assert dst.commit_log_max_offset == offset
        wait_dispatched(src)
        wait_dispatched(dst)
        for topic in ("DetA", "DetB"):
            for qid in range(3):
                assert dst.max_offset_in_queue(topic, qid) == src.max_offset_in_queue(topic, qid)
        # the replica continues with the same offsets as its source
        tail = [src.apply_batch(b)[0] for b in batches[:3]]
        tail_dst = [dst.apply_batch(b)[0] for b in batches[:3]]
        assert [(r.physical_offset, r.queue_offset) for r in tail] == \
            [(r.physical_offset, r.queue_offset) for r in tail_dst]
        wait_dispatched(src)
        wait_dispatched(dst)
    finally:
        src.shutdown()
        dst.shutdown()
    for sub in ("commitlog", "consumequeue"):
        a, b = tree_bytes(tmp_path / "src" / sub), tree_bytes(tmp_path / "dst" / sub)
        assert sorted(a) == sorted(b)
        for name in a:
            assert a[name] == b[name], f"{sub}/{name} differs after catch-up"


def test_reput_stops_at_the_confirm_offset(tmp_path: Path, batches: list[bytes]) -> None:
    """Contract 2: nothing beyond the confirm offset reaches a consume queue, the index or a listener."""
    st = MessageStore(StoreConfig(root_dir=str(tmp_path / "r"), **GEOMETRY))
    st.open()
    heard: list[tuple[str, int, int]] = []
    try:
        st.add_arrival_listener(lambda t, q, mx: heard.append((t, q, mx)))
        st.confirm_offset = 0
        first = apply_all(st, batches[:10])
        confirmed = st.commit_log_max_offset
        rest = []
        for b in batches[10:20]:
            rest += st.apply_batch(b)
        st.confirm_offset = confirmed
        wait_dispatched(st)
        assert st.dispatch_behind_bytes() == 0
        counts: dict[tuple[str, int], int] = {}
        for b in batches[:10]:
            for topic, qid in _placements(b):
                counts[(topic, qid)] = counts.get((topic, qid), 0) + 1
        for (topic, qid), n in counts.items():
            assert st.max_offset_in_queue(topic, qid) == n, (topic, qid)
        assert st.query_messages("DetA", "k10-0", 4, 0, 1 << 62) == []  # batch 10 is not confirmed
        assert all(mx <= counts[(t, q)] for t, q, mx in heard)
        assert len(first) == sum(counts.values())
        st.confirm_offset = st.commit_log_max_offset
        wait_dispatched(st)
        assert len(st.query_messages("DetA", "k10-0", 4, 0, 1 << 62)) == 1
    finally:
        st.shutdown()


def _placements(batch: bytes) -> list[tuple[str, int]]:
    """(topic, queue) of every record in an encoded batch, from the record bytes themselves."""
    from raftmq.store.message import decode_record

    out = []
    pos = batch.find(bytes.fromhex("daa320a7")) - 4
    while pos >= 0:
        r = decode_record(batch, pos, check_crc=True)
        if not r.ok:
            break
        out.append((r.message.topic, r.message.queue_id))
        pos += r.size
    return out


def test_wiped_replica_catches_up_from_after_retention(tmp_path: Path, batches: list[bytes]) -> None:
    """The leader expired its oldest segments; a wiped replica copies from the leader's minimum on.

    Its consume queues then start at queue offsets above 0 (RocketMQ's fillPreBlank), and every read must
    agree with the leader's, before and after a restart of the replica.
    """
    import time

    src = MessageStore(StoreConfig(root_dir=str(tmp_path / "src"), **GEOMETRY))
    dst_cfg = StoreConfig(root_dir=str(tmp_path / "dst"), **GEOMETRY)
    dst = MessageStore(dst_cfg)
    src.open()
    dst.open()
    try:
        apply_all(src, batches)
        wait_dispatched(src)
        src.retention.delete_files_manually()
        src.retention.run_once(now_ms=int(time.time() * 1000) + 10**10)
        start = src.commit_log_min_offset
        assert start > 0, "retention should have expired the first segments"
        offset = start
        while offset < src.commit_log_max_offset:
            dst.append_commit_log_raw(offset, src.read_commit_log(offset, 5000))
            offset = dst.commit_log_max_offset
        for _ in range(2):
            wait_dispatched(dst)
            assert dst.commit_log_min_offset == start
            for topic in ("DetA", "DetB"):
                assert dst.queue_ids(topic) == src.queue_ids(topic)
                for qid in src.queue_ids(topic):
                    lo, hi = src.min_offset_in_queue(topic, qid), src.max_offset_in_queue(topic, qid)
                    assert (dst.min_offset_in_queue(topic, qid), dst.max_offset_in_queue(topic, qid)) == (lo, hi)
                    a = src.get_messages(topic, qid, lo, max_count=64)
                    b = dst.get_messages(topic, qid, lo, max_count=64)
                    assert (b.status, b.next_begin_offset) == (a.status, a.next_begin_offset)
                    assert [m.physical_offset for m in b.messages] == [m.physical_offset for m in a.messages]
                    if lo > 0:
                        assert dst.get_messages(topic, qid, lo - 1).status.name == "OFFSET_TOO_SMALL"
            for i in range(60):
                key = f"k{i}-0"
                qa = [m.physical_offset for m in src.query_messages("DetA", key, 8, 0, 1 << 62)]
                qb = [m.physical_offset for m in dst.query_messages("DetA", key, 8, 0, 1 << 62)]
                assert qa == qb, key
            dst = restart(dst, dst_cfg, clean=True)
        # and it continues with the same offsets as the leader
        assert [(r.physical_offset, r.queue_offset) for r in src.apply_batch(batches[5])] == \
            [(r.physical_offset, r.queue_offset) for r in dst.apply_batch(batches[5])]
    finally:
        src.shutdown()
        dst.shutdown()


def test_truncate_after_retention_keeps_queue_offsets(tmp_path: Path) -> None:
    """truncate_to down to the commit log's minimum must not reset a queue's offsets to 0.

    Five 1.5 KiB records fill each 8 KiB segment and each 5-unit consume-queue file, so after retention the
    queue's only file starts exactly at the first record still in the commit log. Cutting the log there
    leaves the queue with no units, but its offsets 0..19 were used: the next message must get offset 20,
    as it does on a replica that did not truncate (otherwise replicas diverge and consumers are reset).
    Found by the model test (retention, then truncate).
    """
    import time

    cfg = StoreConfig(root_dir=str(tmp_path), **{**GEOMETRY, "mapped_file_size_consume_queue": 5 * 20})
    st = MessageStore(cfg)
    st.open()
    try:
        msg = lambda: Message(topic="DetA", queue_id=0, body=b"x" * 1400, born_host=("10.0.0.7", 1))  # noqa: E731
        rs = st.put_messages([msg() for _ in range(25)])
        assert [r.physical_offset // 8192 for r in rs] == [i // 5 for i in range(25)], "5 records per segment"
        wait_dispatched(st)
        st.retention.delete_files_manually()
        st.retention.run_once(now_ms=int(time.time() * 1000) + 10**10)
        assert st.commit_log_min_offset == rs[20].physical_offset
        assert (st.min_offset_in_queue("DetA", 0), st.max_offset_in_queue("DetA", 0)) == (20, 25)
        st.truncate_to(rs[20].physical_offset)
        assert (st.min_offset_in_queue("DetA", 0), st.max_offset_in_queue("DetA", 0)) == (20, 20)
        r = st.put_message(msg())
        assert (r.physical_offset, r.queue_offset) == (rs[20].physical_offset, 20)
        st = restart(st, cfg, clean=True)
        wait_dispatched(st)
        assert (st.min_offset_in_queue("DetA", 0), st.max_offset_in_queue("DetA", 0)) == (20, 21)
        assert st.put_message(msg()).queue_offset == 21
    finally:
        st.shutdown()


@pytest.mark.parametrize("clean", [True, False])
def test_restart_right_after_truncate_below_a_queues_files_keeps_its_offsets(tmp_path: Path, clean: bool) -> None:
    """Reopening (after a clean or an unclean shutdown) right after truncate_to emptied a queue whose earlier
    files went to retention keeps its offsets: the next message still gets offset 20, not 0."""
    import time

    geometry = {**GEOMETRY, "mapped_file_size_consume_queue": 5 * 20}
    cfg = StoreConfig(root_dir=str(tmp_path / "a"), **geometry)
    st = MessageStore(cfg)
    st.open()
    try:
        msg = lambda: Message(topic="DetA", queue_id=0, body=b"x" * 1400, born_host=("10.0.0.7", 1))  # noqa: E731
        rs = st.put_messages([msg() for _ in range(25)])
        wait_dispatched(st)
        st.retention.delete_files_manually()
        st.retention.run_once(now_ms=int(time.time() * 1000) + 10**10)
        st.truncate_to(rs[20].physical_offset)
        st = restart(st, cfg, clean=clean)
        wait_dispatched(st)
        assert (st.min_offset_in_queue("DetA", 0), st.max_offset_in_queue("DetA", 0)) == (20, 20)
        assert st.put_message(msg()).queue_offset == 20
    finally:
        st.shutdown()


def test_an_apply_behind_the_confirm_offset_does_not_wake_reput(tmp_path: Path, batches: list[bytes]) -> None:
    """A replica's apply is followed by the confirm offset moving (which wakes reput); the apply itself wakes
    reput only while reput has confirmed records left to dispatch, so each entry costs one wake-up, not two."""
    st = MessageStore(StoreConfig(root_dir=str(tmp_path / "r"), **GEOMETRY))
    st.open()
    wakes: list[int] = []
    try:
        notify = st.reput.notify
        st.reput.notify = lambda: (wakes.append(1), notify())[1]  # type: ignore[method-assign]
        st.confirm_offset = 0
        wait_dispatched(st)
        wakes.clear()
        for b in batches[:5]:  # as StateMachine.apply_batch does: apply, then confirm what it produced
            st.apply_batch(b)
            wait_dispatched(st)  # reput is at the confirm offset before the next entry arrives
            st.confirm_offset = st.commit_log_max_offset
            wait_dispatched(st)
        assert len(wakes) == 5  # the confirm offset's wake-ups only
        assert st.dispatch_behind_bytes() == 0
        st.confirm_offset = None  # single node: every append is dispatchable at once
        wait_dispatched(st)
        wakes.clear()
        st.apply_batch(batches[5])
        assert wakes == [1]
        wait_dispatched(st)
        assert st.dispatch_behind_bytes() == 0
    finally:
        st.shutdown()
