"""Raft's commit rules on one ReplicatedLog member, driven message by message (no ticks, no peers running).

Two holes in pysyncobj that raftmq closes (replication.raft_log):

* a snapshot-transfer append_entries (no ``prevLogIdx``) raised a follower's commit index over entries of an old
  term that no majority ever had: a deposed leader applied puts the group never committed (found by
  ``test_sigstop_leader_acknowledges_nothing_that_is_not_in_the_new_log``: the replicas' commit logs differed);
* an acknowledgement carries no term, so a leader counted a late one from an earlier term towards its new entries.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pysyncobj import SyncObjConf

from raftmq.replication.raft_log import TERM_KEY, ReplicatedLog
from tests.replication.in_process_members import RecordingMachine
from tests.support.processes import free_ports

NOOP = b"\x01"  # pysyncobj's no-op command: applying one touches no state machine


@pytest.fixture
def member() -> Iterator[ReplicatedLog]:
    """A member of three that never ticks: nothing happens but the messages a test hands it."""
    me, *peers = [f"127.0.0.1:{p}" for p in free_ports(3)]
    conf = SyncObjConf(autoTick=False, appendEntriesUseBatch=False, raftMinTimeout=2.0, raftMaxTimeout=4.0,
                       connectionTimeout=5.0)
    m = ReplicatedLog(me, peers, conf, machine=RecordingMachine())
    yield m
    m.destroy()


def _peers(m: ReplicatedLog) -> list:
    return sorted(m._SyncObj__otherNodes, key=lambda n: n.address)


def _receive(m: ReplicatedLog, sender, message: dict) -> None:
    m._SyncObj__onMessageReceived(sender, message)


def _follow_with_uncommitted_tail(m: ReplicatedLog) -> None:
    """Term 1: a leader sent entries 2-4; only 2 is known committed (commit index 2), 3 and 4 are not."""
    old_leader = _peers(m)[0]
    _receive(m, old_leader, {"type": "append_entries", "term": 1, "commit_index": 2, "prevLogIdx": 1,
                             "prevLogTerm": m.entry_term(1), "entries": [(NOOP, 2, 1), (NOOP, 3, 1), (NOOP, 4, 1)]})
    assert m.last_log_index() == 4 and m.raftCommitIndex == 2


@pytest.mark.parametrize("serialized", [None, (b"first part of a dump", True, False)],
                         ids=["no-dump-data", "dump-not-complete"])
def test_a_snapshot_message_commits_nothing_the_log_matching_check_did_not_cover(member, serialized):
    _follow_with_uncommitted_tail(member)
    new_leader = _peers(member)[1]
    # term 2's leader, far ahead (its commit index 50), sends its snapshot because this member is behind its log
    _receive(member, new_leader, {"type": "append_entries", "term": 2, "commit_index": 50, "serialized": serialized})
    assert member.raftCurrentTerm == 2
    assert member.raftCommitIndex == 2, "entries 3-4 of term 1 were never committed: they must not be applied"
    # the next regular append_entries replaces them; only then does the commit index move past 2
    _receive(member, new_leader, {"type": "append_entries", "term": 2, "commit_index": 3, "prevLogIdx": 2,
                                  "prevLogTerm": 1, "entries": [(NOOP, 3, 2)]})
    assert member.last_log_index() == 3 and member.entry_term(3) == 2 and member.raftCommitIndex == 3


def test_a_regular_append_entries_still_commits_what_matches(member):
    _follow_with_uncommitted_tail(member)
    _receive(member, _peers(member)[0], {"type": "append_entries", "term": 1, "commit_index": 4, "prevLogIdx": 4,
                                         "prevLogTerm": 1, "entries": []})
    assert member.raftCommitIndex == 4


def _lead_term(m: ReplicatedLog, term: int) -> None:
    m._SyncObj__setCurrentTerm(term, None)
    m._SyncObj__onBecomeLeader()  # appends its no-op of this term at the next index


def test_a_leader_ignores_an_acknowledgement_of_another_term(member):
    _follow_with_uncommitted_tail(member)
    _lead_term(member, 3)
    follower = _peers(member)[0]
    match = member._SyncObj__raftMatchIndex
    late = {"type": "next_node_idx", "next_node_idx": 6, "reset": False, "success": True, TERM_KEY: 1}
    _receive(member, follower, late)
    assert match[follower] == 0 and member.stale_acks_dropped == 1
    _receive(member, follower, {**late, TERM_KEY: 3})
    assert match[follower] == 5
    legacy = {k: v for k, v in late.items() if k != TERM_KEY}  # a member of an older version: counted as before
    _receive(member, _peers(member)[1], legacy)
    assert match[_peers(member)[1]] == 5


def test_acknowledgements_carry_the_term_they_answer(member):
    sent: list[dict] = []
    member._SyncObj__transport.send = lambda node, message: sent.append(message)
    _receive(member, _peers(member)[0], {"type": "append_entries", "term": 4, "commit_index": 1, "prevLogIdx": 1,
                                         "prevLogTerm": member.entry_term(1), "entries": [(NOOP, 2, 4)]})
    acks = [m for m in sent if m["type"] == "next_node_idx"]
    assert acks and acks[-1]["success"] and acks[-1]["next_node_idx"] == 3 and acks[-1][TERM_KEY] == 4


# A follower truncates only on a conflict (Raft's rule). pysyncobj dropped every entry after a re-sent range's end,
# matching or not: entries this member had acknowledged (as durable, under ``sync``) and that counted towards their
# commit were gone from its log until the leader sent them again. A power cut of the whole group in that window
# lost acknowledged messages (CI: 2 of 1,522 under ``sync``, tests/powerloss).

def _follow_with_acknowledged_tail(m: ReplicatedLog) -> list[dict]:
    """Term 1: a leader sent entries 2-6 and this member acknowledged all of them; only 2 is known committed."""
    sent: list[dict] = []
    m._SyncObj__transport.send = lambda node, message: sent.append(message)
    _receive(m, _peers(m)[0], {"type": "append_entries", "term": 1, "commit_index": 2, "prevLogIdx": 1,
                               "prevLogTerm": m.entry_term(1), "entries": [(NOOP, i, 1) for i in range(2, 7)]})
    assert m.last_log_index() == 6 and sent[-1]["next_node_idx"] == 7
    return sent


def test_a_resent_range_keeps_the_acknowledged_entries_after_it(member):
    sent = _follow_with_acknowledged_tail(member)
    # a re-send of 3-4 (a next-index reset, a reconnect), with a commit index past them
    _receive(member, _peers(member)[0], {"type": "append_entries", "term": 1, "commit_index": 6, "prevLogIdx": 2,
                                         "prevLogTerm": 1, "entries": [(NOOP, 3, 1), (NOOP, 4, 1)]})
    assert member.last_log_index() == 6 and [member.entry_term(i) for i in range(2, 7)] == [1] * 5
    assert sent[-1]["success"] and sent[-1]["next_node_idx"] == 5, "only what this message proved is acknowledged"
    assert member.raftCommitIndex == 4, "entries this message did not cover are not committed by it"
    _receive(member, _peers(member)[0], {"type": "append_entries", "term": 1, "commit_index": 6, "prevLogIdx": 6,
                                         "prevLogTerm": 1, "entries": []})
    assert member.raftCommitIndex == 6


def test_a_heartbeat_behind_the_log_keeps_it(member):
    sent = _follow_with_acknowledged_tail(member)
    _receive(member, _peers(member)[0], {"type": "append_entries", "term": 1, "commit_index": 2, "prevLogIdx": 3,
                                         "prevLogTerm": 1, "entries": []})
    assert member.last_log_index() == 6
    assert sent[-1]["success"] and sent[-1]["next_node_idx"] == 4


def test_a_resent_range_that_runs_past_the_log_appends_only_the_new_entries(member):
    _follow_with_acknowledged_tail(member)
    _receive(member, _peers(member)[0], {"type": "append_entries", "term": 1, "commit_index": 2, "prevLogIdx": 4,
                                         "prevLogTerm": 1, "entries": [(NOOP, i, 1) for i in range(5, 9)]})
    assert member.last_log_index() == 8 and [member.entry_term(i) for i in range(2, 9)] == [1] * 7


def test_a_conflicting_entry_still_truncates_from_there(member):
    sent = _follow_with_acknowledged_tail(member)
    new_leader = _peers(member)[1]
    # term 2's leader holds 2-4 of term 1 and its own entry 5: this member's 5-6 of term 1 were never committed
    _receive(member, new_leader, {"type": "append_entries", "term": 2, "commit_index": 5, "prevLogIdx": 2,
                                  "prevLogTerm": 1, "entries": [(NOOP, 3, 1), (NOOP, 4, 1), (NOOP, 5, 2)]})
    assert member.last_log_index() == 5 and member.entry_term(5) == 2
    assert sent[-1]["success"] and sent[-1]["next_node_idx"] == 6 and member.raftCommitIndex == 5


def test_a_conflict_with_applied_entries_rewinds_them_and_a_match_does_not(member):
    _follow_with_acknowledged_tail(member)
    member._machine.applied = [(i, b"") for i in range(2, 7)]  # as after a restart: the store applied 2-6
    leader = _peers(member)[0]
    _receive(member, leader, {"type": "append_entries", "term": 1, "commit_index": 2, "prevLogIdx": 1,
                              "prevLogTerm": 1, "entries": [(NOOP, i, 1) for i in range(2, 5)]})
    assert member._machine.applied_index() == 6 and member.rewound_entries == 0 and member.last_log_index() == 6
    # the group lost 5-6 (async, a majority's power cut) and term 2 wrote another entry 5
    _receive(member, _peers(member)[1], {"type": "append_entries", "term": 2, "commit_index": 2, "prevLogIdx": 3,
                                         "prevLogTerm": 1, "entries": [(NOOP, 4, 1), (NOOP, 5, 2)]})
    assert member._machine.applied_index() == 4 and member.rewound_entries == 2
    assert member.last_log_index() == 5 and member.entry_term(5) == 2


def test_a_dump_that_finishes_after_a_leaders_snapshot_does_not_empty_the_journal(member):
    # (seen in a bench run: a replacement member received several snapshots in a row, then every tick failed with
    # IndexError on the empty journal and it never became a voter)
    _follow_with_uncommitted_tail(member)
    journal = member._SyncObj__raftLog
    # this member wrote its own dump of entry 4; before the next tick compacts the journal to it, the leader's
    # snapshot of entry 3 replaces the journal with the snapshot's last two entries (pysyncobj's __loadDumpFile)
    journal.clear()
    journal.add(NOOP, 2, 1)
    journal.add(NOOP, 3, 2)
    member._SyncObj__deleteEntriesTo(4)  # pysyncobj's compaction once the dump is reported written
    assert [e[1] for e in journal] == [2, 3] and member.last_log_index() == 3
    member._onTick(0.0)  # ticks go on
    member._SyncObj__deleteEntriesTo(3)  # a dump the journal holds compacts as before
    assert [e[1] for e in journal] == [3]


def test_a_message_without_a_previous_entry_is_answered_with_a_reset_and_keeps_the_log(member):
    """pysyncobj sends ``prevLogIdx`` None when the leader no longer holds the entry before what it sends (it
    compacted it away); the follower answers with a reset instead of failing on the tick thread."""
    sent = _follow_with_acknowledged_tail(member)
    _receive(member, _peers(member)[0], {"type": "append_entries", "term": 1, "commit_index": 2, "prevLogIdx": None,
                                         "prevLogTerm": None, "entries": [(NOOP, 9, 1)]})
    assert member.last_log_index() == 6
    assert not sent[-1]["success"], sent[-1]
