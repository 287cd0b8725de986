"""The Raft side of membership changes with in-process ReplicatedLog members (issue 39; docs/design/membership.md):
one uncommitted voter change at a time (pysyncobj's guard is never armed), a committed change recorded, not
performed again, learners that receive the log but never count, and the Raft port's ``add`` utility refused."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from pysyncobj import FAIL_REASON, SyncObjConf
from pysyncobj.syncobj_admin import executeAdminCommand

from raftmq.replication import membership
from raftmq.replication.raft_log import ReplicatedLog
from raftmq.replication.write_path import MemberInfo
from tests.replication.in_process_members import Outcomes, RecordingMachine
from tests.support.processes import free_ports
from tests.support.waiting import wait_for


class MembershipMachine(RecordingMachine):
    """Also records the committed voter changes (what StateMachine.apply_membership gets)."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[tuple[int, membership.VoterChange]] = []

    def apply_membership(self, index: int, change: membership.VoterChange):
        self.changes.append((index, change))
        return index, None, None


def _conf() -> SyncObjConf:
    return SyncObjConf(autoTick=True, raftMinTimeout=2.0, raftMaxTimeout=4.0, connectionTimeout=5.0,
                       appendEntriesPeriod=0.05, appendEntriesUseBatch=False, dynamicMembershipChange=True,
                       leaderFallbackTimeout=1.5, logCompactionMinEntries=10**9, logCompactionMinTime=10**9,
                       logCompactionSplit=False)


@contextlib.contextmanager
def group(voters: int = 3, learners: int = 0) -> Iterator[tuple[list[ReplicatedLog], list[ReplicatedLog]]]:
    addresses = [f"127.0.0.1:{p}" for p in free_ports(voters + learners)]
    voter_addresses = addresses[:voters]
    made: list[ReplicatedLog] = []
    try:
        for a in voter_addresses:
            made.append(ReplicatedLog(a, [o for o in voter_addresses if o != a], _conf(), MembershipMachine()))
        for a in addresses[voters:]:  # learners: pysyncobj read-only nodes
            made.append(ReplicatedLog(None, voter_addresses, _conf(), MembershipMachine(), learner_address=a))
        yield made[:voters], made[voters:]
    finally:
        for m in made:
            m.destroy()


def member(address: str) -> MemberInfo:
    return MemberInfo("x" + address.rsplit(":", 1)[1], address, "127.0.0.1:1")


def ready_leader(voters: list[ReplicatedLog]) -> ReplicatedLog:
    """The leader once it has applied the no-op entry of its term: pysyncobj refuses a membership change with
    REQUEST_DENIED until then (raftmq's caller retries it: replication/member_changes.py), and a loaded box shows
    that gap between winning the election and applying the no-op."""
    return wait_for(lambda: next((m for m in voters if m.is_leader()
                                  and m.entry_term(m.raftLastApplied) == m.raftCurrentTerm), None),
                    what="a leader that applied its term's no-op", timeout=60)


def propose(leader: ReplicatedLog, op: str, address: str) -> Outcomes:
    outcome = Outcomes(1)
    leader.propose_voter_change(membership.VoterChange(op, member(address)), outcome)
    return outcome


def test_a_second_voter_change_is_refused_while_the_first_is_not_committed():
    """pysyncobj checks ``__changeClusterIDx`` before appending a change but never sets it: without raftmq's check
    the second change below is appended too, and two uncommitted changes make configurations two voters apart,
    whose majorities need not overlap."""
    with group(3) as (voters, _):
        leader = ready_leader(voters)
        follower = next(m for m in voters if m is not leader)
        gone = next(m for m in voters if m is not leader and m is not follower)
        gone.destroy()  # with 4 voters, leader + follower are no majority: the addition below cannot commit
        wait_for(lambda: not gone.tick_thread_alive(), what="the third voter stopped", timeout=30)
        first = propose(leader, "add", "127.0.0.1:1")
        wait_for(lambda: "127.0.0.1:1" in leader.voter_addresses, what="the addition appended", timeout=30)
        second = propose(leader, "rem", gone.own_address)
        assert second.wait(30)
        assert second.errors == [FAIL_REASON.REQUEST_DENIED]
        assert gone.own_address in leader.voter_addresses  # the removal was never appended
        assert not first.errors  # still waiting for a majority of the new configuration


def test_a_committed_change_is_recorded_and_not_performed_again():
    """Applying ``add X`` after ``rem X`` was appended would put X back (pysyncobj performs a change again when
    it applies it); raftmq hands the committed change to the state machine instead."""
    with group(3) as (voters, _):
        leader = ready_leader(voters)
        x = "127.0.0.1:2"
        added = propose(leader, "add", x)
        assert added.wait(30) and added.errors == [FAIL_REASON.SUCCESS]
        removed = propose(leader, "rem", x)
        assert removed.wait(30) and removed.errors == [FAIL_REASON.SUCCESS]
        for m in voters:
            wait_for(lambda m=m: len(m._machine.changes) == 2, what="both changes applied", timeout=30)
            assert [c.op for _, c in m._machine.changes] == ["add", "rem"]
            assert x not in m.voter_addresses
        follower = next(m for m in voters if m is not leader)
        again = bytes([membership.MEMBERSHIP_COMMAND]) + membership.encode_change(
            membership.VoterChange("add", member(x)))
        done = threading.Event()

        def apply_on_tick() -> None:  # what pysyncobj's apply of that entry would run, on its thread
            if not done.is_set():
                follower._SyncObj__doApplyCommand(again)
                done.set()

        follower.addOnTickCallback(apply_on_tick)
        assert done.wait(10)
        assert x not in follower.voter_addresses


def test_a_learner_follows_the_log_never_counts_and_sees_its_promotion():
    with group(3, learners=1) as (voters, (learner,)):
        leader = ready_leader(voters)
        outcomes = Outcomes(5)
        for i in range(5):
            leader.apply_batch(f"command {i}".encode(), callback=outcomes)
        assert outcomes.wait(30) and outcomes.errors == [FAIL_REASON.SUCCESS] * 5
        wait_for(lambda: len(learner._machine.applied) == 5, what="the learner applied the log", timeout=30)
        assert learner.own_address not in leader.voter_addresses and learner.is_learner
        promoted = propose(leader, "add", learner.own_address)
        assert promoted.wait(30) and promoted.errors == [FAIL_REASON.SUCCESS]
        wait_for(lambda: learner.own_address in learner.voter_addresses, what="the learner seeing its promotion",
                 timeout=30)


def test_a_learner_does_not_keep_a_leader_without_a_majority_of_voters():
    with group(3, learners=1) as (voters, (learner,)):
        leader = ready_leader(voters)
        wait_for(lambda: learner._getLeader() is not None, what="the learner following the leader", timeout=30)
        for m in voters:
            if m is not leader:
                m.destroy()
                wait_for(lambda m=m: not m.tick_thread_alive(), what="a voter stopped", timeout=30)
        # the learner keeps answering, but only voters count: the leader steps down after leaderFallbackTimeout
        wait_for(lambda: not leader.is_leader(), what="the leader stepping down", timeout=30)


def test_the_raft_port_refuses_membership_changes_by_the_admin_utility():
    with group(3) as (voters, _):
        leader = ready_leader(voters)
        answer = executeAdminCommand(["-conn", leader.own_address, "-add", "127.0.0.1:3"])
        assert "refused by raftmq" in answer
        assert "127.0.0.1:3" not in leader.voter_addresses
        status = executeAdminCommand(["-conn", leader.own_address, "-status"])
        assert "partner_nodes_count: 2" in status  # other utility messages still answer
