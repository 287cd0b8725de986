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
