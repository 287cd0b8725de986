"""Membership without a cluster (issue 39): the record and its rules, the journal replay at start, the state
machine's commands, the snapshot's voters (docs/design/membership.md)."""

from __future__ import annotations

import json
import pickle

import pytest
from pysyncobj.journal import FileJournal
from pysyncobj.node import TCPNode

from raftmq.replication import membership, pysyncobj_patches
from raftmq.replication.applied_index import AppliedIndex
from raftmq.replication.membership import Membership, MembershipFile, VoterChange
from raftmq.replication.state_machine import StateMachine
from raftmq.replication.write_path import MemberInfo

A, B, C, D = (MemberInfo(f"n{i}", f"h{i}:8091", f"h{i}:8081") for i in range(4))
SEED = Membership((A, B, C))


def test_a_change_takes_effect_in_log_order_after_the_records_index():
    record = Membership((A, B, C), index=10)
    changes = [(9, VoterChange("rem", A)), (11, VoterChange("add", D)), (12, VoterChange("rem", B))]
    config = membership.replay(record, changes)
    assert config.voter_ids == ["n0", "n2", "n3"]  # the entry at 9 is in the record already
    assert config.index == 12


def test_a_promoted_learner_leaves_the_learners_and_a_replacement_is_remembered_until_the_old_voter_goes():
    record = SEED.with_learner(D, 5, replaces="n1")
    assert record.role("n3") == membership.LEARNER and record.replaces == {"n3": "n1"}
    promoted = record.with_change(VoterChange("add", D), 6)
    assert promoted.role("n3") == membership.VOTER and promoted.learners == ()
    assert promoted.replaces == {"n3": "n1"}
    done = promoted.with_change(VoterChange("rem", B), 7)
    assert done.voter_ids == ["n0", "n2", "n3"] and done.replaces == {}


@pytest.mark.parametrize(("new", "why"), [
    (MemberInfo("n1", "x:1", "x:2"), "n1 is already a voter"),
    (MemberInfo("n9", "h2:8091", "x:2"), "Raft address h2:8091 is already used by voter n2"),
    (MemberInfo("n9", "x:1", "h0:8081"), "gRPC address h0:8081 is already used by voter n0"),
])
def test_a_new_member_must_not_share_an_id_or_an_address(new, why):
    assert SEED.conflict(new) == why
    assert SEED.conflict(D) == ""


def test_the_health_check_names_who_is_down_and_counts_a_majority_of_the_voters_after_the_change():
    assert membership.health_refusal(["n0", "n1", "n2", "n3"], ["n0", "n1", "n3"], "adding n3") == ""
    refusal = membership.health_refusal(["n0", "n1"], ["n0"], "removing n2")
    assert "only 1 (n0) are healthy" in refusal and "majority (2)" in refusal and "down or behind: n1" in refusal


def test_voter_changes_round_trip_and_a_stock_pysyncobj_entry_is_read_by_its_address():
    change = VoterChange("add", D)
    command = bytes([membership.MEMBERSHIP_COMMAND]) + membership.encode_change(change)
    assert membership.decode_change(command) == change
    stock = bytes([membership.MEMBERSHIP_COMMAND]) + pickle.dumps(["rem", "h5:1", TCPNode("h5:1")])
    assert membership.decode_change(stock) == VoterChange("rem", MemberInfo("h5:1", "h5:1", ""))
    assert membership.decode_change(b"\x00regular") is None


def test_the_start_up_replay_reads_only_membership_entries_of_whole_journal_records(tmp_path):
    path = str(tmp_path / "raft.journal")
    journal = FileJournal(path)
    journal.add(b"\x01", 1, 1)  # no-op
    journal.add(bytes([2]) + membership.encode_change(VoterChange("add", D)), 2, 1)
    journal.add(b"\x00" + b"x" * 5000, 3, 1)  # a batch
    journal.add(bytes([2]) + membership.encode_change(VoterChange("rem", A)), 4, 2)
    journal._destroy()
    found = pysyncobj_patches.journal_commands(path, membership.MEMBERSHIP_COMMAND)
    assert [(i, membership.decode_change(c)) for i, c in found] == [
        (2, VoterChange("add", D)), (4, VoterChange("rem", A))]
    end = pysyncobj_patches.journal_span(path).header_end
    with open(path, "r+b") as f:  # a torn last record: its tail never reached the disk
        f.seek(end - 4)
        f.write(b"\0\0\0\0")
    assert [i for i, _ in pysyncobj_patches.journal_commands(path, membership.MEMBERSHIP_COMMAND)] == [2]
    assert pysyncobj_patches.journal_commands(str(tmp_path / "none"), membership.MEMBERSHIP_COMMAND) == []


def test_the_record_file_survives_a_reopen(tmp_path):
    f = MembershipFile(str(tmp_path))
    assert f.record is None
    f.set(SEED.with_learner(D, 9))
    f.persist()
    again = MembershipFile(str(tmp_path))
    assert again.record == SEED.with_learner(D, 9)
    again.restore(None)  # a peer from before records: ours stays
    assert again.record == SEED.with_learner(D, 9)


@pytest.fixture
def machine(store, tmp_path):
    applied = AppliedIndex(str(tmp_path / "applied.idx"))
    m = StateMachine(store, applied)
    m.seed_membership = SEED
    m.entry_term = lambda index: 1
    try:
        yield m
    finally:
        applied.close()


def _meta(m: StateMachine, index: int, kind: str, arg: dict):
    return m.apply_meta(index, kind, json.dumps(arg).encode())[2]


def test_the_state_machine_records_learners_and_committed_voter_changes(machine):
    voters = [{"id": x.id, "raft": x.raft_address, "grpc": x.grpc_address} for x in (A, B, C)]
    assert _meta(machine, 1, "membership_init", {"voters": voters}) is None
    assert machine.membership == Membership((A, B, C), index=1)
    assert _meta(machine, 2, "membership_init", {"voters": voters[:1]}) is None  # recorded once only
    assert machine.membership.index == 1
    new = {"id": "n3", "raft": D.raft_address, "grpc": D.grpc_address}
    assert _meta(machine, 3, "learner_add", new) is None
    # the same refusal on every member: a second member under a taken address
    assert _meta(machine, 4, "learner_add", {**new, "id": "n9"}) == "Raft address h3:8091 is already used by " \
                                                                     "learner n3"
    assert _meta(machine, 5, "learner_add", {"id": "n8", "raft": "x:1", "grpc": "x:2", "replaces": "n7"}) == \
        "n7 (the member to replace) is not a voter"
    assert machine.apply_membership(6, VoterChange("add", D))[0] == 6
    assert machine.membership.voter_ids == ["n0", "n1", "n2", "n3"] and machine.membership.index == 6
    assert machine.apply_membership(6, VoterChange("rem", D)) is None  # journal replay of an applied entry
    assert machine.membership.voter_ids == ["n0", "n1", "n2", "n3"]
    assert _meta(machine, 7, "learner_remove", {"id": "n3"}) == "n3 is not a learner"
    reopened = MembershipFile(machine.applier.membership.path.rsplit("/", 1)[0])
    assert reopened.record == machine.membership  # durable when applied


def test_a_loaded_snapshot_runs_with_the_voters_the_write_path_chooses(machine, tmp_path):
    from raftmq.replication import snapshot

    record = Membership((A, B), index=3)
    meta = snapshot.SnapshotMeta(0, 0, 5, {**machine.applier.export_metadata(), "membership": record.to_dict()})
    stale_cluster = {TCPNode(a) for a in ("h0:8091", "h1:8091", "h9:8091")}  # as pysyncobj pickled it
    path = str(tmp_path / "dump")
    snapshot.write_file(path, meta, ((b"", 5, 1), (b"", 4, 1), stale_cluster))
    chosen = []
    machine.snapshot_voters = lambda rec, from_leader: chosen.append((rec, from_leader)) or ["h0:8091", "h1:8091"]
    internal = machine.deserialize(path)
    assert chosen == [(record, False)]
    assert internal[2] == ["h0:8091", "h1:8091"]  # not the dump's cluster, which held an uncommitted change


# ---------------------------------------------------------------- a learner's copy and the leader's snapshot
def _batches(store, n: int, seed: str = "m") -> list[bytes]:
    from raftmq.store.message import Message

    return [store.encode_batch([Message(topic="T", queue_id=0, body=f"{seed}{i}-{j}".encode() * 40,
                                        born_timestamp=1, born_host=("10.0.0.1", 5)) for j in range(5)],
                               store_timestamp=1000 + i) for i in range(n)]


def _digests(store, start: int, stop: int) -> list[bytes]:
    from raftmq.replication.commit_log_digest import digest_commit_log

    return [c.sha256 for c in digest_commit_log(store, start, stop, 4096, stop - start, 1 << 20)[0]]


@pytest.fixture
def leader(tmp_path):
    """The leader's state machine on its own store: entries 1..10 applied, its snapshot taken after entry 6."""
    from raftmq.replication import snapshot
    from raftmq.replication.state_machine import frame_batch
    from tests.replication.conftest import open_store

    st = open_store(tmp_path / "leader")
    applied = AppliedIndex(str(tmp_path / "leader-applied.idx"))
    m = StateMachine(st, applied)
    batches = _batches(st, 10)
    for i, b in enumerate(batches[:6], 1):
        m.apply_batch(i, frame_batch(b))
    m.dump = str(tmp_path / "leader.dump")
    m.serialize(m.dump, ((b"", 6, 1), (b"", 5, 1), set()))
    m.snapshot_end = st.commit_log_max_offset
    for i, b in enumerate(batches[6:], 7):
        m.apply_batch(i, frame_batch(b))
    m.batches = batches
    assert snapshot.read_file(m.dump)[0].commit_log_end == m.snapshot_end
    try:
        yield m
    finally:
        applied.close()
        st.shutdown()


def _copied(machine: StateMachine, batches: list[bytes]) -> int:
    """The learner copied the group's commit log up to entry 10 before joining (``rebuild_from_peer``'s state)."""
    for b in batches:
        machine.store.apply_batch(b)
    end = machine.store.commit_log_max_offset
    machine.applied.reset([(10, end, end)])
    machine.store.confirm_offset = end
    return end


def test_a_learner_keeps_the_copy_an_older_snapshot_from_the_leader_covers(machine, leader):
    from raftmq.replication.state_machine import frame_batch

    end = _copied(machine, leader.batches)
    assert end == leader.store.commit_log_max_offset
    fetched, proved = [], []
    machine.gap_fetcher = lambda start, index: fetched.append((start, index)) or (end, 10)
    machine.gap_prover = lambda a, b: proved.append((a, b)) or _digests(machine.store, a, b) == _digests(
        leader.store, a, b)
    machine.from_leader = True  # no Raft log here: the leader sends the snapshot it compacted to (entry 6)
    machine.deserialize(leader.dump)
    assert fetched == []  # the copy is not fetched again
    assert proved == [(0, leader.snapshot_end)] and machine.snapshot_bytes_proven == leader.snapshot_end
    assert machine.applied.last == (6, leader.snapshot_end)
    assert machine.store.commit_log_max_offset == end  # entries 7..10's bytes withheld, not cut
    for i, b in enumerate(leader.batches[6:], 7):  # the leader's entries after its snapshot adopt them
        machine.apply_batch(i, frame_batch(b))
    assert machine.tail_bytes_adopted == end - leader.snapshot_end and machine.tail_bytes_cut == 0
    assert machine.applied.last == (10, end) and machine.store.commit_log_max_offset == end
    for st in (machine.store, leader.store):
        assert st.reput.wait_dispatched(end, timeout=30)
    assert machine.store.max_offset_in_queue("T", 0) == leader.store.max_offset_in_queue("T", 0) == 50


def test_a_copy_no_peer_proves_is_fetched_again_over_the_withheld_bytes(machine, leader):
    _copied(machine, _batches(machine.store, 10, seed="other"))  # not the group's bytes
    fetched = []

    def fetch(start, index):
        fetched.append((start, index))
        raise RuntimeError("no peer in this test")

    machine.gap_fetcher = fetch
    machine.gap_prover = lambda a, b: _digests(machine.store, a, b) == _digests(leader.store, a, b)
    machine.from_leader = True
    with pytest.raises(RuntimeError):
        machine.deserialize(leader.dump)
    assert fetched == [(0, 6)] and machine.snapshot_bytes_proven == 0


def test_a_copy_made_after_retention_is_proven_from_its_first_byte_not_from_zero(machine, tmp_path):
    """Retention deleted the group's oldest segment before this member copied the log, so its commit log starts
    at a segment boundary; the leader's snapshot is older than the copy and rewinds every applied frame. The
    range to prove (or fetch) starts at the first byte it holds: from 0 no peer can answer any more, and the
    install failed on every try (a rebuilt member never got ready)."""
    from raftmq.replication.state_machine import frame_batch
    from tests.replication.conftest import open_store

    st = open_store(tmp_path / "leader")
    applied = AppliedIndex(str(tmp_path / "leader-applied.idx"))
    lead = StateMachine(st, applied)
    try:
        dump = str(tmp_path / "leader.dump")
        for i, b in enumerate(_batches(st, 80), 1):
            lead.apply_batch(i, frame_batch(b))
            if i == 60:
                lead.serialize(dump, ((b"", 60, 1), (b"", 59, 1), set()))
                snapshot_end = st.commit_log_max_offset
        end = st.commit_log_max_offset
        first = st.config.mapped_file_size_commit_log  # the oldest segment is gone on every peer
        assert first < snapshot_end < end
        while machine.store.commit_log_max_offset < end:  # the copy, as FetchCommitLog sends it
            at = max(first, machine.store.commit_log_max_offset)
            machine.store.append_commit_log_raw(at, st.read_commit_log(at, 1 << 20))
        machine.applied.reset([(80, end, end)])
        machine.store.confirm_offset = end
        proved = []
        machine.gap_fetcher = lambda start, index: pytest.fail(f"the copy was fetched again from {start}")
        machine.gap_prover = lambda a, b: proved.append((a, b)) or _digests(machine.store, a, b) == _digests(st, a, b)
        machine.from_leader = True
        machine.deserialize(dump)
        assert proved == [(first, snapshot_end)]
        assert machine.applied.last == (60, snapshot_end) and machine.store.commit_log_max_offset == end
    finally:
        applied.close()
        st.shutdown()
