"""3-member clusters of real node processes over loopback: replication, failover, catch-up, durability.

Invariants checked everywhere: every acknowledged message is present exactly once, at the queue offset and
physical offset it was acknowledged with, in the same queue order on every replica; replicas' commit-log,
consume-queue and index files are byte-identical once they have applied the same log.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections import Counter

import grpc
import pytest
from pysyncobj import journal as pysyncobj_journal

from raftmq.replication import snapshot
from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import (
    LEADER_KEY,
    REDIRECT,
    Producers,
    admin,
    create_topic,
    index_keys,
    messaging,
    read_topic,
    store_digests,
    wait_applied_equal,
    wait_leader,
)
from tests.support.metrics import metric_sum

TOPIC = "ReplT"
QUEUES = 4


def check_acked(log, replicas: dict[str, dict[int, list]]) -> None:
    """Every acked key present exactly once where it was acked; all replicas hold the same queues."""
    views = list(replicas.items())
    first_id, first = views[0]
    for rid, view in views[1:]:
        assert view == first, f"replica {rid} differs from {first_id}: {_view_difference(first, view)}"
    where = {}
    for q, entries in first.items():
        offsets = [e[0] for e in entries]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True, \
            f"queue {q} has gaps or duplicates in queue offsets"
        counts = Counter(e[1] for e in entries)
        dup = [k for k, c in counts.items() if c > 1 and k in log.acked]
        assert not dup, f"acked keys stored twice: {dup[:5]}"
        for qo, key, phy in entries:
            where[key] = (q, qo, phy)
    missing = [k for k in log.acked if k not in where]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    wrong = [k for k, v in log.acked.items() if where[k] != v]
    assert not wrong, f"acked at one place, stored at another: {[(k, log.acked[k], where[k]) for k in wrong[:3]]}"


def _view_difference(a: dict[int, list], b: dict[int, list]) -> str:
    """Where two replicas' queues first differ: queue, lengths, and the first differing entries."""
    out = []
    for q in sorted(set(a) | set(b)):
        qa, qb = a.get(q, []), b.get(q, [])
        if qa != qb:
            i = next((k for k, (x, y) in enumerate(zip(qa, qb, strict=False)) if x != y),
                     min(len(qa), len(qb)))
            out.append(f"queue {q}: {len(qa)} vs {len(qb)} entries, first difference at {i}: "
                       f"{qa[i] if i < len(qa) else None} vs {qb[i] if i < len(qb) else None}")
    return "; ".join(out)


def replica_views(nodes) -> dict[str, dict[int, list]]:
    return {n.spec.id: read_topic(n, TOPIC, QUEUES) for n in nodes}


def assert_byte_identical(nodes, crashed: bool = False) -> None:
    """Commit logs and consume queues byte-identical; index files too, unless a member crashed: the store's
    recovery after kill -9 may index the last records a second time (a duplicate entry, found by the same key
    query), so after a crash the index must hold the same (key, offset) entries, not the same bytes."""
    if crashed:
        keys = {n.spec.id: index_keys(n.spec.data_dir) for n in nodes}
        first = next(iter(keys.values()))
        assert first and all(k == first for k in keys.values()), "index entries differ between members"
    digests = {n.spec.id: store_digests(n.spec.data_dir, index=not crashed) for n in nodes}
    ids = list(digests)
    assert digests[ids[0]], "no store files found"
    for other in ids[1:]:
        a, b = digests[ids[0]], digests[other]
        diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        assert not diff, f"{ids[0]} and {other} differ in {diff[:5]}"


def test_writes_replicate_byte_identical_and_followers_redirect(cluster_factory):
    c = cluster_factory(host_names=True)
    create_topic(c.nodes, TOPIC, QUEUES)
    leader = wait_leader(c.nodes)
    follower = next(n for n in c.nodes if n is not leader)

    # a follower refuses writes and names the leader
    with pytest.raises(grpc.RpcError) as e:
        messaging(follower).SendMessage(pb.SendMessageRequest(message=pb.Message(topic=TOPIC, body=b"x")), timeout=10,
                                        metadata=REDIRECT)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert dict(e.value.trailing_metadata())[LEADER_KEY] == leader.grpc_address
    # a topic a follower does not know may just not have reached it yet: it sends the caller to the leader (even
    # for a read), which alone answers NOT_FOUND
    req = pb.PullMessageRequest(topic="NotYetHere", queue_id=0, offset=0)
    with pytest.raises(grpc.RpcError) as e:
        messaging(follower).PullMessage(req, timeout=10, metadata=REDIRECT)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION, e.value.details()
    assert dict(e.value.trailing_metadata())[LEADER_KEY] == leader.grpc_address
    with pytest.raises(grpc.RpcError) as e:
        messaging(leader).PullMessage(req, timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND

    p = Producers(c.nodes, TOPIC, n=6, queues=QUEUES).start()
    p.wait_acked(1500)
    log = p.stop()
    assert not log.unknown, log.errors[:5]

    # consumer offsets are replicated: commit on the leader, read on every member
    admin_leader = messaging(leader)
    admin_leader.CommitOffset(pb.CommitOffsetRequest(group="G1", topic=TOPIC, offsets={0: 7, 3: 11}), timeout=15)

    wait_applied_equal(c.nodes)
    for n in c.nodes:
        got = messaging(n).FetchOffset(pb.FetchOffsetRequest(group="G1", topic=TOPIC), timeout=10).offsets
        assert dict(got) == {0: 7, 3: 11}, n.spec.id
    check_acked(log, replica_views(c.nodes))
    assert_byte_identical(c.nodes)

    st = admin(follower).ClusterStatus(pb.ClusterStatusRequest(), timeout=10)
    assert st.leader_id == leader.spec.id
    assert {m.id for m in st.members} == {n.spec.id for n in c.nodes}
    assert all(m.healthy for m in st.members), st


def test_sigkill_leader_under_load_loses_no_acknowledged_write(cluster_factory):
    c = cluster_factory()
    create_topic(c.nodes, TOPIC, QUEUES)
    old = wait_leader(c.nodes)
    p = Producers(c.nodes, TOPIC, n=6, queues=QUEUES).start()
    p.wait_acked(400)
    # a consumer group's offsets acknowledged by the old leader survive the failover (never rewound)
    messaging(old).CommitOffset(pb.CommitOffsetRequest(group="G1", topic=TOPIC, offsets={1: 5, 2: 9}), timeout=15)
    old.kill()
    new = wait_leader(c.nodes, timeout=30, exclude={old.spec.id})
    assert new is not old
    got = messaging(new).FetchOffset(pb.FetchOffsetRequest(group="G1", topic=TOPIC), timeout=10).offsets
    assert dict(got) == {1: 5, 2: 9}
    before = len(p.log.acked)
    p.wait_acked(before + 400)
    log = p.stop()
    survivors = [n for n in c.nodes if n is not old]
    wait_applied_equal(survivors)
    check_acked(log, replica_views(survivors))

    # the killed member comes back, catches up from its own files and the leader, and converges byte-identically
    old.start(env=c.env).wait_ready(90)
    wait_applied_equal(c.nodes)
    check_acked(log, replica_views(c.nodes))
    assert_byte_identical(c.nodes, crashed=True)


def test_sigstop_leader_acknowledges_nothing_that_is_not_in_the_new_log(cluster_factory):
    c = cluster_factory()
    create_topic(c.nodes, TOPIC, QUEUES)
    old = wait_leader(c.nodes)
    p = Producers(c.nodes, TOPIC, n=6, queues=QUEUES).start()
    p.wait_acked(300)
    old.freeze()
    try:
        wait_leader(c.nodes, timeout=30, exclude={old.spec.id})
        before = len(p.log.acked)
        p.wait_acked(before + 300)
    finally:
        old.thaw()
    time.sleep(1.0)  # let the old leader notice, fail its pending puts and rejoin
    p.wait_acked(len(p.log.acked) + 100)
    log = p.stop()
    wait_applied_equal(c.nodes)
    check_acked(log, replica_views(c.nodes))
    assert_byte_identical(c.nodes)


def test_wiped_follower_rebuilds_from_the_leader_after_compaction(cluster_factory):
    c = cluster_factory()
    for n in c.nodes:  # a new group proves itself new and joins Raft without an election-timeout wait
        assert "joining Raft at once" in n.spec.log_path.read_text(), n.log_tail()
    create_topic(c.nodes, TOPIC, QUEUES)
    leader = wait_leader(c.nodes)
    victim = next(n for n in c.nodes if n is not leader)
    p = Producers(c.nodes, TOPIC, n=6, queues=QUEUES).start()
    p.wait_acked(800)  # > compaction_min_entries batches: the journal has been compacted by now
    victim.kill()
    shutil.rmtree(victim.spec.data_dir)
    p.wait_acked(len(p.log.acked) + 300)
    logged_before = victim.spec.log_path.stat().st_size
    victim.start(env=c.env).wait_ready(120)
    with open(victim.spec.log_path, "rb") as f:  # a wiped member may have voted before: it waits, as ever
        f.seek(logged_before)
        restart_log = f.read().decode(errors="replace")
    assert "joining Raft after one election timeout" in restart_log and "joined Raft before it heard us" in \
        restart_log, restart_log[-3000:]
    p.wait_acked(len(p.log.acked) + 200)
    log = p.stop()
    wait_applied_equal(c.nodes)
    check_acked(log, replica_views(c.nodes))
    assert_byte_identical(c.nodes)
    journal = victim.spec.data_dir / "raft" / "raft.journal"
    assert journal.exists()


def lose_unsynced_commit_log(data_dir) -> int:
    """Do to a stopped member's commit log what a power cut may do to bytes ``sync`` acknowledgements do not sync:
    every byte past the last Raft snapshot (which is written only after the commit log was flushed up to it)
    reads back as zeros. Returns how many non-zero bytes were lost."""
    dump = data_dir / "raft" / "raft.dump"
    floor = snapshot.read_file(str(dump))[0].commit_log_end if dump.exists() else 0
    zeroed = 0
    for segment in sorted((data_dir / "commitlog").iterdir()):
        start, size = int(segment.name), segment.stat().st_size
        cut = max(0, floor - start)
        if cut < size:
            with open(segment, "r+b") as f:
                f.seek(cut)
                lost = f.read()
                f.seek(cut)
                f.write(bytes(len(lost)))
                os.fsync(f.fileno())
            zeroed += len(lost) - lost.count(0)
    return zeroed


@pytest.mark.parametrize("power_cut", [False, True], ids=["kill", "kill-and-power-cut"])
def test_sync_mode_kill_all_members_mid_load_keeps_every_acknowledged_write(cluster_factory, power_cut):
    """``sync`` acknowledges once a majority holds the entry in its Raft journal on disk; the commit logs (derived
    from the journal) reach the disk later, by the flush service and before every snapshot. So every member killed
    mid-load, and with ``power_cut`` each also losing every commit-log byte past its last snapshot, must come back
    with every acknowledged write, at the offsets it was acknowledged with, identical on every member."""
    c = cluster_factory(durability="sync")
    create_topic(c.nodes, TOPIC, QUEUES)
    p = Producers(c.nodes, TOPIC, n=6, queues=QUEUES).start()
    p.wait_acked(400)
    for n in c.nodes:
        n.kill()
    log = p.stop()
    if power_cut:
        for n in c.nodes:
            assert lose_unsynced_commit_log(n.spec.data_dir) > 0
    c.restart()
    wait_leader(c.nodes)
    wait_applied_equal(c.nodes)
    check_acked(log, replica_views(c.nodes))
    assert_byte_identical(c.nodes, crashed=True)


def restart_while_writing_and_check(c, p, victim) -> None:
    """Restart a killed ``victim`` while ``p`` keeps writing; then every acknowledged write is on every member,
    where it was acknowledged, and the replicas are byte-identical."""
    victim.start(env=c.env).wait_ready(120)
    p.wait_acked(len(p.log.acked) + 100)
    log = p.stop()
    wait_applied_equal(c.nodes)
    check_acked(log, replica_views(c.nodes))
    assert_byte_identical(c.nodes, crashed=True)


def tear_journal_tail(data_dir) -> int:
    """What a power cut may do to a stopped member's Raft journal: the header (end of records) reached the disk,
    the last record's page did not and reads back as zeros. Returns the index of the entry torn away."""
    path = data_dir / "raft" / "raft.journal"
    data = bytearray(path.read_bytes())
    end = struct.unpack_from("<I", data, pysyncobj_journal.LAST_RECORD_OFFSET_OFFSET)[0]
    size = struct.unpack_from("<I", data, end - 4)[0]
    start = end - size - 8
    index = struct.unpack_from("<Q", data, start + 4)[0]
    data[start:end] = bytes(end - start)
    with open(path, "r+b") as f:
        f.write(data)
        os.fsync(f.fileno())
    return index


@pytest.mark.parametrize(("durability", "role"), [("sync", "follower"), ("async", "leader")])
def test_a_member_whose_journal_lost_its_last_record_starts_and_catches_up(cluster_factory, durability, role):
    """A member killed mid-load comes back with a torn journal tail (header written, last record not): it used to
    fail to start (pysyncobj read the zeros as a record); now it drops the tail, says so in its log, fetches the
    entries from the leader and ends byte-identical with every acknowledged write. A killed leader's tail may
    hold entries it applied (and acknowledged, in ``async``): the majority that committed them has them."""
    c = cluster_factory(durability=durability)
    create_topic(c.nodes, TOPIC, QUEUES)
    leader = wait_leader(c.nodes)
    victim = leader if role == "leader" else next(n for n in c.nodes if n is not leader)
    p = Producers(c.nodes, TOPIC, n=4, queues=QUEUES).start()
    p.wait_acked(300)
    victim.kill()
    torn_index = tear_journal_tail(victim.spec.data_dir)
    p.wait_acked(len(p.log.acked) + 100)
    restart_while_writing_and_check(c, p, victim)
    assert f"after entry {torn_index - 1} " in victim.spec.log_path.read_text()
    torn = {n.spec.id: metric_sum(n, "raftmq_raft_journal_torn_tail_bytes_total") for n in c.nodes}
    assert torn[victim.spec.id] > 0 and all(v == 0 for k, v in torn.items() if k != victim.spec.id), torn


def test_follower_behind_the_compacted_log_installs_a_snapshot_and_fetches_the_gap(cluster_factory):
    c = cluster_factory(tuning={"compaction_min_entries": 100, "compaction_min_time": 4.0})
    create_topic(c.nodes, TOPIC, QUEUES)
    leader = wait_leader(c.nodes)
    victim = next(n for n in c.nodes if n is not leader)
    p = Producers(c.nodes, TOPIC, n=4, queues=QUEUES).start()
    p.wait_acked(200)
    victim.kill()  # keeps its files: journal, dump, commit log
    p.wait_acked(len(p.log.acked) + 600)
    time.sleep(9)  # two compaction windows of every member: the leader's log now starts after the victim's end
    p.wait_acked(len(p.log.acked) + 100)
    restart_while_writing_and_check(c, p, victim)
    assert "installed snapshot" in victim.spec.log_path.read_text()


def test_leader_cut_off_from_its_majority_acknowledges_nothing_and_steps_down(cluster_factory):
    c = cluster_factory()
    create_topic(c.nodes, TOPIC, QUEUES)
    leader = wait_leader(c.nodes)
    followers = [n for n in c.nodes if n is not leader]
    for f in followers:
        f.freeze()
    try:
        outcomes = []
        for i in range(5):
            try:
                messaging(leader).SendMessage(pb.SendMessageRequest(message=pb.Message(
                    topic=TOPIC, queue_id=0, body=b"cut-off %d" % i, uniq_key=f"CUT-{i}")), timeout=15)
                outcomes.append("ACKED")
            except grpc.RpcError as e:
                outcomes.append(e.code().name)
        assert "ACKED" not in outcomes, outcomes  # no majority: nothing may be acknowledged
        st = admin(leader).ClusterStatus(pb.ClusterStatusRequest(), timeout=10)
        me = next(m for m in st.members if m.id == leader.spec.id)
        assert me.role != "leader", "a leader without a majority must step down"
    finally:
        for f in followers:
            f.thaw()
    wait_leader(c.nodes, timeout=60)
    p = Producers(c.nodes, TOPIC, n=2, queues=QUEUES).start()
    p.wait_acked(50)
    log = p.stop()
    wait_applied_equal(c.nodes)
    check_acked(log, replica_views(c.nodes))
    assert_byte_identical(c.nodes)
