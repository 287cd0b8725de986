"""Recovery when the side files a member keeps next to its commit log reach the disk without it, or it without
them (what a power cut leaves: pages of different files reach the disk in any order). In-process with a real
store and real pysyncobj, a group of one; each state is made by hand on the files of a cleanly stopped member.
The power-loss tier (tests/powerloss) makes the same states with a filesystem that forgets unsynced writes.

The rules under test (docs/design/durability.md): commit-log bytes that no applied entry accounts for are
withheld, never cut unproven; a replayed entry that wrote exactly them adopts them; the applied index is never
trusted beyond what the Raft log still holds; a journal compacted without its snapshot resumes from the store."""

from __future__ import annotations

import json
import os
import struct
import time

import pytest

from raftmq.replication import RaftSettings, RaftWritePath
from raftmq.replication.pysyncobj_patches import journal_span
from raftmq.replication.write_path import MemberInfo
from raftmq.store import Message
from raftmq.store.topic_config import TopicConfig
from tests.replication.test_raft_single import FAST, one_member, open_store, wait_writable
from tests.store.store_helpers import read_commit_log_files, wait_dispatched

FRAME = 24  # AppliedIndex frame: raft index, commit-log start, commit-log end


def start(root, members, **settings):
    st = open_store(root)
    wp = RaftWritePath(st, node_id="n0", members=members, settings=RaftSettings(**{**FAST, **settings}))
    wp.start()
    return st, wp


def stop(st, wp) -> None:
    wp.stop()
    st.shutdown()


def write(wp, n: int, tag: str) -> list:
    out = []
    for i in range(n):
        out += wp.put([Message(topic="T", queue_id=i % 2, body=f"{tag}-{i}".encode())]).result(10)
    return out


def bodies(st) -> list[bytes]:
    wait_dispatched(st)
    got = []
    for q in (0, 1):
        got += [m.body for m in st.get_messages("T", q, 0, max_count=1000).messages]
    return sorted(got)


def cut_applied_index(raft_dir, keep_frames: int) -> None:
    path = os.path.join(raft_dir, "applied.idx")
    with open(path, "r+b") as f:
        f.truncate(keep_frames * FRAME)


def add_voter_to_record(root, member: MemberInfo) -> None:
    """The state of a group that had added ``member`` as a voter: its replicated membership record lists it."""
    path = root / "config" / "membership.json"
    record = json.loads(path.read_text())
    record["voters"].append({"id": member.id, "raft": member.raft_address, "grpc": member.grpc_address})
    path.write_text(json.dumps(record))


def written_member(tmp_path, members, n: int = 40):
    """A member that stored ``n`` acknowledged puts and stopped cleanly: (root, acked results, commit-log end)."""
    root = tmp_path / "s"
    st, wp = start(root, members)
    try:
        wait_writable(wp)
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2))
        acked = write(wp, n, "a")
        end = st.commit_log_max_offset
    finally:
        stop(st, wp)
    return root, acked, end


def test_commit_log_beyond_a_lost_applied_index_is_kept_not_cut(tmp_path):
    """The issue-32 loss: applied.idx (never synced) came back empty while the commit log was on disk, and
    recovery cut the commit log to the end of "entry 0" before anything could replay it. Here the member's peer
    is away, so nothing can replay: the bytes must stay on disk, withheld (not served) until entries prove them."""
    members = one_member(tmp_path)
    root, _acked, end = written_member(tmp_path, members)
    before = read_commit_log_files(root)
    cut_applied_index(root / "raft", 0)
    from tests.support.processes import free_ports

    absent = MemberInfo("n1", *(f"127.0.0.1:{p}" for p in free_ports(2)))
    add_voter_to_record(root, absent)  # the group's membership decides, not cluster.members (issue 39)
    st, wp = start(root, [*members, absent])
    try:
        time.sleep(1.0)  # elections come and go; no majority, so no entry is applied
        assert not wp.is_writable()
        assert st.commit_log_max_offset == end and read_commit_log_files(root) == before
        assert st.confirm_offset == 0 and bodies(st) == []  # withheld: not served
    finally:
        stop(st, wp)
    assert read_commit_log_files(root) == before


def test_commit_log_beyond_a_lost_applied_index_is_adopted_from_the_journal(tmp_path):
    """Replaying the journal then proves those bytes: adopted as they are (nothing rewritten), served, and the
    next queue offsets go on from them."""
    members = one_member(tmp_path)
    root, acked, end = written_member(tmp_path, members)
    before = read_commit_log_files(root)
    cut_applied_index(root / "raft", 0)

    st, wp = start(root, members)
    try:
        wait_writable(wp)
        assert st.commit_log_max_offset == end
        assert wp.machine.tail_bytes_adopted == end and wp.machine.tail_bytes_cut == 0
        assert read_commit_log_files(root) == before  # nothing rewritten
        assert bodies(st) == sorted(f"a-{i}".encode() for i in range(40))
        r = write(wp, 1, "b")[0]
        assert r.physical_offset == end and r.queue_offset == sum(1 for x in acked if x.queue_id == 0)
    finally:
        stop(st, wp)


def test_an_applied_index_ahead_of_the_raft_log_is_not_trusted(tmp_path):
    """The journal lost its last entries (not synced) but the applied index kept them. Trusting it would skip
    the next entries of the log (new ones, at the same indexes) as "already applied": acknowledged writes lost
    without a trace. Their frames are forgotten, their commit-log bytes withheld; the new entries at those
    indexes differ, so the withheld bytes are cut and the new writes are stored and readable."""
    members = one_member(tmp_path)
    root = tmp_path / "s"
    st, wp = start(root, members)
    try:
        wait_writable(wp)
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2))
        write(wp, 10, "kept")
        lost = write(wp, 10, "lost")
    finally:
        stop(st, wp)
    journal = root / "raft" / "raft.journal"
    span = journal_span(str(journal))
    # drop the journal's last 10 records (the "lost" puts, one entry each): cut the header's end back
    data = bytearray(journal.read_bytes())
    pos = 40
    records = []
    while pos < span.records_end:
        (n,) = struct.unpack_from("<I", data, pos)
        records.append(pos)
        pos += n + 8
    struct.pack_into("<I", data, 36, records[-10])
    journal.write_bytes(bytes(data))
    assert journal_span(str(journal)).last[0] == span.last[0] - 10

    st, wp = start(root, members)
    try:
        wait_writable(wp)
        new = write(wp, 3, "new")
        assert new[0].physical_offset == lost[0].physical_offset  # the lost entries' place in the log
        assert wp.machine.tail_bytes_cut > 0
        got = bodies(st)
        assert [b for b in got if b.startswith(b"new")] == [b"new-0", b"new-1", b"new-2"]
        assert not [b for b in got if b.startswith(b"lost")]
        assert len([b for b in got if b.startswith(b"kept")]) == 10
    finally:
        stop(st, wp)


def compacted_without_dump(tmp_path, members) -> object:
    """A stopped member whose journal was compacted (puts until it was) and whose snapshot is gone: the state a
    power cut left when the compaction reached the disk and the renamed dump did not."""
    root = tmp_path / "s"
    st, wp = start(root, members, compaction_min_entries=20, compaction_min_time=0.5)
    try:
        wait_writable(wp)
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2))
        write(wp, 60, "a")
        deadline = time.monotonic() + 30
        while journal_span(str(root / "raft" / "raft.journal")).first[0] <= 1:
            assert time.monotonic() < deadline, "the journal was never compacted"
            write(wp, 5, "more")
    finally:
        stop(st, wp)
    os.remove(root / "raft" / "raft.dump")
    return root


def test_a_journal_compacted_without_its_snapshot_resumes_from_the_store(tmp_path):
    """The issue-32 stuck member: compaction reached the disk, the renamed snapshot did not; pysyncobj then had
    nothing to apply from (applied index 1, journal starting thousands of entries later) while the member said
    it was ready. Its applied index now moves to the store's and applying resumes."""
    members = one_member(tmp_path)
    root = compacted_without_dump(tmp_path, members)
    before = bodies_after_reopen(root)

    st, wp = start(root, members)
    try:
        wait_writable(wp)
        assert wp.not_ready_reason() == ""
        assert bodies(st) == before
        write(wp, 1, "after")
        assert b"after-0" in bodies(st)
    finally:
        stop(st, wp)


def bodies_after_reopen(root) -> list[bytes]:
    st = open_store(root)
    try:
        return bodies(st)
    finally:
        st.shutdown()


def test_a_member_missing_entries_it_cannot_get_says_so_and_is_not_ready(tmp_path):
    """When the store is behind the start of a compacted journal with no snapshot, no local file can bring the
    missing entries: the member says why and is not ready (a group of one has no leader to send a snapshot)."""
    members = one_member(tmp_path)
    root = compacted_without_dump(tmp_path, members)
    cut_applied_index(root / "raft", 1)  # the store "applied" only the first entry

    st, wp = start(root, members)
    try:
        deadline = time.monotonic() + 20
        while "cannot apply" not in wp.not_ready_reason():
            assert time.monotonic() < deadline, f"never said it is stuck: {wp.not_ready_reason()!r}"
            time.sleep(0.05)
        assert "rebuild-member" in wp.not_ready_reason()
        [me] = wp.members_status()
        assert me["health"].startswith("stuck: cannot apply")
    finally:
        stop(st, wp)


@pytest.mark.parametrize("durability", ["async", "sync"])
def test_a_commit_log_flush_syncs_the_journal_and_applied_index_first(tmp_path, monkeypatch, durability):
    """The order recovery relies on: before commit-log bytes are flushed, the applied index that maps them is
    synced, and under async the Raft journal too (nothing else syncs it then)."""
    import raftmq.replication.raft_write_path as rwp

    members = one_member(tmp_path)
    st, wp = start(tmp_path / "s", members, durability=durability)
    synced: list[str] = []
    real_sync = rwp.sync_fd

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_sync(fd)

    try:
        wait_writable(wp)
        wp.create_topic(TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2))
        monkeypatch.setattr(rwp, "sync_fd", spy)
        applied_fsyncs = []
        real_fsync = wp.machine.applied.fsync
        monkeypatch.setattr(wp.machine.applied, "fsync", lambda: (applied_fsyncs.append(1), real_fsync()))
        flushes = []
        real_flush = st.commit_log.flush

        def flush_spy(least=0):
            seen = (len(synced), len(applied_fsyncs))
            before = st.commit_log.flushed_where
            out = real_flush(least)
            if st.commit_log.flushed_where > before:  # this call made new bytes durable
                flushes.append(seen)
            return out

        monkeypatch.setattr(st.commit_log, "flush", flush_spy)
        for i in range(30):  # 30 KiB: enough pages for the flush service's least-pages rule
            wp.put([Message(topic="T", queue_id=0, body=bytes([i]) * 1024)]).result(10)
        deadline = time.monotonic() + 10
        while not flushes:
            assert time.monotonic() < deadline, "the flush service never flushed"
            time.sleep(0.05)
        assert flushes[0][1] >= 1  # the applied index was synced before the flush
        if durability == "async":
            assert any(p.endswith("raft.journal") for p in synced) and flushes[0][0] >= 1
    finally:
        stop(st, wp)
